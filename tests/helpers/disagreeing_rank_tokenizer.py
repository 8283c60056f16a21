"""torchrun this instead of train_tokenizer.py: the same job, except that rank 1's merge loop returns one merge
different from rank 0's (as a miscompiled or nondeterministic engine on one node would). The ranks compare their
merges before saving, so the job must fail and write nothing.

    torchrun --nproc_per_node=2 tests/helpers/disagreeing_rank_tokenizer.py ...train_tokenizer.py flags...
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import train_tokenizer  # noqa: E402
from gptlab.tokenizer import job as bpe_train  # noqa: E402
from gptlab.tokenizer.merges import finish_result  # noqa: E402
from gptlab.core.errors import run_cli  # noqa: E402

_real_run_merges = bpe_train.run_merges


def _run_merges(*args, **kwargs):
    result = _real_run_merges(*args, **kwargs)
    if os.environ.get("RANK") == "1":  # the last merge replaced by the pair of bytes (0, 1), learned by nobody
        result = finish_result(result.merges[:-1] + [(0, 1)], result.counts)
    return result


if __name__ == "__main__":
    bpe_train.run_merges = _run_merges
    run_cli(train_tokenizer.main)
