"""sample.py's --threads: the flag's values and the thread count each gives (the figures behind auto = 1: the
comment of gptlab.export.generate.generation_threads). That main applies it: tests/e2e/test_sample_e2e.py."""
import sys

import pytest

from conftest import REPO
from gptlab.core.errors import UserError
from gptlab.export.generate import generation_threads

sys.path.insert(0, REPO)
import sample  # noqa: E402


def test_threads_flag_takes_auto_or_a_positive_integer_and_refuses_the_rest_in_one_line():
    parser = sample.build_parser()
    assert parser.parse_args(["c.pt"]).threads == "auto"
    assert parser.parse_args(["c.pt", "--threads", "3"]).threads == 3
    for bad in ["0", "-2", "1.5", "x", "", "Auto"]:
        with pytest.raises(UserError) as err:
            parser.parse_args(["c.pt", "--threads", bad])
        # (then " (see PROG --help)", PROG being pytest's own name here)
        assert str(err.value).startswith(f"--threads must be auto or a positive integer, got {bad!r} (see ")


def test_auto_threads_is_one_unless_omp_num_threads_says_otherwise_and_the_flag_wins():
    assert generation_threads("auto", {}) == 1
    assert generation_threads("auto", {"OMP_NUM_THREADS": "3"}) is None  # torch read it at start-up: kept
    assert generation_threads("auto", {"OMP_NUM_THREADS": "zero"}) == 1  # not a count: as if unset
    assert generation_threads("auto", {"OMP_NUM_THREADS": "0"}) == 1
    assert generation_threads(4, {"OMP_NUM_THREADS": "3"}) == 4
    assert generation_threads(1, {}) == 1
