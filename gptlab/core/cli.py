"""What every top-level script's command line shares: the parser (its error format), the --help format and the
checks of numeric flags."""
import argparse
import sys

from gptlab.core.errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with the project's error format: a bad flag prints one line, `error: <problem> (see
    SCRIPT --help)`, and exits with status 2, instead of the usage block and `SCRIPT: error:`."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr, flush=True)
        sys.exit(2)


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


def require_positive(flags, names):
    """Each flags.NAME is a positive integer, else one UserError naming the flag."""
    for name in names:
        value = getattr(flags, name)
        if value is None or value <= 0:
            raise UserError(f"--{name} must be a positive integer (got {value})")


def require_non_negative(flags, names):
    for name in names:
        if getattr(flags, name) < 0:
            raise UserError(f"--{name} must be >= 0 (got {getattr(flags, name)})")
