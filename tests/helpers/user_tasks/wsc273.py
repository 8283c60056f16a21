"""WSC273 (Levesque et al. 2012): Winograd schemas, partial scoring as WinoGrande. As lm-eval's wsc273."""
NAME = "wsc273"
HUB_REPO = "lighteval/winograd_wsc"
HUB_CONFIG = "wsc273"
HUB_SPLIT = "test"
HUB_FILES = "wsc273/test-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = None
COLUMNS = {"text": str, "pronoun": str, "pronoun_loc": int, "quote": str, "quote_loc": int, "options": list,
           "label": int, "source": str}
RANDOM_BASELINE = 0.5
CORE = False
UPPER = ["A", "An", "The", "She", "He", "It", "They", "My", "His", "Her", "Their"]


def normalize(row, text, option):
    if row["pronoun"].lower() in ["my", "his", "her", "our", "their"]:
        option += "'s"
    pronoun = option.split()[0]
    if text[row["pronoun_loc"] - 2] != "." and pronoun in UPPER:
        return option.replace(pronoun, pronoun.lower())
    return option


def render(row):
    text = row["text"].replace("  ", " ")
    options = [normalize(row, text, o) for o in row["options"]]
    rest = text[row["pronoun_loc"] + len(row["pronoun"]):]
    template = text[:row["pronoun_loc"]]
    return {"context": [template + options[0], template + options[1]], "choices": [rest, rest], "gold": row["label"]}
