"""Tiny CPU runs of train_gpt.py, shared by the trainer's in-process tests (tests/unit/test_train_gpt.py) and its
end-to-end runs (tests/e2e/test_train_gpt_e2e.py, tests/e2e/test_dashboards.py): the flags of a tiny run on the
`tiny` dataset (tests/conftest.py), its run folder, and an in-process run that must fail on bad input."""
import glob
import json
import os
import sys

import pytest

from conftest import REPO
from gptlab.core.errors import UserError

sys.path.insert(0, REPO)
import train_gpt  # noqa: E402


def tiny_args(tiny, exp_dir, **overrides):
    """CLI flags of a tiny CPU run (dim 64, 4 layers, seq 128, 1024 tokens/step)."""
    flags = {"tokenizer": tiny["tokenizer"], "train_files": tiny["train"], "val_files": tiny["val"],
             "train_seq_len": 128, "val_seq_len": 128, "model_dim": 64, "num_heads": 2, "num_layers": 4,
             "batch_size": 1024, "device_batch_size": 512, "train_steps": 20, "val_loss_every": 10, "val_steps": 2,
             "window_size": 256, "hellaswag_limit": 0, "experiments_dir": str(exp_dir), "log_every": 0,
             "sample_tokens": 0, "model_name": "tiny"}
    flags.update(overrides)
    argv = []
    for key, value in flags.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is not None and value is not False:
            argv += [f"--{key}", str(value)]
    return argv


def only_run_dir(exp_dir, name="tiny"):
    dirs = sorted(glob.glob(os.path.join(str(exp_dir), f"*_{name}*")))
    assert len(dirs) == 1, dirs
    return dirs[0]


def run_metric(run_dir, column):
    """{step: value} of one metrics.csv column, where measured."""
    from gptlab.train import records

    return {r["step"]: r[column] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r[column] is not None}


def run_json(run_dir, name):
    """A run folder's JSON file (config.json, results.json) as a dict."""
    with open(os.path.join(run_dir, name)) as f:
        return json.load(f)


def run_main_expecting(tiny, tmp_path, message_parts, **overrides):
    """In-process run that must fail with a UserError naming message_parts, before creating any run folder."""
    with pytest.raises(UserError) as info:
        train_gpt.main(tiny_args(tiny, tmp_path / "exps", **overrides))
    for part in message_parts:
        assert part in str(info.value), str(info.value)
    assert not glob.glob(str(tmp_path / "exps" / "*"))
    return str(info.value)


def run_acting(argv, at, do, ranks=1, **env):
    """train_gpt.py `argv` through tests/helpers/act_at_train.py: GPTLAB_TEST_DO `do` at GPTLAB_TEST_AT `at` (on
    `ranks` torchrun ranks when more than 1); the CompletedProcess."""
    from conftest import free_port, run_script

    script = os.path.join("tests", "helpers", "act_at_train.py")
    launch = [script] if ranks == 1 else ["torchrun", f"--nproc_per_node={ranks}", "--master_port", free_port(), script]
    return run_script(launch + argv, env_extra=dict(env, GPTLAB_TEST_AT=at, GPTLAB_TEST_DO=do))


def stopped_by_changed_file(proc, path, what, exp_dir):
    """Check a run stopped by an evaluation file changed mid-run: exit 2, one `error: evaluation file PATH changed
    since the run started (... WHAT ...)` line and no traceback, results.json `failed` with that error. Returns
    the run folder."""
    from gptlab.train import records

    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"error: evaluation file {path} changed since the run started (") and what in errors[0]
    run_dir = only_run_dir(exp_dir)
    results = run_json(run_dir, records.RESULTS_FILE)
    assert results["status"] == "failed" and "error: " + results["error"] == errors[0]
    return run_dir


def run_recorded_command(command):
    """Run a command a run recorded (`python train_gpt.py ...` or `torchrun --nproc_per_node=N train_gpt.py ...`)
    as written, on a free port; the CompletedProcess."""
    import shlex

    from conftest import free_port, run_script

    words = shlex.split(command)
    if words[0] == "torchrun":
        return run_script(words[:2] + ["--master_port", free_port()] + words[2:])
    assert words[0] == "python", command
    return run_script(words[1:])
