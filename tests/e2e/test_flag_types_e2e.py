"""A bad flag value on the command line of a script: one error: line, exit code 2."""
import os

import pytest

from conftest import REPO, SAMPLE_DATA, run_script, run_scripts


@pytest.mark.parametrize("args, line", [
    (["train_gpt.py", "--train_steps", "0"],
     "error: --train_steps must be a positive integer, got 0 (see train_gpt.py --help)"),
    (["train_gpt.py", "--cooldown_frac", "1.5"],
     "error: --cooldown_frac must be between 0 and 1, got 1.5 (see train_gpt.py --help)"),
    (["download_fineweb.py", "--tokenizer", "t.pkl", "--num_shards", "0"],
     "error: --num_shards must be at least 1, got 0 (see download_fineweb.py --help)"),
    (["sample.py", "c.pt", "--temperature", "-1"],
     "error: --temperature must be >= 0 (0: greedy), got -1.0 (see sample.py --help)"),
])
def test_a_bad_value_on_the_command_line_is_one_error_line(args, line):
    proc = run_script(args, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [line], proc.stderr


def test_a_path_that_is_not_utf8_is_one_error_line_in_every_script_and_nothing_is_made(tiny, tmp_path):
    """docs/faults.md: a path holding bytes that are not UTF-8 (a Latin-1 file name, surrogateescape'd in sys.argv)
    is one error line naming the flag, exit status 2, before anything is made (issue 37, item 7: train_gpt.py
    and download_fineweb.py ended in a UnicodeEncodeError traceback, train_gpt.py with a half-made run folder)."""
    out = tmp_path / "out"
    out.mkdir()
    bad = os.fsdecode(os.fsencode(str(out)) + b"/caf\xe9")  # subprocess passes it back as those very bytes
    train = ["--tokenizer", tiny["tokenizer"], "--train_files", tiny["train"], "--val_files", tiny["val"],
             "--train_seq_len", "128", "--val_seq_len", "128", "--model_dim", "64", "--num_layers", "2",
             "--batch_size", "256", "--device_batch_size", "256", "--train_steps", "2", "--val_loss_every", "0",
             "--val_steps", "1", "--window_size", "128", "--hellaswag_limit", "0", "--sample_tokens", "0"]
    sample = os.path.join(SAMPLE_DATA, "fineweb_edu_150docs.jsonl")
    cases = [  # (the flag named, the command)
        ("--experiments_dir", ["train_gpt.py", *train, "--experiments_dir", bad]),
        ("--hellaswag_path", ["train_gpt.py", *train, "--experiments_dir", out, "--hellaswag_path", bad]),
        ("--train_files", ["train_gpt.py", *train, "--experiments_dir", out, "--train_files", bad]),
        ("--out", ["train_tokenizer.py", "--input", sample, "--samples", "2000", "--vocabsize", "260", "--out", bad]),
        ("--input", ["train_tokenizer.py", "--input", bad, "--samples", "2000", "--vocabsize", "260", "--out", out]),
        ("--out", ["download_fineweb.py", "--tokenizer", tiny["tokenizer"], "--input", sample, "--out", bad]),
        ("--out", ["download_hellaswag.py", "--source", os.path.join(SAMPLE_DATA, "hellaswag_val.jsonl.gz"),
                   "--out", bad + ".jsonl"]),
        ("out_dir", ["export_hf.py", "missing.pt", bad]),
        ("checkpoint", ["sample.py", bad + ".pt"]),
        ("--plot", ["compare_experiments.py", "--experiments", os.path.join(REPO, "experiments"), "--no-write",
                    "--plot", bad + ".png"]),
        ("--experiments_dir", ["sweep.py", "--grid", "lr_scale=1,2", "--experiments_dir", bad, "--", *train]),
    ]
    for (flag, args), proc in zip(cases, run_scripts([args for _, args in cases], timeout=300)):
        assert proc.returncode == 2 and proc.stdout == "", (args[0], flag, proc.stdout[-500:], proc.stderr[-2000:])
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {flag} '{out}/caf\\xe9"), (args[0], proc.stderr)
        assert "is not UTF-8 text" in lines[0], (args[0], proc.stderr)
    assert os.listdir(out) == []


def test_an_empty_path_is_one_error_line_in_every_script_and_nothing_is_made(tmp_path):
    """docs/faults.md: an empty path is refused, naming the flag (train_gpt.py --resume '' trained from scratch,
    train_tokenizer.py --out '' wrote into the current folder, download_hellaswag.py --out '' said
    "could not write  (No such file...)")."""
    cases = [  # (the flag named, the command); each names the empty path among otherwise good flags
        ("--resume", ["train_gpt.py", "--resume", ""]),
        ("--experiments_dir", ["train_gpt.py", "--experiments_dir", ""]),
        ("--tokenizer", ["train_gpt.py", "--tokenizer", ""]),
        ("--train_files", ["train_gpt.py", "--train_files", ""]),
        ("--hellaswag_path", ["train_gpt.py", "--hellaswag_path", ""]),
        ("--out", ["train_tokenizer.py", "--input", os.path.join(SAMPLE_DATA, "fineweb_edu_150docs.jsonl"),
                   "--samples", "2000", "--vocabsize", "260", "--out", ""]),
        ("--input", ["download_fineweb.py", "--tokenizer", "t.pkl", "--input", ""]),
        ("--out", ["download_hellaswag.py", "--source", os.path.join(SAMPLE_DATA, "hellaswag_val.jsonl.gz"),
                   "--out", ""]),
        ("out_dir", ["export_hf.py", "c.pt", ""]),
        ("checkpoint", ["sample.py", ""]),
        ("--experiments", ["compare_experiments.py", "--experiments", ""]),
        ("--text", ["compare_tokenizers.py", "gpt2", "--text", ""]),
        ("checkpoint", ["-m", "gptlab.evals.checkpoint", ""]),
        # evaluate.py --out '' wrote the default folder, --data_dir '' read the current one
        ("CHECKPOINT_OR_RUN", ["evaluate.py", ""]),
        ("--out", ["evaluate.py", "c.pt", "--out", ""]),
        ("--data_dir", ["evaluate.py", "c.pt", "--data_dir", ""]),
        ("--tasks_dir", ["evaluate.py", "c.pt", "--tasks_dir", ""]),
        ("--data_dir", ["download_evals.py", "--data_dir", ""]),  # wrote copa.jsonl ... into the current folder
        ("--tasks_dir", ["download_evals.py", "--tasks_dir", ""]),
    ]
    commands = [args if args[0] == "-m" else [os.path.join(REPO, args[0]), *args[1:]] for _, args in cases]
    procs = run_scripts(commands, timeout=300, cwd=str(tmp_path), env_extra={"PYTHONPATH": REPO})
    for (flag, args), proc in zip(cases, procs):
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout[-500:], proc.stderr[-2000:])
        prog = "checkpoint.py" if args[0] == "-m" else args[0]
        assert proc.stderr.splitlines() == [f"error: {flag} must not be empty; give a path (see {prog} --help)"], (
            args, proc.stderr)
    assert os.listdir(tmp_path) == []
