"""Progress bars that suit where they are written: tqdm on a terminal, plain lines in a log.

On a terminal a tqdm bar redraws itself in place. Written to a file or a pipe (`> log 2>&1`, CI, nohup), that
redraw leaves `\\r` runs in the log and, where two bars are open at once (HellaSwag inside training), cursor-up
escapes (`ESC[A`). There a bar is a `LineProgress` instead: the same calls, reported as whole lines, one every
LOG_INTERVAL_S seconds and one when it closes, with no control characters.
"""
import os
import sys
import time

LOG_INTERVAL_S = 30.0  # a long step leaves a line about twice a minute in a log: its rate without flooding it


def is_terminal(stream):
    """Whether `stream` is an interactive terminal (False for files, pipes, closed or odd streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


LIBRARY_BAR_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def library_bars_follow_terminal(stream=None, environ=None):
    """The Hugging Face libraries' own tqdm bars (Hub downloads, datasets, transformers' "Loading weights") off
    where `stream` (default stderr) is not a terminal, as ours are: their variables, unless the user set them
    (theirs win), for this process and its children, and a direct call for a library already imported (they read
    the variables at import). Returns whether the bars were turned off."""
    environ = os.environ if environ is None else environ
    if is_terminal(sys.stderr if stream is None else stream):
        return False
    for name in LIBRARY_BAR_VARIABLES:
        environ.setdefault(name, "1")
    if environ is os.environ:
        if "huggingface_hub" in sys.modules and environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
            sys.modules["huggingface_hub"].utils.disable_progress_bars()
        if "transformers" in sys.modules and environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
            sys.modules["transformers"].utils.logging.disable_progress_bar()
        if "datasets" in sys.modules and environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1":
            sys.modules["datasets"].utils.disable_progress_bars()
    return True


def progress_bar(*, total=None, initial=0, desc=None, unit="it", unit_scale=False, unit_divisor=1000,
                 file=None, disable=False, leave=True, **tqdm_kwargs):
    """A tqdm bar where `file` (default stderr) is a terminal, a LineProgress elsewhere; both take update(n),
    set_postfix_str(s), clear(), close() and `with`."""
    file = sys.stderr if file is None else file
    if is_terminal(file):
        from tqdm import tqdm  # ~25 ms: only where a bar is drawn

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale,
                    unit_divisor=unit_divisor, file=file, disable=disable, leave=leave, **tqdm_kwargs)
    return LineProgress(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale,
                        unit_divisor=unit_divisor, file=file, disable=disable, leave=leave)


class LineProgress:
    """A progress report for logs: tqdm's text (counts, percentage, elapsed, rate) as one plain line per report.

    A line is written when `interval_s` has passed since the last one, and on close() when `leave` (a bar that
    clears itself on a terminal, leave=False, leaves nothing in a log either)."""

    def __init__(self, *, total=None, initial=0, desc=None, unit="it", unit_scale=False, unit_divisor=1000, file=None,
                 disable=False, leave=True, interval_s=LOG_INTERVAL_S):
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self.unit_scale, self.unit_divisor = unit_scale, unit_divisor
        self.file = sys.stderr if file is None else file
        self.disable, self.leave, self.interval_s = disable, leave, interval_s
        self.postfix = None
        self._initial = initial
        self._start = self._last = time.monotonic()
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n=1):
        self.n += n
        if not self.disable and time.monotonic() - self._last >= self.interval_s:
            self._write()

    def set_postfix_str(self, s="", refresh=True):
        self.postfix = s or None

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        """tqdm's `key=value, ...` postfix."""
        items = {**(ordered_dict or {}), **kwargs}
        self.set_postfix_str(", ".join(f"{k}={str(v).strip()}" for k, v in items.items()))

    def set_description(self, desc=None, refresh=True):
        self.desc = desc

    def clear(self, nolock=False):
        """Nothing to erase in a log (tqdm's clear() makes room on a terminal)."""

    def refresh(self, nolock=False, lock_args=None):
        """Lines are written by time, not on demand."""

    def close(self):
        if self._closed:
            return
        self._closed = True
        if not self.disable and self.leave:
            self._write()

    def line(self):
        """The report as tqdm formats it (its bar drawn in ASCII), without control characters."""
        from tqdm import tqdm  # ~25 ms: only once a line is written

        elapsed = time.monotonic() - self._start
        done = self.n - self._initial
        rate = done / elapsed if elapsed > 0 else None
        text = tqdm.format_meter(self.n, self.total, elapsed, ncols=None, prefix=self.desc or "", ascii=True,
                                 unit=self.unit, unit_scale=self.unit_scale, unit_divisor=self.unit_divisor,
                                 rate=rate, postfix=self.postfix)
        return "".join(c if c.isprintable() else " " for c in text)

    def _write(self):
        self._last = time.monotonic()
        try:
            self.file.write(self.line() + "\n")
            self.file.flush()
        except (OSError, ValueError):  # a closed log or a full disk: the bar is not worth failing the job for
            pass
