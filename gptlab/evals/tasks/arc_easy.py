"""ARC-Easy (Clark et al. 2018): grade-school science questions with 3 to 5 answers. As lm-eval's arc_easy:
"Question: {question}\nAnswer:" then " " + each answer's text; gold: the answerKey's position among the labels.
We score the validation split (570 rows); lm-eval's default is the test split."""
NAME = "arc_easy"
HUB_REPO = "allenai/ai2_arc"
HUB_CONFIG = "ARC-Easy"
HUB_SPLIT = "validation"
HUB_FILES = "ARC-Easy/validation-*.parquet"
REVISION = "main"
SHA256 = "1591d2431c45b1712f9c9e7032bd2dfcba863a5eec748c88b2ec11cf7c7da6c5"
# lm-eval's task: shots from its training_split; its test_split (test) is not that split, so it draws K
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "ARC-Easy/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
FEWSHOT_EXCLUDE_SELF = False
COLUMNS = {"question": str, "choices": dict, "answerKey": str}
RANDOM_BASELINE = "uniform"
CORE = True
LM_EVAL = "arc/arc_easy.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def render(row):
    return {"context": f"Question: {row['question']}\nAnswer:", "choices": list(row["choices"]["text"]),
            "gold": row["choices"]["label"].index(row["answerKey"])}
