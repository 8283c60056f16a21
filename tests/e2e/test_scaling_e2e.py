"""compare_experiments.py --scaling end to end, as a subprocess, on synthetic runs drawn from a known law
(tests/helpers/scaling_law.py): it prints a prediction for a budget and draws the PNG. The fits themselves:
tests/unit/test_scaling.py."""
import os

import numpy as np

from conftest import run_script
from helpers.run_folders import finished_results, make_run, metrics_rows, variant
from helpers.scaling_law import FLOPS, true_loss


def _law_runs(root, noise_seed=0):
    """Eight finished runs on one H100 whose val bpb follows the law (plus 0.002 noise); train_flops in results,
    each run's wall time such that it ran at 1e15 FLOP/s (3.6e18 FLOPs per GPU-hour)."""
    rng = np.random.default_rng(noise_seed)
    for i, flops in enumerate(FLOPS):
        bpb = float(true_loss(flops) + rng.normal(0, 0.002))
        config = variant(model_name=f"Scale{i}", num_layers=i + 2)
        make_run(root, f"20260101_00000{i}_Scale{i}", config, metrics_rows(10, bpb, 0.3),
                 finished_results(config, bpb, 0.3, train_flops=float(flops), wall_time_s=float(flops) / 1e15))


def test_compare_experiments_scaling_prints_a_prediction_and_draws_the_png(tmp_path):
    root = str(tmp_path / "experiments")
    os.makedirs(root)
    _law_runs(root)
    proc = run_script(["compare_experiments.py", "--experiments", root, "--scaling", "--budget", "1gpuh"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Scaling fit over 8 runs: L(C) = E + A·C^(−α)" in out and "from results.json" in out
    # 1 GPU-hour at 3.6e18 FLOPs per GPU-hour: the law says 1.5 + 40 (3.6e18)^-0.12 = 1.9489
    assert "at 3.6e+18 FLOPs per GPU-hour" in out and "= 3.6e+18 FLOPs" in out
    line = next(l for l in out.splitlines() if l.strip().startswith("L(C): val bpb"))
    value = float(line.split("val bpb ")[1].split(";")[0])
    lo, hi = (float(x) for x in line.split("interval for one run [")[1].rstrip("]").split(", "))
    assert lo < true_loss(3.6e18) < hi and abs(value - true_loss(3.6e18)) < 0.01
    assert "an extrapolation beyond the fitted runs' FLOPs" in out and "do not pin the law down" not in out
    with open(os.path.join(root, "scaling.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # dollars at a price: $3 at $3/GPU-hour is the same budget
    proc = run_script(["compare_experiments.py", "--experiments", root, "--scaling", "--budget", "$3",
                       "--usd_per_gpu_hour", "3", "--no-plot"])
    assert proc.returncode == 0 and "$3 at $3/GPU-hour = 1 GPU-hours" in proc.stdout and value == float(
        next(l for l in proc.stdout.splitlines() if "L(C): val bpb" in l).split("val bpb ")[1].split(";")[0])


def test_scaling_needs_enough_runs(tmp_path):
    root = str(tmp_path)
    config = variant()
    make_run(root, "20260101_000000_Only", config, metrics_rows(10, 1.3, 0.3),
             finished_results(config, 1.3, 0.3, train_flops=1e15))
    proc = run_script(["compare_experiments.py", "--experiments", root, "--scaling"])
    assert proc.returncode == 2 and "a scaling fit needs at least 4 finished runs" in proc.stderr
