"""Flags in a file: `--config FILE` (TOML) for train_gpt.py and sweep.py.

A config file sets flags by their names, one `name = value` per flag, as the command line would:

    preset = "quickstart"
    tokenizer = "quickstart_v1000_n400000"
    train_steps = 240
    compile = false                 # a switch: --compile / --no-compile
    train_files = ["a.bin", "b.bin"]  # a flag of several values

The file becomes command-line tokens placed BEFORE the real command line, so the parser checks every value with
its own types and choices, and a flag given on the command line wins over the file (argparse keeps the last).
The run records the resolved flags, as for any run.
"""
import argparse
import difflib
import sys

from gptlab.core.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    import tomli as tomllib


def read_config(path):
    """{name: value} of a TOML file; one UserError for a missing, unreadable or malformed file."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UserError(f"--config {path}: no such file; give the path of a TOML file of flags "
                        "(docs/training.md, \"Flags in a file\")") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"--config {path} cannot be read ({err.__class__.__name__}: {err}); give a readable "
                        "TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"--config {path} is not valid TOML ({err}); fix that line") from None


def flag_tokens(table, actions, path, where=""):
    """Command-line tokens for {name: value}, each name a flag among actions ({dest: argparse action}); switches
    (--x / --no-x) from booleans, several values from arrays. An unknown name or a value of the wrong kind is
    one UserError naming the file and the key."""
    tokens = []
    for key, value in table.items():
        name = f"{where}{key}"
        action = actions.get(key)
        if action is None:
            close = difflib.get_close_matches(key, list(actions), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UserError(f"--config {path}: {name} is not a flag here{hint}; the file's keys are flag names "
                            "without the dashes (--help lists them)")
        flag = action.option_strings[0]
        switch = action.nargs == 0
        if isinstance(value, dict):
            raise UserError(f"--config {path}: {name} is a table; give it as `{key} = value`")
        if switch:
            if not isinstance(value, bool):
                raise UserError(f"--config {path}: {name} is a switch; give it as true or false, not {value!r}")
            if value:
                tokens.append(flag)
            elif len(action.option_strings) > 1 and action.option_strings[1].startswith("--no-"):
                tokens.append(action.option_strings[1])
            # false for a switch that has no --no- form: its default (off)
            continue
        values = value if isinstance(value, list) else [value]
        many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
        if isinstance(value, list) and not many:
            raise UserError(f"--config {path}: {name} takes one value, not a list")
        if not values and action.nargs == "+":
            raise UserError(f"--config {path}: {name} needs at least one value")
        for v in values:
            if isinstance(v, (dict, list)) or not isinstance(v, (str, int, float, bool)):
                raise UserError(f"--config {path}: {name} has a value of the wrong kind ({type(v).__name__}); "
                                "give a string, a number or true/false")
        texts = [config_text(v) for v in values]
        for text in texts:
            _check_value(action, text, f"--config {path}: {name} = {text!r}")
        tokens.append(flag)
        tokens += texts
    return tokens


def _check_value(action, text, where):
    """The flag's own type and choices applied to one value from the file, so a bad one is named with the file."""
    try:
        value = action.type(text) if callable(action.type) else text
    except (ValueError, TypeError, argparse.ArgumentTypeError) as err:
        raise UserError(f"{where}: {err or 'not a value this flag takes'}; fix it in the file") from None
    if action.choices is not None and value not in action.choices:
        raise UserError(f"{where}: not one of {', '.join(map(str, action.choices))}; fix it in the file")


def config_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def given_config(argv):
    """The --config path on this command line (the last one), or None."""
    path = None
    for i, token in enumerate(argv):
        if token == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif token.startswith("--config="):
            path = token.split("=", 1)[1]
        elif token == "--":
            break
    return path


def expand_config(parser, argv):
    """argv with the flags of its --config file in front (the command line after them wins); argv itself when it
    has none."""
    path = given_config(argv)
    if path is None:
        return list(argv)
    table = read_config(path)  # a missing, unreadable or malformed file: its one error line
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "config")}
    if "config" in table:
        raise UserError(f"--config {path}: a config file cannot name another (config = ...); merge them into one")
    return flag_tokens(table, actions, path) + list(argv)
