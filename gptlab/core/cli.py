"""What every top-level script's command line shares: the parser (its error format), the --help format and the
types that check a flag's value where the flag is declared.

    p.add_argument("--train_steps", type=positive_int, default=1000)
    p.add_argument("--cooldown_frac", type=float_in(0, 1), default=0.4)
    p.add_argument("--seed", type=int_in(0, 2**63 - 1, "{value} must be between 0 and 2**63 - 1"), default=0)

A value a type refuses is one line, `error: --train_steps must be a positive integer, got 0 (see train_gpt.py
--help)`; text that is no number at all keeps argparse's words (`argument --train_steps: invalid int value: 'abc'`).
Checks that involve two flags, a file or the device stay in code, in one place per script right after its parser.
"""
import argparse
import math
import re

from gptlab.core.errors import UserError, escape_controls


class FlagValueError(argparse.ArgumentTypeError):
    """A value a flag's type refuses. The message follows the flag's name on the error line, so it says what is
    wrong and what to give: "must be a positive integer, got 0", "'a/b' must be a plain name (...)"."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with the project's error format: a bad flag is one line, `error: <problem> (see SCRIPT
    --help)`, exit status 2, instead of the usage block and `SCRIPT: error:`. The error is a UserError, so the
    script's run_cli prints it as it prints every other bad input (and a caller of main() can catch it)."""

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")

    def _get_value(self, action, arg_string):
        # every value of every flag (paths above all) is UTF-8 text, checked before anything is made: a byte that is
        # not (Python's surrogateescape'd sys.argv) would fail later, in a JSON record or a log, half-way
        refuse_undecodable(action, arg_string)
        # a FlagValueError reads "--flag <message>" rather than argparse's "argument --flag: <message>"
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as err:
            if not isinstance(err.__context__, FlagValueError):
                raise
            raise argparse.ArgumentError(None, f"{flag_name(action)} {err.__context__}") from None


def refuse_undecodable(action, text):
    """An ArgumentError naming the flag when its value holds bytes that are not UTF-8 (a file name in another
    encoding): the runs' records, logs and reports are UTF-8, so such a path is refused before it is used."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentError(None, f"{flag_name(action)} '{escape_controls(text)}' is not UTF-8 text (a file "
                                           "or folder name in another encoding?); rename it in UTF-8, or give "
                                           "another path") from None


def flag_name(action):
    """--name for an option (its longest spelling), NAME for a positional argument."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    return action.metavar if isinstance(action.metavar, str) else action.dest


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and shows each flag's default once: appended to its help unless the
    help already states it, or it is None or a switch's True/False (nothing to show)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (not action.option_strings or action.required or default is None or isinstance(default, bool)
                or default == argparse.SUPPRESS or "default" in text):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})" if text else f"default: {shown}"


# ------------------------------------------------------------------------------------------------ flag types
def flag_type(accept, message, parse=str):
    """A type= for add_argument: parse(text), then accept(value) or FlagValueError(message.format(value=value)).
    A ValueError from parse (text that is no number) gives argparse's `invalid int value: 'abc'`: the type is
    named after parse."""

    def convert(text):
        value = parse(text)
        if not accept(value):
            raise FlagValueError(message.format(value=value))
        return value

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def _bounds(low, high, low_open=False, high_open=False):
    """(accept(value), "between 0 and 1" / "at least 1" / "> 0" ...): value within low..high (None: no bound)."""
    def accept(value):
        return ((low is None or (value > low if low_open else value >= low))
                and (high is None or (value < high if high_open else value <= high)))

    if low is not None and high is not None:
        if not low_open and not high_open:
            return accept, f"between {low} and {high}"
        return accept, f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return accept, f"> {low}" if low_open else f"at least {low}"
    return accept, f"< {high}" if high_open else f"at most {high}"


def int_in(low=None, high=None, message=None):
    """An integer flag within low..high (inclusive; None: unbounded). `message` (a format string of {value})
    replaces "must be between LOW and HIGH, got {value}"."""
    accept, requirement = _bounds(low, high)
    return flag_type(accept, message or f"must be {requirement}, got {{value}}", int)


def float_in(low=None, high=None, *, low_open=False, high_open=False, message=None):
    """A finite number flag within low..high (inclusive unless low_open / high_open; None: unbounded); nan and
    inf are refused. `message` (a format string of {value}) replaces "must be between LOW and HIGH, got {value}"."""
    accept, requirement = _bounds(low, high, low_open, high_open)
    return flag_type(lambda value: math.isfinite(value) and accept(value),
                     message or f"must be {requirement}, got {{value}}", float)


positive_int = int_in(1, message="must be a positive integer, got {value}")
non_negative_int = int_in(0, message="must be 0 or more, got {value}")
positive_float = float_in(0, low_open=True, message="must be a positive number, got {value}")
non_negative_float = float_in(0, message="must be 0 or more, got {value}")
fraction = float_in(0, 1)


def or_auto(kind):
    """A type that also takes the word auto (kept as the string "auto"), else kind(text)."""

    def convert(text):
        if text == "auto":
            return text
        try:
            return kind(text)
        except ValueError:  # neither auto nor a number: say both
            raise FlagValueError(f"must be auto or a number, got {text!r}") from None

    return convert


MAX_THREADS = 1024  # above any machine's cores (more only slows a run); 100000 crashed torch's pool


def threads_flag(text):
    """--threads: auto, or a count of CPU threads from 1 to MAX_THREADS."""
    if text == "auto":
        return text
    count = int(text) if text.isascii() and text.isdigit() else 0
    if count > MAX_THREADS:
        raise FlagValueError(f"must be at most {MAX_THREADS} (more threads than cores only slow it down), got "
                             f"{text!r}")
    if count > 0:
        return count
    raise FlagValueError(f"must be auto or a positive integer, got {text!r}")


def chosen_threads(flag, environ):
    """The threads torch should use for a --threads value, or None to keep torch's own count: a count given wins;
    auto is $OMP_NUM_THREADS when it is a positive integer (torch read it at start-up: kept), else 1."""
    if flag != "auto":
        return flag
    omp = environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return None
    return 1


def one_line_path(path):
    """A path flag whose value is read back from a line of output: not empty, no control character (a newline)."""
    if not path:
        raise FlagValueError("must not be empty; give a folder, e.g. experiments")
    if escape_controls(path) != path:
        raise FlagValueError(f"'{escape_controls(path)}' must be a path on one line (no newline, tab or other control "
                             "character); rename the folder or give another")
    return path


path = flag_type(bool, "must not be empty; give a path")  # '' would mean the current folder, or nothing at all
png_path = flag_type(lambda path: path.lower().endswith(".png"),
                     "{value}: the plot is a PNG image; give a path ending in .png")


_HUB_NAME = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"  # huggingface_hub's validate_repo_id: no -/. at an end


def hub_repo(text):
    """A Hub repository id, NAME or ORG/NAME as huggingface_hub accepts one (else it raises deep in a download)."""
    if not (re.fullmatch(f"(?:{_HUB_NAME}/)?{_HUB_NAME}", text) and len(text.rsplit("/", 1)[-1]) <= 96
            and "--" not in text and ".." not in text):
        raise FlagValueError(f"'{escape_controls(text)}' is not a Hub repository id; give ORG/NAME, e.g. "
                             "Rowan/hellaswag")
    return text


hub_revision = flag_type(bool, "must not be empty; give a branch, tag or commit, e.g. main")
