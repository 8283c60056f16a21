"""BLiMP (Warstadt et al. 2020), adjunct_island: a grammatical sentence against an ungrammatical one, no context.
As lm-eval's blimp_adjunct_island (which scores the dataset's train split, its only one)."""
NAME = "blimp_adjunct_island"
HUB_REPO = "nyu-mll/blimp"
HUB_CONFIG = "adjunct_island"
HUB_SPLIT = "train"
HUB_FILES = "adjunct_island/train-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = None  # num_fewshot: 0
COLUMNS = {"sentence_good": str, "sentence_bad": str, "field": str, "linguistics_term": str, "UID": str,
           "simple_LM_method": bool, "one_prefix_method": bool, "two_prefix_method": bool,
           "lexically_identical": bool, "pair_id": int}
RANDOM_BASELINE = 0.5
CORE = False


def render(row):
    return {"context": "", "choices": [row["sentence_good"], row["sentence_bad"]], "gold": 0}
