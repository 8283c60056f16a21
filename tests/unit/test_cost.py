"""What runs cost: gptlab.train.cost (GPU-hours, the price table), what gptlab.train.run records, and the leaderboard's GPU-h,
Cost and cost-per-0.01-bpb columns. Expected figures are worked out by hand from the inputs. compare_experiments.py's
cost flags: tests/e2e/test_cost_e2e.py."""
import json
import os

import pytest

from gptlab import compare as cmp
from gptlab.train import cost
from gptlab.checkpoint import checkpointing
from gptlab.train import records
from gptlab.core.errors import UserError
from helpers.run_folders import cells_by_run, finished_results, make_run, metrics_rows, variant
from helpers.run_folders import priced  # noqa: F401 (a fixture)
from test_run import make_run as make_training_run
from test_run import read, tokenizer  # noqa: F401 (the fixture)


@pytest.mark.parametrize("name, price", [("NVIDIA H100 80GB HBM3", 3.00), ("NVIDIA H100 PCIe", 2.40),
                                         ("NVIDIA A100-SXM4-80GB", 1.80), ("NVIDIA A100-PCIE-40GB", 1.40),
                                         ("NVIDIA A10", 0.75), ("NVIDIA L40S", 1.00), ("NVIDIA L4", 0.60),
                                         ("NVIDIA GH200 480GB", 3.20), ("NVIDIA H200", 3.80), ("AMD MI300X", None),
                                         (None, None)])
def test_price_table_matches_whole_words_most_specific_first(name, price):
    assert cost.table_price(name) == price


def test_gpu_hours_count_every_process_and_the_overhead():
    assert cost.gpu_hours(7200, 8) == 16.0  # 8 GPUs x 2 h
    assert cost.gpu_hours(7200, 8, overhead_minutes=60) == 24.0  # 8 x (2 h + 1 h)
    assert cost.gpu_hours(None, 8) is None and cost.cost_usd(16.0, None) is None
    assert cost.cost_usd(16.0, 2.5) == 40.0
    assert cost.usd_per_gpu_hour("NVIDIA H100 80GB HBM3", 2.0) == (2.0, "--usd_per_gpu_hour")
    assert cost.usd_per_gpu_hour("NVIDIA H100 80GB HBM3")[0] == 3.00 and cost.usd_per_gpu_hour(None) == (None, None)
    with pytest.raises(UserError, match="--usd_per_gpu_hour -1 must be a price >= 0"):
        cost.usd_per_gpu_hour(None, -1)


def test_a_run_records_gpu_hours_cost_and_training_flops(tmp_path, tokenizer):  # noqa: F811
    run, model, optimizer = make_training_run(tmp_path, tokenizer, usd_per_gpu_hour=2.0)
    with run:
        run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=2e12)
        run.log_step(2, train_loss=2.5, lr=0.5, step_time_s=0.25, flops=3e12)
        results = run.finish(val_loss=1.9, val_bpb=1.4, hellaswag=None)
    assert results["train_flops"] == 5e12  # every step's FLOPs, the first included
    assert results["gpu_hours"] == pytest.approx(results["wall_time_s"] / 3600)  # one process
    assert results["cost_usd"] == pytest.approx(2.0 * results["wall_time_s"] / 3600)
    config = read(run.dir, records.CONFIG_FILE)
    assert (config["usd_per_gpu_hour"], config["usd_per_gpu_hour_source"]) == (2.0, "--usd_per_gpu_hour")
    # on CPU without the flag: no price, so no dollars (the GPU-hours are still recorded)
    run, _, _ = make_training_run(tmp_path / "cpu", tokenizer)
    with run:
        run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=1e9)
        results = run.finish(val_loss=1.9, val_bpb=1.4, hellaswag=None)
    assert results["cost_usd"] is None and results["usd_per_gpu_hour"] is None and results["gpu_hours"] > 0


def test_a_resumed_run_carries_its_training_flops_on(tmp_path, tokenizer):  # noqa: F811
    run, model, optimizer = make_training_run(tmp_path, tokenizer)
    with run:
        run.log_step(1, train_loss=3.0, lr=1.0, step_time_s=0.5, flops=2e12)
        run.save_checkpoint(1, model, [optimizer], type("L", (), {"state_dict": lambda self: {}})())
        run.finish(val_loss=1.9, val_bpb=1.4, hellaswag=None)
    ckpt = checkpointing.load_checkpoint(os.path.join(run.dir, records.CHECKPOINT_DIR, "step_000001.pt"))
    resumed, _, _ = make_training_run(tmp_path / "resumed", tokenizer)
    resumed.__init__(resumed.cfg, resumed.ctx, repo_root=resumed.repo_root, model=model, model_config={},
                     optimizers=[optimizer], train_loader=type("L", (), {"counts": [1]})(), tokenizer=tokenizer,
                     shards=resumed.shards, checkpoint=ckpt)
    with resumed:
        resumed.log_step(2, train_loss=2.5, lr=1.0, step_time_s=0.5, flops=3e12)
        results = resumed.finish(val_loss=1.8, val_bpb=1.3, hellaswag=None)
    assert results["train_flops"] == 5e12


def test_leaderboard_cost_columns(priced):
    board = cmp.compare([], experiments_dir=priced, baseline="20260101_000000_Base", no_plot=True,
                        write=False)["board"]
    cells = cells_by_run(board)
    base, cheap, slow, wide = (cells[f"20260101_00000{i}_{n}"] for i, n in enumerate(("Base", "Cheap", "Slow", "Wide")))
    # 20 s on one H100 = 0.005556 GPU-h at the table's $3.00 = $0.0167; 8 GPUs x 36 s = 0.08 GPU-h = $0.24
    assert (base["GPU-h"], base["Cost"]) == ("0.00556", "$0.0167")
    assert (wide["GPU-h"], wide["Cost"]) == ("0.08", "$0.24")
    assert cheap["Cost per 0.01 bpb vs baseline"] == "better and cheaper"  # 5 x 0.01 better, same cost
    # Slow: 36 s more on one GPU = 0.01 GPU-h = $0.03 for 2 x 0.01 bpb: $0.015 per 0.01
    assert slow["Cost per 0.01 bpb vs baseline"] == "$0.015 per 0.01 gained"
    assert wide["Cost per 0.01 bpb vs baseline"] == "worse and costlier"
    assert base["Cost per 0.01 bpb vs baseline"] == "reference"
    # at $10 per GPU-hour and with gpt-lab's 60 minutes of overhead per run: Base = (20 s + 3600 s) x $10 = $10.06
    board = cmp.compare([], experiments_dir=priced, baseline="20260101_000000_Base", no_plot=True, write=False,
                        usd_per_gpu_hour=10.0, overhead_minutes=60.0)["board"]
    cells = cells_by_run(board)
    assert cells["20260101_000000_Base"]["Cost"] == "$10.06" and cells["20260101_000000_Base"]["GPU-h"] == "1.01"
    assert cells["20260101_000002_Slow"]["Cost per 0.01 bpb vs baseline"] == "$0.05 per 0.01 gained"  # $0.1 / 2
    # wide: 8 x (36 s + 3600 s) = 8.08 GPU-h
    assert cells["20260101_000003_Wide"]["GPU-h"] == "8.08" and cells["20260101_000003_Wide"]["Cost"] == "$80.80"


def test_a_cpu_run_counts_its_process_hours_and_has_no_table_price(tmp_path):
    config = variant(model_name="Cpu", device="cpu", gpu_name=None, gpu_count=0)
    make_run(str(tmp_path), "20260101_000000_Cpu", config, metrics_rows(10, 2.0, 0.3),
             finished_results(config, 2.0, 0.3, wall_time_s=72.0, gpu_name=None))
    row = cells_by_run(cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False)["board"])[
        "20260101_000000_Cpu"]
    assert (row["GPU-h"], row["Cost"]) == ("0.02 (CPU)", cmp.MISSING)  # 72 s = 0.02 h
    priced_row = cells_by_run(cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False,
                                          usd_per_gpu_hour=0.5)["board"])["20260101_000000_Cpu"]
    assert priced_row["Cost"] == "$0.01"
    with open(os.path.join(str(tmp_path), "20260101_000000_Cpu", "results.json")) as f:
        assert "gpu_hours" not in json.load(f)  # computed from wall_time_s x world_size, as for older runs
