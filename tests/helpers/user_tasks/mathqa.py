"""MathQA (Amini et al. 2019): math word problems, five options given as one string. As lm-eval's mathqa."""
import re

NAME = "mathqa"
HUB_REPO = "regisss/math_qa"
HUB_CONFIG = None
HUB_SPLIT = "validation"
HUB_FILES = "data/validation-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "data/train-*.parquet"
FEWSHOT_SHA256 = None
FEWSHOT_EXCLUDE_SELF = False
COLUMNS = {"Problem": str, "Rationale": str, "options": str, "correct": str, "annotated_formula": str,
           "linear_formula": str, "category": str}
RANDOM_BASELINE = "uniform"
CORE = False


def render(row):
    choices = [c[4:].rstrip(" ,") for c in re.findall(r"[abcd] \) .*?, |e \) .*?$", row["options"])]
    return {"context": f"Question: {row['Problem']}\nAnswer:", "choices": choices,
            "gold": ["a", "b", "c", "d", "e"].index(row["correct"])}
