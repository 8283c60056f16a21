"""BoolQ (Clark et al. 2019): a yes/no question about a Wikipedia passage. As lm-eval's boolq:
"{passage}\nQuestion: {question}?\nAnswer:" then " no" / " yes"; gold 1 when the answer is true.
lm-eval reads super_glue's copy (label 0/1); we read google/boolq, the original, whose `answer` is a bool."""
NAME = "boolq"
HUB_REPO = "google/boolq"
HUB_CONFIG = None
HUB_SPLIT = "validation"
HUB_FILES = "data/validation-*.parquet"
REVISION = "main"
SHA256 = "dbad2984e58eaa2184b6d0acfe2e94a73b9868381046255d6be6c3bed9088b68"
# lm-eval's task: shots from its training_split; its test_split is unset, as its fewshot_split, so it
# drops the row itself from K + 1 drawn (FEWSHOT_EXCLUDE_SELF, the default)
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "data/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
COLUMNS = {"question": str, "answer": bool, "passage": str}
RANDOM_BASELINE = 0.5
CORE = True
LM_EVAL = "super_glue/boolq/default.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)
# lm-eval reads super_glue's BoolQ (label 0/1); google/boolq's answer is the same bit
LM_EVAL_OVERRIDES = {"doc_to_target": "{{1 if answer else 0}}"}


def render(row):
    return {"context": f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:", "choices": ["no", "yes"],
            "gold": int(row["answer"])}
