"""A recorded resume command resumes the same run (issue 37, item 2): a run preempted with a flag that a resume
works out afresh for its machine (train_gpt.FRESH_ON_RESUME) and that shapes its numbers or memory records a
resume command that repeats it, and running that command as written continues the very curve of the
uninterrupted run (docs/faults.md, 'SIGTERM (preemption) and Ctrl-C': "--resume continues bit for bit").

The flags exercised are those that change a CPU run's numbers: --dtype bfloat16 (auto is float32 on CPU),
--device_batch_size and --grad_acc_steps (auto is one 1024-token micro-batch here: the gradient would be summed in
another order) and --shard_params (2 gloo ranks: auto is unsharded, with one-file checkpoints). The others
(--compile, --attention flex, a CUDA --device) need a GPU; tests/unit/test_run.py checks that their words are kept.
"""
import os
import sys

import pytest

from conftest import SHARED_DATA
from helpers.tiny_runs import run_acting, run_json, run_metric, run_recorded_command, tiny_args
from gptlab.train import records

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")]

STEPS, STOP_AT = 6, 3


def run_dirs(exp_dir):
    """The run folders in the order they were made (the resumed run's folder comes second)."""
    return sorted(os.path.join(exp_dir, d) for d in os.listdir(exp_dir) if not d.startswith("."))


def results_of(run_dir):
    return run_json(run_dir, records.RESULTS_FILE)


@pytest.mark.parametrize("flags, words, ranks", [
    ({"dtype": "bfloat16", "device_batch_size": None}, "--dtype bfloat16", 1),
    ({"device_batch_size": 256}, "--device_batch_size 256", 1),
    ({"device_batch_size": None, "grad_acc_steps": 4}, "--grad_acc_steps 4", 1),
    ({"shard_params": True, "device_batch_size": 128}, "--device_batch_size 128 --shard_params", 2),
])
def test_the_recorded_resume_command_continues_the_uninterrupted_curve(tiny, tmp_path, flags, words, ranks):
    argv = tiny_args(tiny, tmp_path / "stopped", train_steps=STEPS, val_loss_every=2, log_every=1, **flags)
    straight = run_acting(tiny_args(tiny, tmp_path / "straight", train_steps=STEPS, val_loss_every=2, log_every=1,
                                    **flags), "train_step:999", "TERM", ranks)
    assert straight.returncode == 0, straight.stderr[-3000:]
    stopped = run_acting(argv, f"train_step:{STOP_AT}", "TERM", ranks)
    assert stopped.returncode != 0 and (ranks > 1 or "Traceback" not in stopped.stderr)  # (torchrun prints one)
    first = run_dirs(tmp_path / "stopped")[0]
    results = results_of(first)
    assert (results["status"], results["steps"]) == ("interrupted", STOP_AT), stopped.stderr[-3000:]
    launcher = "python" if ranks == 1 else f"torchrun --nproc_per_node={ranks}"
    assert results["resume_command"] == f"{launcher} train_gpt.py --resume {results['checkpoint']} {words}"
    log = open(os.path.join(first, records.LOG_FILE)).read()
    assert f"resume with --resume {results['checkpoint']} ({results['resume_command']})" in log

    resumed = run_recorded_command(results["resume_command"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = run_dirs(tmp_path / "stopped")[1]  # the checkpoint's --experiments_dir
    config = run_json(second, records.CONFIG_FILE)
    for key, value in flags.items():
        if value is not None:
            assert config[key] == value, (key, config[key])
    want = run_metric(run_dirs(tmp_path / "straight")[0], "train_loss")
    got = run_metric(second, "train_loss")
    assert sorted(got) == list(range(STOP_AT + 1, STEPS + 1))
    assert got == {step: want[step] for step in got}  # bit for bit, as written in metrics.csv
    assert run_metric(second, "val_loss") == {step: run_metric(run_dirs(tmp_path / "straight")[0], "val_loss")[step]
                                           for step in (4, 6)}
