"""The real validation rows of ../shared/data/evals as download_evals.py writes them, and a tiny checkpoint, for the
tests of evaluate.py and download_evals.py."""
import json
import os
import shutil

from conftest import HELLASWAG_VAL, SHARED_DATA

EVALS_DIR = os.path.join(SHARED_DATA, "evals")
SHARED_TASKS = ["arc_easy", "arc_challenge", "boolq", "piqa", "winogrande", "openbookqa", "social_iqa",
                "commonsense_qa", "copa"]
# the Hub copy's columns and order (tests/hub_standin.py); label a string there
HELLASWAG_HUB_COLUMNS = ["ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split",
                         "split_type", "label"]


def shared_rows(name, limit=None):
    """The rows of a task as the Hub holds them (hellaswag: the upstream lines in the Hub's columns)."""
    if name == "hellaswag":
        rows = []
        with open(HELLASWAG_VAL, encoding="utf-8") as f:
            for line in f:
                if limit is not None and len(rows) >= limit:
                    break
                r = json.loads(line)
                r["label"] = str(r["label"])
                rows.append({k: r[k] for k in HELLASWAG_HUB_COLUMNS})
        return rows
    with open(os.path.join(EVALS_DIR, f"{name}.jsonl"), encoding="utf-8") as f:
        lines = f.readlines() if limit is None else [f.readline() for _ in range(limit)]
    return [json.loads(line) for line in lines if line.strip()]


def write_rows(folder, name, rows):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.jsonl"), "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def data_dir_with(folder, names, limit=None):
    """A data/evals folder holding the first `limit` rows of each named task (whole files copied when no limit)."""
    os.makedirs(folder, exist_ok=True)
    for name in names:
        if name != "hellaswag" and limit is None:
            shutil.copyfile(os.path.join(EVALS_DIR, f"{name}.jsonl"), os.path.join(folder, f"{name}.jsonl"))
        else:
            write_rows(folder, name, shared_rows(name, limit))
    return str(folder)


LAMBADA_ROWS = [  # two passages in lambada_openai's layout (one `text` column), written for the tests
    {"text": "He held the lantern up high so that everyone could see the path ahead. \"Follow the light,\" said "
             "Tom"},
    {"text": "She opened the old box and found letters from her grandmother, each tied with a red ribbon"},
]


def tiny_checkpoint(folder, window_size=128):
    """(checkpoint, tokenizer) paths: a random 2-layer model, final windows 1 block, a 300-merge tokenizer."""
    from conftest import FINEWEB_150
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer

    tok = save_tiny_tokenizer(os.path.join(folder, "tok_v556.pkl"), read_docs(FINEWEB_150)[:20], 300)
    ckpt = os.path.join(folder, "step_000010.pt")
    save_random_checkpoint(ckpt, tok, num_layers=2, num_heads=2, model_dim=64, window_size=window_size)
    return ckpt, tok
