"""LAMBADA (Paperno et al. 2016), OpenAI's detokenized test split (5153 passages): predict a passage's last word.
As lm-eval's lambada_openai: the context is the text up to its last space, the one continuation is " " + the last
word (no further delimiter); acc: the model's greedy tokens are exactly that word's; bpb: of that word."""
NAME = "lambada"
HUB_REPO = "EleutherAI/lambada_openai"
HUB_CONFIG = "default"
HUB_SPLIT = "test"
HUB_FILES = "data/test-*.parquet"
REVISION = "main"
SHA256 = None  # no copy to pin it against here: pinned by REVISION only
COLUMNS = {"text": str}
RANDOM_BASELINE = 0.0
KIND = "greedy"
TARGET_DELIMITER = ""
# lm-eval's lambada_openai has only its test split (the one scored): it would draw shots from it, the row itself
# included; we refuse --fewshot on it instead
FEWSHOT_SPLIT = None
CORE = True
LM_EVAL = "lambada/lambada_openai.yaml"  # lm-eval's task of the same name (bench/bench_evals.py)


def render(row):
    words = row["text"].split(" ")
    return {"context": " ".join(words[:-1]), "choices": [" " + words[-1]], "gold": 0}
