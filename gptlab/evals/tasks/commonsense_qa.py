"""CommonsenseQA (Talmor et al. 2019): 5-way questions on ConceptNet concepts. As lm-eval's commonsense_qa: the
question and the answers listed as "A. ..." to "E. ...", then "Answer:"; the choices scored are the letters
" A" ... " E"; gold: answerKey's letter."""
NAME = "commonsense_qa"
HUB_REPO = "tau/commonsense_qa"
HUB_CONFIG = None
HUB_SPLIT = "validation"
HUB_FILES = "data/validation-*.parquet"
REVISION = "main"
SHA256 = "4c036e81eec3cb86477bc1b97c21c56aa17d92ab9f8537c855dc0cf724b05fe0"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "data/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"question": str, "choices": dict, "answerKey": str}
RANDOM_BASELINE = 0.2
CORE = True
LM_EVAL = "commonsense_qa/default.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)
LETTERS = ["A", "B", "C", "D", "E"]


def render(row):
    text = row["choices"]["text"]
    listed = "".join(f"\n{letter}. {text[i]}" for i, letter in enumerate(LETTERS))
    return {"context": f"Question: {row['question'].strip()}{listed}\nAnswer:", "choices": list(LETTERS),
            "gold": LETTERS.index(row["answerKey"])}
