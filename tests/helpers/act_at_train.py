"""Run train_gpt.py and do something at a known point of it: a preemption (or a file replaced) exactly there.

    GPTLAB_TEST_AT      NAME:N[:after]  the N-th call (from 1) of NAME, before it runs (after it returns with :after):
                        train_step (an optimizer step), evaluate_val, evaluate_hellaswag_in_run, save_checkpoint
                        (Run.save_checkpoint), write_results (results.json)
    GPTLAB_TEST_DO      TERM or INT (a signal to this process), or remove:PATH, replace:PATH:SOURCE (SOURCE's bytes
                        renamed over PATH), modify:PATH (its first label changed in place)
    GPTLAB_TEST_RANK    the rank that acts (default 0; all: every rank, as torchrun forwarding a SIGTERM)

    python tests/helpers/act_at_train.py ...train_gpt.py flags...     (or torchrun ... act_at_train.py ...)
"""
import os
import shutil
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import train_gpt  # noqa: E402
from gptlab.core.errors import run_cli  # noqa: E402
from gptlab.train import records, run  # noqa: E402


def act():
    what = os.environ["GPTLAB_TEST_DO"]
    if what in ("TERM", "INT"):
        os.kill(os.getpid(), getattr(signal, "SIG" + what))
        return
    kind, path, *source = what.split(":")
    if kind == "remove":
        os.remove(path)
    elif kind == "replace":
        shutil.copyfile(source[0], path + ".new")
        os.replace(path + ".new", path)
    else:  # modify in place: the first example's label, another answer (the same size, still valid JSON)
        with open(path, "r+b") as f:
            at = f.read().index(b'"label": ') + len(b'"label": ')
            f.seek(at)
            digit = f.read(1)
            f.seek(at)
            f.write(str((int(digit) + 1) % 4).encode())


def wrap(function, n, after):
    calls = [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        mine = calls[0] == n and os.environ.get("GPTLAB_TEST_RANK", "0") in ("all", os.environ.get("RANK", "0"))
        if mine and not after:
            act()
        result = function(*args, **kwargs)
        if mine and after:
            act()
        return result

    return wrapped


if __name__ == "__main__":
    name, n, *after = os.environ["GPTLAB_TEST_AT"].split(":")
    n, after = int(n), bool(after)
    if name == "train_step":
        make = train_gpt.make_train_step
        train_gpt.make_train_step = lambda *a, **k: wrap(make(*a, **k), n, after)
    elif name == "save_checkpoint":
        run.Run.save_checkpoint = wrap(run.Run.save_checkpoint, n, after)
    elif name == "write_results":
        records.write_results = wrap(records.write_results, n, after)
    else:
        setattr(train_gpt, name, wrap(getattr(train_gpt, name), n, after))
    sys.argv[0] = os.path.join(REPO, "train_gpt.py")  # the script a run records in its resume command
    run_cli(train_gpt.main)
