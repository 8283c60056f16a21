"""Run train_gpt.py with a signal sent to itself in the middle of writing a checkpoint (inside torch.save, after its
first bytes): GPTLAB_TEST_SAVE_SIGNAL = INT (Ctrl-C), TERM, or KILL (the process dies mid-write).

    python tests/helpers/signal_in_save_train.py ...train_gpt.py flags...
"""
import os
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import torch  # noqa: E402

import train_gpt  # noqa: E402
from gptlab.core.errors import run_cli  # noqa: E402

_real_save = torch.save


class _SignalOnWrite:
    def __init__(self, f):
        self._f, self._sent = f, False

    def write(self, data):
        written = self._f.write(data)
        if not self._sent:
            self._sent = True
            os.kill(os.getpid(), getattr(signal, "SIG" + os.environ["GPTLAB_TEST_SAVE_SIGNAL"]))
        return written

    def __getattr__(self, name):
        return getattr(self._f, name)


def _save(obj, f, *args, **kwargs):
    return _real_save(obj, _SignalOnWrite(f), *args, **kwargs)


if __name__ == "__main__":
    torch.save = _save
    run_cli(train_gpt.main)
