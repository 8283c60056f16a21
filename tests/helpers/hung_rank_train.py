"""torchrun this instead of train_gpt.py: the same run, except that rank GPTLAB_TEST_HANG_RANK stops answering
(sleeps 60 s) at optimizer step GPTLAB_TEST_HANG_STEP, as a rank on a dead GPU or a lost node would. The other
ranks must fail within the collective timeout (GPTLAB_DIST_TIMEOUT_S) instead of waiting; the sleep is bounded so
that, should they wait anyway, the run resumes and ends on its own (no process is left behind). While it sleeps,
the hung rank ends on torchrun's SIGTERM (the default action) instead of train_gpt.py's stop-after-this-step handler:
torchrun ends the group either way, and so does not wait its 30 s grace before the SIGKILL.

    torchrun --nproc_per_node=2 tests/helpers/hung_rank_train.py ...train_gpt.py flags...
"""
import os
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import train_gpt  # noqa: E402
from gptlab.core.errors import run_cli  # noqa: E402

_real_lr_multiplier = train_gpt.lr_multiplier


def _lr_multiplier(step, train_steps, cooldown_frac):
    # called once per step on every rank, after the gradients' all-reduces and before the optimizers' waits
    if (os.environ.get("RANK") == os.environ["GPTLAB_TEST_HANG_RANK"]
            and step == int(os.environ["GPTLAB_TEST_HANG_STEP"])):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        time.sleep(60)
    return _real_lr_multiplier(step, train_steps, cooldown_frac)


if __name__ == "__main__":
    train_gpt.lr_multiplier = _lr_multiplier
    run_cli(train_gpt.main)
