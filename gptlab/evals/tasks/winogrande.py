"""WinoGrande (Sakaguchi et al. 2020), winogrande_xl: which of two names fills the blank `_`. As lm-eval's winogrande
(partial scoring): one context per option, the sentence up to the blank with the option in it; the continuation
scored is the same for both, " " + the rest of the sentence after the blank (stripped); gold: answer "1" → 0, "2" → 1.
acc_norm divides by that shared continuation's length, so it equals acc (lm-eval reports acc only)."""
NAME = "winogrande"
HUB_REPO = "allenai/winogrande"
HUB_CONFIG = "winogrande_xl"
HUB_SPLIT = "validation"
HUB_FILES = "winogrande_xl/validation-*.parquet"
REVISION = "main"
SHA256 = "69f3d7f3a900d775339b04c7de672609c40fca573e50f594f2ae66d8782505be"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "winogrande_xl/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"sentence": str, "option1": str, "option2": str, "answer": str}
RANDOM_BASELINE = 0.5
CORE = True
LM_EVAL = "winogrande/default.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def render(row):
    blank = row["sentence"].index("_")
    rest = row["sentence"][blank + 1:].strip()
    return {"context": [row["sentence"][:blank] + row["option1"], row["sentence"][:blank] + row["option2"]],
            "choices": [rest, rest], "gold": {"1": 0, "2": 1}[row["answer"]]}
