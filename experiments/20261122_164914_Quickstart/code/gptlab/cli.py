"""What every top-level script's --help shares."""
import argparse


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
