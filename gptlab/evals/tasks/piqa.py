"""PIQA (Bisk et al. 2020): which of two solutions reaches a physical goal. As lm-eval's piqa:
"Question: {goal}\nAnswer:" then " " + sol1 / sol2; gold: label (0 or 1)."""
NAME = "piqa"
HUB_REPO = "ybisk/piqa"
HUB_CONFIG = "plain_text"
HUB_SPLIT = "validation"
HUB_FILES = "plain_text/validation/*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = "61533005e22f175534909b1ec8eacb6da03c233933558d1bafb15787453b1f55"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "plain_text/train/*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"goal": str, "sol1": str, "sol2": str, "label": int}
RANDOM_BASELINE = 0.5
CORE = True
LM_EVAL = "piqa/piqa.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def render(row):
    return {"context": f"Question: {row['goal']}\nAnswer:", "choices": [row["sol1"], row["sol2"]], "gold": row["label"]}
