"""Every script's --help works offline, without a GPU, and shows each default once."""
import re

import pytest

from conftest import run_script

SCRIPTS = ["train_tokenizer.py", "download_fineweb.py", "download_hellaswag.py", "train_gpt.py",
           "compare_experiments.py", "export_hf.py", "sample.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_shows_each_default_once(script):
    proc = run_script([script, "--help"], check=True)
    text = proc.stdout
    assert "(default: None)" not in text and "(default: True)" not in text and "(default: False)" not in text
    entries = re.split(r"\n  (?=-)", text)  # one entry per flag
    for entry in entries:
        assert entry.count("default") <= 1, entry


def test_train_gpt_help_shows_the_model_defaults():
    text = " ".join(run_script(["train_gpt.py", "--help"], check=True).stdout.split())
    for flag, default in [("--num_layers", "12"), ("--num_heads", "6"), ("--model_dim", "384"),
                          ("--train_steps", "1000"), ("--seed", "0"), ("--batch_size", "65536")]:
        assert re.search(re.escape(flag) + r" [A-Z_]+ [^-]*\(default: " + default + r"\)", text), flag
