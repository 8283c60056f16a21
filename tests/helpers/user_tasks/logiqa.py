"""LogiQA (Liu et al. 2020): logical reasoning over a passage, 4 options, letter label. As lm-eval's logiqa."""
NAME = "logiqa"
HUB_REPO = "EleutherAI/logiqa"
HUB_CONFIG = "logiqa"
HUB_SPLIT = "validation"
HUB_FILES = "logiqa/validation-*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = None
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "logiqa/train/*.parquet"
FEWSHOT_SHA256 = None
FEWSHOT_EXCLUDE_SELF = False
COLUMNS = {"label": str, "context": str, "question": str, "options": list}
RANDOM_BASELINE = "uniform"
CORE = False


def render(row):
    prompt = "Passage: " + row["context"] + "\n" + "Question: " + row["question"] + "\nChoices:\n"
    for letter, option in zip("ABCD", row["options"]):
        prompt += f"{letter}. {option}\n"
    return {"context": prompt + "Answer:", "choices": list(row["options"]),
            "gold": "abcd".index(row["label"].strip())}
