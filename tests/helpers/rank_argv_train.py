"""torchrun this instead of train_gpt.py: the same run, except that rank GPTLAB_TEST_RANK gets other values for the
flags in GPTLAB_TEST_RANK_ARGS (JSON {"--flag": "value"}), as a multi-node run launched with a different command on
one node would.

    torchrun --nproc_per_node=2 tests/helpers/rank_argv_train.py ...train_gpt.py flags...
"""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import train_gpt  # noqa: E402
from gptlab.core.errors import run_cli  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    if os.environ.get("RANK") == os.environ["GPTLAB_TEST_RANK"]:
        for flag, value in json.loads(os.environ["GPTLAB_TEST_RANK_ARGS"]).items():
            if flag in argv:
                argv[argv.index(flag) + 1] = value
            else:
                argv += [flag, value]
    run_cli(train_gpt.main, argv)
