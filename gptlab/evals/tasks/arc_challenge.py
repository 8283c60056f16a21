"""ARC-Challenge (Clark et al. 2018): the ARC questions that retrieval and co-occurrence methods got wrong. Rendered
as ARC-Easy (lm-eval's arc_challenge includes arc_easy's template). Validation split, 299 rows."""
from gptlab.evals.tasks.arc_easy import COLUMNS, RANDOM_BASELINE, render  # noqa: F401 (the same rendering)

NAME = "arc_challenge"
HUB_REPO = "allenai/ai2_arc"
HUB_CONFIG = "ARC-Challenge"
HUB_SPLIT = "validation"
HUB_FILES = "ARC-Challenge/validation-*.parquet"
REVISION = "main"
SHA256 = "e91e22bf541b70fb1940476e45dae46a986a72dff25e822c8b3205b4367c41ab"
# lm-eval's task: shots from its training_split; its test_split (test) is not that split, so it draws K
FEWSHOT_SPLIT = "train"
FEWSHOT_FILES = "ARC-Challenge/train-*.parquet"
FEWSHOT_SHA256 = None  # no copy of the train rows at hand: pinned by REVISION only
FEWSHOT_EXCLUDE_SELF = False
CORE = True
LM_EVAL = "arc/arc_challenge.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)
