"""Arithmetic (Brown et al. 2020), single-digit three-operation problems: right when the model's greedy tokens are
exactly the answer. As lm-eval's arithmetic_1dc (loglikelihood output, no target delimiter, its process_docs)."""
NAME = "arithmetic_1dc"
HUB_REPO = "EleutherAI/arithmetic"
HUB_CONFIG = None
HUB_SPLIT = "validation"
HUB_FILES = "data/single_digit_three_ops-*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = None
FEWSHOT_SPLIT = "validation"  # its only split: shots from the scored rows, never the row itself
COLUMNS = {"context": str, "completion": str}
RANDOM_BASELINE = 0.0
KIND = "greedy"
TARGET_DELIMITER = ""
CORE = False


def render(row):
    context = row["context"].strip().replace("\n\n", "\n").replace("Q:", "Question:").replace("A:", "Answer:")
    return {"context": context, "choices": [row["completion"]], "gold": 0}
