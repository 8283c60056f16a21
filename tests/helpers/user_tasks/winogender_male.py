"""WinoGender (Rudinger et al. 2018), the male-pronoun sentences: whom does the pronoun refer to, the occupation or
the participant. As lm-eval's winogender_male (its process_docs keeps the rows whose gender is male)."""
NAME = "winogender_male"
HUB_REPO = "oskarvanderwal/winogender"
HUB_CONFIG = "all"
HUB_SPLIT = "test"
HUB_FILES = "all/test-*.parquet"
REVISION = "main"
SHA256 = None
FEWSHOT_SPLIT = None  # only a test split
COLUMNS = {"sentid": str, "sentence": str, "pronoun": str, "occupation": str, "participant": str, "gender": str,
           "target": str, "label": int}
RANDOM_BASELINE = 0.5
CORE = False


def KEEP_ROW(row):
    return row["gender"] == "male"


def render(row):
    return {"context": f"{row['sentence']} ‘{row['pronoun'].capitalize()}’ refers to the",
            "choices": [row["occupation"], row["participant"]], "gold": row["label"]}
