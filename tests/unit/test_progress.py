"""Progress output that suits its stream: tqdm on a terminal, plain lines (no control characters) elsewhere, and
--demo's token colours only on a terminal."""
import io
import os
import re

import pytest

from gptlab.core.progress import LineProgress, is_terminal, progress_bar

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # every control character but the newline


def test_a_file_gets_plain_lines_and_a_terminal_gets_tqdm(tmp_path):
    from tqdm import tqdm

    with open(tmp_path / "log", "w") as f:
        assert not is_terminal(f)
        assert isinstance(progress_bar(total=3, file=f), LineProgress)
    main, other = os.openpty()
    try:
        with os.fdopen(other, "w") as tty:
            assert is_terminal(tty)
            bar = progress_bar(total=3, file=tty)
            assert isinstance(bar, tqdm)
            bar.close()
    finally:
        os.close(main)
    closed = io.StringIO()
    closed.close()
    assert not is_terminal(closed) and not is_terminal(object())


def test_nested_bars_in_a_log_write_whole_lines_without_escapes():
    """Training's bar with HellaSwag's inside it: on a terminal tqdm moves the cursor up (ESC[A) between them."""
    log = io.StringIO()
    outer = progress_bar(total=4096, unit="tok", unit_scale=True, desc="train", file=log)
    outer.interval_s = 0  # a line per update, so every report is looked at
    for _ in range(2):
        outer.update(1024)
        with progress_bar(total=40, unit="ex", desc="hellaswag", file=log, leave=False) as inner:
            inner.interval_s = 0
            for _ in range(4):
                inner.update(10)
    outer.update(2048)
    outer.close()
    text = log.getvalue()
    assert not CONTROL.search(text), repr(text)
    lines = text.split("\n")
    assert lines[-1] == "" and all(lines[:-1])
    assert sum(line.startswith("train:") for line in lines) == 4  # three updates and the close
    assert sum(line.startswith("hellaswag:") for line in lines) == 8  # its updates; leave=False: not its close
    assert "4.10k/4.10k" in lines[-2] and "100%" in lines[-2] and "tok/s" in lines[-2]  # 4096 tokens, scaled
    assert "40/40" in [line for line in lines if line.startswith("hellaswag:")][-1]


def test_a_log_line_is_written_per_interval_and_on_close_only():
    log = io.StringIO()
    bar = LineProgress(total=10, desc="x", file=log, interval_s=3600)
    for _ in range(10):
        bar.update(1)
    assert log.getvalue() == ""  # the interval has not passed
    bar.set_postfix_str("1.5 MB/s")
    bar.close()
    bar.close()  # twice: one line
    assert log.getvalue().count("\n") == 1 and "10/10" in log.getvalue() and "1.5 MB/s" in log.getvalue()
    quiet = io.StringIO()
    with LineProgress(total=2, file=quiet, disable=True) as off:
        off.update(2)
    with LineProgress(total=2, file=quiet, leave=False, interval_s=3600) as transient:
        transient.update(2)
    assert quiet.getvalue() == ""


def test_demo_colours_tokens_on_a_terminal_and_separates_them_elsewhere():
    """render(): one ANSI background colour per token (colour=True) or `|` between tokens, over the same tokens:
    with the merge (97, 98) (a, b) the text 'ab ab' pre-tokenizes (gpt2 pattern) to 'ab', ' ab': tokens ab, ' ', ab."""
    from gptlab.tokenizer.demo import render
    from gptlab.tokenizer.format import PATTERNS

    pattern = PATTERNS["gpt2"]
    header = "--- after 1 merges: 3 tokens for 5 bytes (1.67 bytes/token) ---\n"
    assert render("ab ab", pattern, [(97, 98)], colour=False) == header + "ab| |ab\n"
    coloured = render("ab ab", pattern, [(97, 98)], colour=True)
    assert coloured.startswith(header)
    segments = re.findall(r"\x1b\[48;5;(\d+)m\x1b\[30m(.*?)\x1b\[0m", coloured[len(header):], flags=re.S)
    assert [text for _, text in segments] == ["ab", " ", "ab"]
    assert segments[0][0] != segments[1][0] != segments[2][0]  # neighbours differ
    assert coloured == header + "".join(f"\x1b[48;5;{c}m\x1b[30m{t}\x1b[0m" for c, t in segments) + "\n"


def test_postfix_reads_as_tqdm_writes_it():
    log = io.StringIO()
    with LineProgress(total=4, desc="train", file=log, interval_s=3600) as bar:
        bar.set_postfix(step=3, loss="2.5000")
        bar.update(4)
    assert log.getvalue().rstrip("\n").endswith(", step=3, loss=2.5000]")


def test_the_hugging_face_libraries_bars_go_off_in_a_log_unless_the_user_chose():
    from gptlab.core.progress import library_bars_follow_terminal

    env = {}
    assert library_bars_follow_terminal(io.StringIO(), env) is True
    assert env == {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    theirs = {"HF_HUB_DISABLE_PROGRESS_BARS": "0"}
    library_bars_follow_terminal(io.StringIO(), theirs)
    assert theirs == {"HF_HUB_DISABLE_PROGRESS_BARS": "0", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    main, other = os.openpty()
    try:
        with os.fdopen(other, "w") as tty:
            untouched = {}
            assert library_bars_follow_terminal(tty, untouched) is False and untouched == {}
    finally:
        os.close(main)
