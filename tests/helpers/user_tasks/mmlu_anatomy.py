"""MMLU (Hendrycks et al. 2021), anatomy: 4-option exam questions answered by letter. As lm-eval's mmlu_anatomy: its
description before everything, the first K rows of the dev split as shots (fewshot_config sampler first_n)."""
NAME = "mmlu_anatomy"
HUB_REPO = "cais/mmlu"
HUB_CONFIG = "anatomy"
HUB_SPLIT = "test"
HUB_FILES = "anatomy/test-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = "dev"  # lm-eval's fewshot_split
FEWSHOT_FILES = "anatomy/dev-*.parquet"
FEWSHOT_SHA256 = None
FEWSHOT_EXCLUDE_SELF = False  # its test_split (test) is not its fewshot_split
FEWSHOT_SAMPLER = "first_n"
DESCRIPTION = "The following are multiple choice questions (with answers) about anatomy.\n\n"
COLUMNS = {"question": str, "subject": str, "choices": list, "answer": int}
RANDOM_BASELINE = 0.25
CORE = False


def render(row):
    c = row["choices"]
    return {"context": f"{row['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:",
            "choices": ["A", "B", "C", "D"], "gold": row["answer"]}
