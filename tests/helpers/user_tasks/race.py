"""RACE (Lai et al. 2017), high school: an article and its questions; all but the last question answered in the
context, the last one scored. As lm-eval's race (EleutherAI/race, one row per article)."""
import ast

NAME = "race"
HUB_REPO = "EleutherAI/race"
HUB_CONFIG = "high"
HUB_SPLIT = "test"
HUB_FILES = "high/test-*.parquet"
REVISION = "refs/convert/parquet"
SHA256 = None
FEWSHOT_SPLIT = None   # lm-eval's race has only a test split
COLUMNS = {"article": str, "problems": str}
RANDOM_BASELINE = 0.25
CORE = False


def answer(problem):
    return problem["options"]["ABCD".index(problem["answer"])]


def render(row):
    problems = ast.literal_eval(row["problems"])
    text = "Article: " + row["article"] + "\n\n"
    for p in problems[:-1]:
        if p["question"][-6:] == "  _  .":
            text += p["question"][:-5] + answer(p) + "\n"
        else:
            text += "Question: " + p["question"] + "\n" + "Answer: " + answer(p) + "\n"
    last = problems[-1]
    return {"context": text + last["question"], "choices": [last["options"][i] for i in range(4)],
            "gold": "ABCD".index(last["answer"])}
