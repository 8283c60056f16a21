"""Social IQa (Sap et al. 2019): reasoning about people's motives and reactions, 3 answers. As lm-eval's social_iqa:
"Q: {context} {question}\nA:" then " " + answerA / answerB / answerC; gold: label "1".."3" minus 1."""
NAME = "social_iqa"
HUB_REPO = "allenai/social_i_qa"
HUB_CONFIG = "default"
HUB_SPLIT = "validation"
HUB_FILES = "default/validation/*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = "17c8ece78c7b3f61cb21f53ad635940620c941542799580db06df5e47bf5e77e"
COLUMNS = {"context": str, "question": str, "answerA": str, "answerB": str, "answerC": str, "label": str}
RANDOM_BASELINE = 1 / 3
CORE = True


def render(row):
    return {"context": f"Q: {row['context']} {row['question']}\nA:",
            "choices": [row["answerA"], row["answerB"], row["answerC"]], "gold": int(row["label"]) - 1}
