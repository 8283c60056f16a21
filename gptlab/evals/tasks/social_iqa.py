"""Social IQa (Sap et al. 2019): reasoning about people's motives and reactions, 3 answers. As lm-eval's social_iqa:
"Q: {context} {question}\nA:" then " " + answerA / answerB / answerC; gold: label "1".."3" minus 1."""
NAME = "social_iqa"
HUB_REPO = "allenai/social_i_qa"
HUB_CONFIG = "default"
HUB_SPLIT = "validation"
HUB_FILES = "default/validation/*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = "17c8ece78c7b3f61cb21f53ad635940620c941542799580db06df5e47bf5e77e"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "default/train/*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"context": str, "question": str, "answerA": str, "answerB": str, "answerC": str, "label": str}
RANDOM_BASELINE = 1 / 3
CORE = True
LM_EVAL = "siqa/siqa.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def render(row):
    return {"context": f"Q: {row['context']} {row['question']}\nA:",
            "choices": [row["answerA"], row["answerB"], row["answerC"]], "gold": int(row["label"]) - 1}
