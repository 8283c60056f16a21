"""SciQ (Welbl et al. 2017): science exam questions with a supporting paragraph. As lm-eval's sciq (the
docs' example)."""
NAME = "sciq"
HUB_REPO = "allenai/sciq"
HUB_CONFIG = None
HUB_SPLIT = "validation"
HUB_FILES = "data/validation-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "data/train-*.parquet"
FEWSHOT_SHA256 = None
FEWSHOT_EXCLUDE_SELF = False
COLUMNS = {"question": str, "distractor1": str, "distractor2": str, "distractor3": str,
           "correct_answer": str, "support": str}
RANDOM_BASELINE = "uniform"
CORE = False
LM_EVAL = "sciq/sciq.yaml"  # lm-eval's task (bench/bench_evals.py --tasks_dir)


def render(row):
    return {"context": f"{row['support'].lstrip()}\nQuestion: {row['question']}\nAnswer:",
            "choices": [row["distractor1"], row["distractor2"], row["distractor3"], row["correct_answer"]],
            "gold": 3}
