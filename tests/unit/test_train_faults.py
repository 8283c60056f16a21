"""train_gpt.py in-process, faults in the run's own files and in memory (issue 24): a disk that fills while the
log or metrics are written, CPU out of memory, a loss that stays above a uniform guess's, and the flags that would
make a run folder's name or the learning rates impossible."""
import errno
import json
import os
import sys

import pytest

from conftest import REPO, SHARED_DATA
from helpers.tiny_runs import only_run_dir, tiny_args
from gptlab.core.errors import UserError
from gptlab.train import records

sys.path.insert(0, REPO)
import train_gpt  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


def results_of(run_dir):
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        return json.load(f)


@pytest.mark.parametrize("writer, method", [(records.RunLog, "__call__"), (records.MetricsWriter, "write")])
def test_a_disk_that_fills_while_training_is_one_error_and_a_failed_run(tiny, tmp_path, monkeypatch, writer, method):
    real = getattr(writer, method)
    calls = {"n": 0}

    def full_after_a_few(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 8:
            raise OSError(errno.ENOSPC, "No space left on device", getattr(self, "file").name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(writer, method, full_after_a_few)
    with pytest.raises(UserError) as info:
        train_gpt.main(tiny_args(tiny, tmp_path, train_steps=20, log_every=1))
    assert "No space left on device" in str(info.value) and "could not write" in str(info.value)
    results = results_of(only_run_dir(tmp_path))
    assert results["status"] == "failed" and "No space left on device" in results["error"]


def test_cpu_out_of_memory_is_one_error_suggesting_a_smaller_micro_batch(tiny, tmp_path, monkeypatch):
    def oom(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you "
                           "tried to allocate 21474836480 bytes.")

    monkeypatch.setattr(train_gpt, "make_train_step", lambda *args, **kwargs: oom)
    with pytest.raises(UserError) as info:
        train_gpt.main(tiny_args(tiny, tmp_path))
    assert str(info.value).startswith("out of memory on the CPU (") and "lower --device_batch_size" in str(info.value)
    assert results_of(only_run_dir(tmp_path))["status"] == "failed"


def test_a_loss_that_stays_above_a_uniform_guess_stops_the_run(tiny, tmp_path):
    with pytest.raises(UserError, match=r"training diverged: the training loss \(\d+\.\d+ at step 15\) has stayed "
                                        r"above ln\(vocabulary\) \+ 1"):
        train_gpt.main(tiny_args(tiny, tmp_path, train_steps=30, lr_scale=1000))
    results = results_of(only_run_dir(tmp_path))
    assert results["status"] == "failed" and "training diverged" in results["error"]


@pytest.mark.parametrize("flag, value, message", [
    ("lr_scale", "1e300", "--lr_scale 1e+300 must be a positive number up to 1e6"),
    ("lr_scale", "1e30", "--lr_scale 1e+30 must be a positive number up to 1e6"),
    ("model_name", "x" * 300, "(300 characters) is too long"),
    ("model_name", "a\nb", "must not hold control characters"),
])
def test_flags_that_cannot_make_a_run_are_one_error_before_any_folder(tiny, tmp_path, flag, value, message):
    with pytest.raises(UserError) as info:
        train_gpt.main(tiny_args(tiny, tmp_path / "exps", **{flag: value}))
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not os.path.exists(tmp_path / "exps")
