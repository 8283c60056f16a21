"""Stopping a training run cleanly on SIGTERM (a preempted machine: rented GPUs get one some seconds before the
kill, and torchrun forwards it to its workers) or SIGINT (Ctrl-C).

While the training steps run (`begin_steps()` ... `end_steps()`) a signal only raises a flag: the loop finishes
the step it is in, the ranks agree on the step to stop after (train_gpt.py's report, see STOP_CHECK_S), write a
checkpoint there, and the run ends as `interrupted` with the command that resumes it (exit 143 for SIGTERM, 130
for Ctrl-C). Elsewhere (start-up, the final evaluations) a signal stops the process at once, as Ctrl-C always did
(a StopRequested, a KeyboardInterrupt), except inside `deferred()` (a checkpoint being written), where it waits
for the write to complete: torch.save turns an exception raised inside it into "RuntimeError: unexpected pos".
Ctrl-C pressed a second time (more than a second after the first: torchrun forwards the terminal's Ctrl-C to
workers that got it already) stops at once even between steps.

    with StopSignals():                 # in the main thread; leaving restores the previous handlers
        ... stopper = installed() ...   # the one in place, wherever the loop is
"""
import contextlib
import signal
import threading
import time

from gptlab.core.errors import StopRequested

SIGNALS = (signal.SIGINT, signal.SIGTERM)

# Ranks agree on stopping through the figures train_gpt.py already all-reduces and reads back when it reports
# (one more row in that tensor: no extra collective, no extra host read). Between reports it forces one about
# every STOP_CHECK_S seconds of wall time, a cadence every rank derives from the same all-reduced figures, so on a
# GPU the host waits for the device at most once per STOP_CHECK_S however fast the steps are, and a stop comes
# within about STOP_CHECK_S + one step + one checkpoint: inside torchrun's 30 s between its SIGTERM and SIGKILL.
STOP_CHECK_S = 5.0
REPEAT_WINDOW_S = 1.0  # a second SIGINT within this of the first is the same Ctrl-C (torchrun forwards it)


_INSTALLED = []


def installed():
    """The StopSignals installed last (a fresh one, installed nowhere, when none is)."""
    return _INSTALLED[-1] if _INSTALLED else StopSignals()


class StopSignals:
    def __init__(self):
        self.requested = None  # the signal asked for (SIGTERM wins over SIGINT), None until one arrives
        self._first_at = None
        self._in_steps = False
        self._deferring = 0
        self._previous = {}

    def install(self):
        """Handle SIGINT and SIGTERM (only possible from the main thread; elsewhere nothing is installed)."""
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        _INSTALLED.append(self)
        return self

    def uninstall(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self in _INSTALLED:
            _INSTALLED.remove(self)

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.uninstall()
        return False

    def _handle(self, signum, frame):
        now = time.monotonic()
        repeat = self.requested is not None
        if not repeat:
            self.requested, self._first_at = signum, now
        elif signum == signal.SIGTERM:
            self.requested = signum
        if self._deferring:
            return  # a checkpoint is being written: acted on when it is complete
        if self._in_steps and not (repeat and signum == signal.SIGINT and now - self._first_at > REPEAT_WINDOW_S):
            return  # the loop stops after this step, with a checkpoint
        raise StopRequested(self.requested)

    def begin_steps(self):
        """From here signals wait for the loop to stop at a step every rank agrees on."""
        self._in_steps = True

    def end_steps(self):
        """The training steps are over: a signal now stops at once (one already received does so here)."""
        self._in_steps = False
        if self.requested is not None and not self._deferring:
            raise StopRequested(self.requested)

    @contextlib.contextmanager
    def deferred(self):
        """Signals wait until the block is done (a checkpoint write): then, outside the steps, they stop."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
        if not self._deferring and not self._in_steps and self.requested is not None:
            raise StopRequested(self.requested)
