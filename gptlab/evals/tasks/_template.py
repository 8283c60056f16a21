"""TEMPLATE: copy me to gptlab/evals/tasks/<name>.py, fill in every field, then
`python download_evals.py --tasks <name>` and `python evaluate.py CKPT --tasks <name>` (docs/evals.md, "Add a task").

Say here what the benchmark is, where its rows come from, and which lm-eval-harness task it renders like.
"""
NAME = "my_task"  # the file's name without .py
HUB_REPO = "someone/some_dataset"  # the Hugging Face dataset
HUB_CONFIG = None  # its config (subset), or None
HUB_SPLIT = "validation"  # the split scored
HUB_FILES = "data/validation-*.parquet"  # that split's parquet file(s) in the repo (a glob; see the repo's Files tab)
REVISION = "main"  # a commit hash pins the rows; so does SHA256
SHA256 = None  # sha256 of data/evals/<NAME>.jsonl as download_evals.py writes it; None: not checked
# --fewshot K: the split shots come from, as lm-eval's task draws them (its fewshot_split, else training_split, else
# validation_split); None: --fewshot > 0 is refused. Its files go to data/evals/<NAME>.fewshot.jsonl.
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "data/train-*.parquet"  # that split's parquet file(s), a glob; None when it is HUB_SPLIT
FEWSHOT_SHA256 = None  # sha256 of data/evals/<NAME>.fewshot.jsonl (download_evals.py prints it); None: not checked
# FEWSHOT_EXCLUDE_SELF = False  # only if lm-eval's task has a test_split other than its few-shot split (arc_easy)
# FEWSHOT_SAMPLER = "first_n"  # only if lm-eval's fewshot_config says sampler: first_n (MMLU): the first K rows
COLUMNS = {"question": str, "options": list, "answer": int}  # every row must have these, of these types
# (a column that may be null: (str, None))
RANDOM_BASELINE = "uniform"  # 1 / number of choices; or a number: the accuracy of a random guess
CORE = False  # True: part of --tasks core (the lab's fixed suite: its figure then moves)
# DESCRIPTION = "The following are ...\n\n"  # lm-eval's description: once before the shots and the context
# KEEP_ROW = lambda row: row["gender"] == "male"  # only if lm-eval's process_docs drops rows: False leaves one out
# KIND = "greedy"  # only for one-choice tasks scored by greedy match (as LAMBADA); default "multiple_choice"
# TARGET_DELIMITER = " "  # between the context and each choice (the default)
# FEWSHOT_DELIMITER = "\n\n"  # after each shot (the default)
# FEWSHOT_TARGET_DELIMITER = " "  # between a shot's context and its answer (default: TARGET_DELIMITER)
# LM_EVAL = "my_task/my_task.yaml"  # lm-eval's task file it renders as (bench/bench_evals.py checks against it)


def render(row):
    """One row → the context, the choices (each scored after TARGET_DELIMITER) and the gold choice's index."""
    return {"context": f"Question: {row['question']}\nAnswer:", "choices": list(row["options"]), "gold": row["answer"]}
