"""The flag types of gptlab/core/cli.py at their boundaries, with the messages written out by hand: a refusal names
the flag, the problem and the fix (tests/e2e/test_flag_types_e2e.py runs a few scripts' command lines)."""
import argparse
import os

import pytest

from gptlab.core.cli import (ArgumentParser, FlagValueError, flag_type, float_in, fraction, int_in, non_negative_float,
                             non_negative_int, or_auto, png_path, positive_float, positive_int)
from gptlab.core.errors import UserError, run_cli


@pytest.mark.parametrize("kind, text, value", [
    (positive_int, "1", 1), (positive_int, "123456789012345678901234567890", 123456789012345678901234567890),
    (non_negative_int, "0", 0), (non_negative_int, "7", 7),
    (positive_float, "1.5", 1.5), (positive_float, "1e-9", 1e-9),
    (non_negative_float, "0", 0.0), (non_negative_float, "2.5", 2.5),
    (fraction, "0", 0.0), (fraction, "1", 1.0), (fraction, "0.4", 0.4),
    (int_in(1, 10), "1", 1), (int_in(1, 10), "10", 10),
    (or_auto(positive_int), "auto", "auto"), (or_auto(positive_int), "256", 256),
    (png_path, "out/curves.PNG", "out/curves.PNG"),
])
def test_a_type_takes_the_values_at_its_bounds(kind, text, value):
    assert kind(text) == value and type(kind(text)) is type(value)


@pytest.mark.parametrize("kind, text, message", [
    (positive_int, "0", "must be a positive integer, got 0"),
    (positive_int, "-1", "must be a positive integer, got -1"),
    (non_negative_int, "-1", "must be 0 or more, got -1"),
    (positive_float, "0", "must be a positive number, got 0.0"),
    (positive_float, "-1.5", "must be a positive number, got -1.5"),
    (positive_float, "nan", "must be a positive number, got nan"),
    (positive_float, "inf", "must be a positive number, got inf"),
    (non_negative_float, "-0.5", "must be 0 or more, got -0.5"),
    (fraction, "1.5", "must be between 0 and 1, got 1.5"),
    (fraction, "-0.1", "must be between 0 and 1, got -0.1"),
    (float_in(0, 1, low_open=True, high_open=True), "0", "must be in (0, 1), got 0.0"),
    (float_in(0, 1, low_open=True, high_open=True), "1", "must be in (0, 1), got 1.0"),
    (float_in(0, 1, low_open=True), "0", "must be in (0, 1], got 0.0"),
    (float_in(0, low_open=True), "0", "must be > 0, got 0.0"),
    (float_in(high=1), "2", "must be at most 1, got 2.0"),
    (int_in(1, 10), "0", "must be between 1 and 10, got 0"),
    (int_in(1, 10), "11", "must be between 1 and 10, got 11"),
    (int_in(2), "1", "must be at least 2, got 1"),
    (int_in(0, 2**63 - 1, "{value} must be between 0 and 2**63 - 1"), str(2**63),
     "9223372036854775808 must be between 0 and 2**63 - 1"),
    (or_auto(positive_int), "0", "must be a positive integer, got 0"),
    (or_auto(positive_int), "Auto", "must be auto or a number, got 'Auto'"),
    (png_path, "plot.jpg", "plot.jpg: the plot is a PNG image; give a path ending in .png"),
])
def test_a_type_refuses_a_value_saying_what_to_give(kind, text, message):
    with pytest.raises(FlagValueError) as err:
        kind(text)
    assert str(err.value) == message


@pytest.mark.parametrize("kind, text", [(positive_int, "1.5"), (positive_int, "abc"), (positive_int, ""),
                                        (non_negative_int, "0x10"), (positive_float, "abc"), (fraction, "1/2")])
def test_text_that_is_no_number_is_left_to_argparse(kind, text):
    """A ValueError, which argparse words as `invalid int value: 'abc'`, as it does for a plain type=int."""
    with pytest.raises(ValueError):
        kind(text)


def parser():
    p = ArgumentParser(prog="prog.py")
    p.add_argument("--steps", type=positive_int, default=10)
    p.add_argument("--frac", type=fraction, default=0.5)
    p.add_argument("-n", "--name", type=flag_type(lambda name: name in ("a", "b"), "{value!r} is unknown; use a or b"),
                   default="a")
    p.add_argument("plot", type=png_path, nargs="?", metavar="PLOT")
    return p


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be a positive integer, got 0 (see prog.py --help)"),
    (["--steps=-3"], "--steps must be a positive integer, got -3 (see prog.py --help)"),
    (["--steps", "abc"], "argument --steps: invalid int value: 'abc' (see prog.py --help)"),
    (["--steps", "1.5"], "argument --steps: invalid int value: '1.5' (see prog.py --help)"),
    (["--frac", "1.5"], "--frac must be between 0 and 1, got 1.5 (see prog.py --help)"),
    (["-n", "c"], "--name 'c' is unknown; use a or b (see prog.py --help)"),
    (["x.jpg"], "PLOT x.jpg: the plot is a PNG image; give a path ending in .png (see prog.py --help)"),
    (["--no_such_flag"], "unrecognized arguments: --no_such_flag (see prog.py --help)"),
])
def test_the_parser_names_the_flag_in_one_user_error(argv, message):
    with pytest.raises(UserError) as err:
        parser().parse_args(argv)
    assert str(err.value) == message


def test_values_within_bounds_parse_and_defaults_are_kept():
    args = parser().parse_args(["--steps", "1", "--frac", "1", "-n", "b", "a.png"])
    assert vars(args) == {"steps": 1, "frac": 1.0, "name": "b", "plot": "a.png"}
    assert vars(parser().parse_args([])) == {"steps": 10, "frac": 0.5, "name": "a", "plot": None}


def test_a_plain_argparse_parser_still_words_the_refusal():
    p = argparse.ArgumentParser(prog="plain.py", exit_on_error=False)
    p.add_argument("--steps", type=positive_int)
    with pytest.raises(argparse.ArgumentError, match="argument --steps: must be a positive integer, got 0"):
        p.parse_args(["--steps", "0"])


def test_a_script_s_main_raises_the_user_error():
    import sweep

    with pytest.raises(UserError, match=r"^--nproc_per_node must be at least 1, got 0 \(see "):
        sweep.main(["--nproc_per_node", "0", "--grid", "lr_scale=1,2"])


# bytes that are not UTF-8 in a path (a file named in Latin-1): sys.argv holds them surrogateescape'd
NOT_UTF8 = os.fsdecode(b"runs/caf\xe9")


@pytest.mark.parametrize("argv, flag", [
    (["--name", NOT_UTF8], "--name"), (["--steps=" + NOT_UTF8], "--steps"), ([NOT_UTF8 + ".png"], "PLOT")])
def test_a_value_that_is_not_utf8_is_refused_naming_the_flag_and_the_byte(argv, flag):
    """docs/faults.md: a value that is not UTF-8 text is one error line naming the flag, before anything is made."""
    with pytest.raises(UserError) as err:
        parser().parse_args(argv)
    assert str(err.value).startswith(f"{flag} 'runs/caf\\xe9") and "is not UTF-8 text" in str(err.value)


def test_an_error_holding_a_newline_or_undecodable_bytes_is_printed_on_one_line(capsys):
    def main(argv):
        raise UserError(f"cannot write in {os.fsdecode(b'a' + bytes([10]) + b'b' + bytes([0xff]))}")

    with pytest.raises(SystemExit) as exit_:
        run_cli(main)
    assert exit_.value.code == 2 and capsys.readouterr().err == "error: cannot write in a\\nb\\xff\n"
