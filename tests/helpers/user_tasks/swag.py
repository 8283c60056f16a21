"""SWAG (Zellers et al. 2018), regular config: the most plausible continuation of a video caption. As lm-eval's swag."""
NAME = "swag"
HUB_REPO = "allenai/swag"
HUB_CONFIG = "regular"
HUB_SPLIT = "validation"
HUB_FILES = "regular/validation-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "regular/train-*.parquet"
FEWSHOT_SHA256 = None
COLUMNS = {"video-id": str, "fold-ind": str, "startphrase": str, "sent1": str, "sent2": str, "gold-source": str,
           "ending0": str, "ending1": str, "ending2": str, "ending3": str, "label": int}
RANDOM_BASELINE = "uniform"
CORE = False


def render(row):
    return {"context": row["startphrase"], "choices": [row[f"ending{i}"] for i in range(4)], "gold": row["label"]}
