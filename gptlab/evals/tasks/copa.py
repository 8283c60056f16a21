"""COPA (Roemmele et al. 2011), from SuperGLUE: the more plausible cause or effect of a premise. As lm-eval's copa:
the premise without its final period, then " because" (cause) or " therefore" (effect); each choice is " " + the
alternative with its first letter lower-cased, and lm-eval's target delimiter " " comes before it too, so the
continuation starts with TWO spaces (lm-eval's own quirk, kept so that figures mean the same); gold: label."""
NAME = "copa"
HUB_REPO = "aps/super_glue"
HUB_CONFIG = "copa"
HUB_SPLIT = "validation"
HUB_FILES = "copa/validation-*.parquet"
REVISION = "main"
SHA256 = "fbec30f4988f13714e8f51752cdcf1294ac237d4fb948353b7a55c5d0c0ee077"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "copa/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"premise": str, "choice1": str, "choice2": str, "question": str, "label": int}
RANDOM_BASELINE = 0.5
CORE = True
LM_EVAL = "super_glue/copa/default.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def _lower_first(text):
    return text[0].lower() + text[1:]


def render(row):
    connector = {"cause": "because", "effect": "therefore"}[row["question"]]
    return {"context": row["premise"].strip()[:-1] + f" {connector}",
            "choices": [" " + _lower_first(row["choice1"]), " " + _lower_first(row["choice2"])], "gold": row["label"]}
