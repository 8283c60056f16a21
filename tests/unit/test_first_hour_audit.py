"""A new user's first hour, probed in process (issue 25 review): sample.py's --threads bound and prompts read from
a file written on Windows. End to end (split jobs, offline caches): tests/e2e/test_first_hour_audit_e2e.py."""
import io
import sys

import pytest

from conftest import REPO
from gptlab.core.cli import FlagValueError
from gptlab.core.errors import UserError
from gptlab.export import console

sys.path.insert(0, REPO)
import sample  # noqa: E402


def test_threads_refuses_a_count_that_crashed_torch_in_one_line():
    """`--threads 100000` made torch's thread pool crash the process (SIGSEGV, no error line) on this 2-core
    machine; 1024 (above any machine's cores) is the most accepted, and anything above it is one line."""
    assert sample.threads_flag("1024") == 1024
    assert sample.threads_flag("2") == 2
    for huge in ("1025", "100000", "9" * 30):
        with pytest.raises(FlagValueError, match=r"^must be at most 1024 \(.*\), got '" + huge + "'$"):
            sample.threads_flag(huge)
    parser = sample.build_parser()
    with pytest.raises(UserError) as err:
        parser.parse_args(["c.pt", "--threads", "100000"])
    assert str(err.value).startswith("--threads must be at most 1024 (") and "\n" not in str(err.value)


def test_prompts_from_a_crlf_file_carry_no_carriage_return(monkeypatch):
    """`sample.py --interactive < prompts.txt` with Windows line ends: each prompt is the text of its line, as
    for a Unix file; a \\r kept in the prompt was tokenized into it and echoed into the output (a \\r in a log)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("Once upon a time\r\nThe\r\n\r\nlast line without an end"))
    monkeypatch.setattr("sys.stdout", io.StringIO())
    reader = console.PromptReader()
    assert reader.echo and not reader.terminal
    assert list(reader) == ["Once upon a time", "The", "", "last line without an end"]
