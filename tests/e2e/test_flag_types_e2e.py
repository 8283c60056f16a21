"""A bad flag value on the command line of a script: one error: line, exit code 2."""
import pytest

from conftest import run_script


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
