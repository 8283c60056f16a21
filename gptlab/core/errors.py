"""One kind of error for bad input, and one way for every CLI to report it (no traceback, exit code 2)."""
import sys


class UserError(Exception):
    """Bad input or environment: the message names the problem and the fix."""


def one_line(err, limit=400):
    """A multi-line error (torch's load_state_dict report spans many lines) as one line of at most `limit`
    characters, for a UserError."""
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())[:limit]


def run_cli(main, argv=None):
    """Call main(argv); a UserError prints one clear line to stderr and exits with status 2."""
    try:
        return main(argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr, flush=True)  # on a line of its own, after any progress bar
        sys.exit(130)
