"""OpenBookQA (Mihaylov et al. 2018), main: science questions with 4 answers. As lm-eval's openbookqa: the question
stem alone as the context (no "Question:"), then " " + each answer; gold: answerKey's position among the labels."""
NAME = "openbookqa"
HUB_REPO = "allenai/openbookqa"
HUB_CONFIG = "main"
HUB_SPLIT = "validation"
HUB_FILES = "main/validation-*.parquet"
REVISION = "main"
SHA256 = "90adcc55f4724ec367585978363aa451628d18093b6c827b2fd295128cd61e87"
# lm-eval's task: shots from its training_split; its test_split (test) is not that split, so it draws K
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "main/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
FEWSHOT_EXCLUDE_SELF = False
COLUMNS = {"question_stem": str, "choices": dict, "answerKey": str}
RANDOM_BASELINE = "uniform"
CORE = True
LM_EVAL = "openbookqa/openbookqa.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def render(row):
    return {"context": row["question_stem"], "choices": list(row["choices"]["text"]),
            "gold": row["choices"]["label"].index(row["answerKey"].lstrip())}
