"""sweep.py end to end on CPU, as a subprocess: a sweep runs every point, survives a failure, resumes and ends with its
leaderboard. Its checks in process: tests/unit/test_sweep.py."""
import glob
import json
import os

import pytest

from conftest import SHARED_DATA, run_script
from helpers.run_folders import finished_results, make_run, metrics_rows, table_order, variant

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


def train_flags(tiny):
    """A 2-layer, dim-64 model, 2 steps of 256 tokens, one validation batch, no HellaSwag, no samples."""
    return ["--tokenizer", tiny["tokenizer"], "--train_files", tiny["train"], "--val_files", tiny["val"],
            "--train_seq_len", "128", "--val_seq_len", "128", "--model_dim", "64", "--num_layers", "2",
            "--batch_size", "256", "--device_batch_size", "256", "--train_steps", "2", "--val_loss_every", "0",
            "--val_steps", "1", "--window_size", "128", "--hellaswag_limit", "0", "--log_every", "0",
            "--sample_tokens", "0"]


def test_a_sweep_runs_every_point_survives_a_failure_resumes_and_ends_with_its_leaderboard(tiny, tmp_path):
    exp_dir = str(tmp_path / "experiments")
    os.makedirs(exp_dir)
    other = variant(model_name="NotInTheSweep")  # a run already there: not part of the sweep's leaderboard
    make_run(exp_dir, "20260101_000000_NotInTheSweep", other, metrics_rows(10, 1.0, 0.3),
             finished_results(other, 1.0, 0.3))
    # num_heads 3 does not divide model_dim 64: those two points fail before training
    argv = ["sweep.py", "--name", "Sw", "--grid", "lr_scale=0.5,1", "--grid", "num_heads=2,3", "--seeds", "0",
            "--experiments_dir", exp_dir, "--", *train_flags(tiny)]
    proc = run_script(argv)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(os.path.join(exp_dir, "sweep_Sw.json")) as f:
        record = json.load(f)
    points = {p["model_name"]: p for p in record["points"]}
    assert list(points) == ["Sw_lr_scale0.5_num_heads2", "Sw_lr_scale0.5_num_heads3", "Sw_lr_scale1_num_heads2",
                            "Sw_lr_scale1_num_heads3"]
    for name in ("Sw_lr_scale0.5_num_heads2", "Sw_lr_scale1_num_heads2"):
        point = points[name]
        assert point["status"] == "finished" and point["exit_code"] == 0 and point["run_dir"].endswith("_" + name)
        with open(os.path.join(point["run_dir"], "config.json")) as f:
            config = json.load(f)
        lr_scale = float(name.split("lr_scale")[1].split("_")[0])
        assert (config["model_name"], config["lr_scale"], config["num_heads"], config["seed"]) == (name, lr_scale, 2, 0)
    for name in ("Sw_lr_scale0.5_num_heads3", "Sw_lr_scale1_num_heads3"):
        point = points[name]
        assert point["status"] == "failed" and point["exit_code"] == 2 and point["run_dir"] is None
        assert "not divisible by --num_heads 3" in point["error"]
    assert "failed (exit code 2)" in proc.stdout and "the sweep goes on" in proc.stdout
    assert "sweep Sw: 2 failed, 2 finished" in proc.stdout
    board = proc.stdout[proc.stdout.index("sweep Sw: 2 failed"):]
    assert sorted(table_order(board)) == sorted(os.path.basename(points[n]["run_dir"]) for n in
                                                ("Sw_lr_scale0.5_num_heads2", "Sw_lr_scale1_num_heads2"))
    assert "NotInTheSweep" not in board

    # again: the finished runs are skipped (no new folder), the failed ones are tried again
    proc = run_script(argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sweep Sw: 2 of 4 runs already finished (skipped); 2 to run" in proc.stdout
    assert "== Sw: lr_scale=0.5 num_heads=2" not in proc.stdout and "== Sw: lr_scale=1 num_heads=3" in proc.stdout
    for name in ("Sw_lr_scale0.5_num_heads2", "Sw_lr_scale1_num_heads2"):
        assert len(glob.glob(os.path.join(exp_dir, f"*_{name}"))) == 1
    assert len(table_order(proc.stdout[proc.stdout.index("sweep Sw: 2 failed"):])) == 2
