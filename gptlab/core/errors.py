"""One kind of error for bad input, and one way for every CLI to report it (no traceback, exit code 2)."""
import os
import signal
import sys
import time

from gptlab.core.progress import library_bars_follow_terminal


QUIET_RANK_WAIT_S = 60


class UserError(Exception):
    """Bad input or environment: the message names the problem and the fix. `quiet=True`: the same error is raised
    on every rank and rank 0 prints it, so the others exit 2 without printing it again."""

    def __init__(self, *args, quiet=False):
        super().__init__(*args)
        self.quiet = quiet


class StopRequested(KeyboardInterrupt):
    """A stop asked for by a signal: SIGINT (Ctrl-C) or SIGTERM (a preempted machine, a scheduler, `kill`). A
    KeyboardInterrupt, so every path that ends a Ctrl-C'd run cleanly ends this one too; the exit status is
    128 + the signal's number (130, 143)."""

    def __init__(self, signum=signal.SIGINT):
        super().__init__(signal_name(signum))
        self.signum = int(signum)


def signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def one_line(err, limit=400):
    """A multi-line error (torch's load_state_dict report spans many lines) as one line of at most `limit`
    characters, for a UserError."""
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())[:limit]


# Characters that would break a message's one line or a table row (C0 and C1 controls, DEL, the line and paragraph
# separators), shown as escapes; a byte that is not UTF-8 (a surrogate from Python's surrogateescape) as \xNN.
_ESCAPES = {i: f"\\x{i:02x}" for i in (*range(32), *range(127, 160))}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"})
_ESCAPES.update({i: f"\\x{i - 0xDC00:02x}" for i in range(0xDC80, 0xDD00)})
_ESCAPES.update({i: f"\\u{i:04x}" for i in range(0xD800, 0xE000) if i not in _ESCAPES})


def escape_controls(text):
    """`text` on one line and encodable as UTF-8: control characters and line separators escaped (\\n, \\x1b ...),
    an undecodable byte of a path (surrogateescape) shown as \\xff."""
    return str(text).translate(_ESCAPES)


def run_cli(main, argv=None):
    """Call main(argv); a UserError prints one clear line to stderr and exits with status 2; Ctrl-C (or a
    StopRequested for another signal) exits with 128 + the signal's number, without a traceback."""
    library_bars_follow_terminal()  # no \r redraws from the Hugging Face libraries' bars in a log either
    try:
        return main(argv)
    except UserError as err:
        if not err.quiet:
            # escaped: a path holding a newline or bytes that are not UTF-8 still gives one line
            print(f"error: {escape_controls(err)}", file=sys.stderr, flush=True)
        elif "TORCHELASTIC_RUN_ID" in os.environ:
            # torchrun stops every rank as soon as one exits: a quiet rank waits for rank 0 to say the error and exit
            # first (then torchrun stops this one), or a loaded machine could lose the only error line
            try:
                time.sleep(QUIET_RANK_WAIT_S)
            except KeyboardInterrupt:  # torchrun's SIGTERM, once rank 0 has exited (a StopRequested where handled)
                pass
        sys.exit(2)
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", signal.SIGINT)
        note = "" if signum == signal.SIGINT else f" ({signal_name(signum)})"
        print(f"\ninterrupted{note}", file=sys.stderr, flush=True)  # on a line of its own, after any progress bar
        sys.stdout.flush()
        sys.exit(128 + signum)
