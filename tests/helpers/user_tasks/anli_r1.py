"""ANLI round 1 (Nie et al. 2020): does the premise entail the hypothesis. As lm-eval's anli_r1."""
NAME = "anli_r1"
HUB_REPO = "facebook/anli"
HUB_CONFIG = "plain_text"
HUB_SPLIT = "test_r1"
HUB_FILES = "plain_text/test_r1-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = "train_r1"
FEWSHOT_FILES = "plain_text/train_r1-*.parquet"
FEWSHOT_EXCLUDE_SELF = False  # its test_split is another split
COLUMNS = {"uid": str, "premise": str, "hypothesis": str, "label": int, "reason": str}
RANDOM_BASELINE = "uniform"
CORE = False


def render(row):
    return {"context": f"{row['premise']}\nQuestion: {row['hypothesis']} True, False, or Neither?\nAnswer:",
            "choices": ["True", "Neither", "False"], "gold": row["label"]}
