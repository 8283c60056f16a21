"""Every script's --help works offline, without a GPU, and shows each default once."""
import re

import pytest

from conftest import run_script

SCRIPTS = ["train_tokenizer.py", "download_fineweb.py", "download_hellaswag.py", "train_gpt.py",
           "compare_experiments.py", "sweep.py", "compare_tokenizers.py", "export_hf.py", "sample.py", "judge.py",
           "make_paper.py"]


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


@pytest.mark.parametrize("script", SCRIPTS + ["bench/bench_train.py", "bench/bench_shards.py",
                                              "bench/bench_tokenizer.py", "bench/bench_anchor.py"])
def test_a_bad_flag_is_one_error_line_not_the_usage_block(script):
    name = script.split("/")[-1]
    required = {"download_fineweb.py": ["--tokenizer", "t.pkl"], "compare_tokenizers.py": ["t.pkl"],
                "export_hf.py": ["c.pt", "out"], "sample.py": ["c.pt"],
                "judge.py": ["a", "b", "--judge_url", "http://127.0.0.1:9/v1", "--judge_model", "m"],
                "make_paper.py": ["r", "--out", "o"]}.get(script, [])
    proc = run_script([script, "--no_such_flag"] + required)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: unrecognized arguments: --no_such_flag (see {name} --help)", proc.stderr


@pytest.mark.parametrize("script, args, message", [
    ("train_tokenizer.py", ["--vocabsize", "abc"], "argument --vocabsize: invalid int value: 'abc'"),
    ("download_fineweb.py", [], "the following arguments are required: --tokenizer"),
    ("train_gpt.py", ["--preset", "nope"], "argument --preset: invalid choice: 'nope'"),
])
def test_a_bad_value_is_one_error_line(script, args, message):
    proc = run_script([script] + args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), proc.stderr
    assert lines[0].endswith(f"(see {script} --help)")


def test_resume_still_finds_the_flags_given_with_the_one_line_parser():
    """gptlab.train.flags.explicit_flags parses the command line again with every default suppressed."""
    from gptlab.core.cli import ArgumentParser
    from gptlab.train.flags import explicit_flags

    def build_parser():
        parser = ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.1)
        parser.add_argument("--width", type=int, default=8)
        parser.add_argument("--resume", default=None)
        return parser

    assert explicit_flags(build_parser, ["--resume", "c.pt", "--lr", "2"]) == {"resume", "lr"}
