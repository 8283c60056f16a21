"""HellaSwag (Zellers et al. 2019): the most plausible ending of an ActivityNet or WikiHow context, 4 endings.
As lm-eval's hellaswag, its preprocessing included: context "{activity_label}: {ctx_a} {ctx_b capitalized}", each
ending " " + itself, both with " [title]" → ". ", other [bracketed] tags removed and double spaces made single.
(train_gpt.py's in-run HellaSwag scores llm.c's way instead: the raw ctx, no preprocessing.)"""
import re

NAME = "hellaswag"
HUB_REPO = "Rowan/hellaswag"
HUB_CONFIG = None
HUB_SPLIT = "validation"
HUB_FILES = "data/validation-*.parquet"
REVISION = "main"
SHA256 = "d5c08c3e5771307e73886dc9d2744df8ca5f372a7857f32fe77df8c58942f950"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "data/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"activity_label": str, "ctx_a": str, "ctx_b": str, "endings": list, "label": str}
RANDOM_BASELINE = 0.25
CORE = True
LM_EVAL = "hellaswag/hellaswag.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def preprocess(text):
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def render(row):
    context = row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize()
    return {"context": preprocess(context), "choices": [preprocess(e) for e in row["endings"]],
            "gold": int(row["label"])}
