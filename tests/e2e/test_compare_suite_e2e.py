"""A real tiny run with train_gpt.py --evals, then compare_experiments.py (issue 38): the leaderboard shows its
final core and gold bpb with their intervals and "(first N)", sorts by them, the --summary has them, and the plot
gets the two suite panels with the figures of metrics.csv's suite rows."""
import csv
import io
import os

import pytest

from conftest import SHARED_DATA, run_script
from helpers.eval_tasks import data_dir_with
from helpers.run_folders import drawn_figure
from helpers.tiny_runs import only_run_dir, run_json, tiny_args
from gptlab import compare as cmp
from gptlab.train import records

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")

TASKS = ["arc_easy", "copa"]
LIMIT = 4


def test_a_run_with_evals_in_the_leaderboard_summary_and_plot(tiny, tmp_path, monkeypatch):
    data = data_dir_with(tmp_path / "data", TASKS, limit=LIMIT)
    exps = tmp_path / "exps"
    run_script(["train_gpt.py"] + tiny_args(tiny, exps, train_steps=4, val_loss_every=0, evals=",".join(TASKS),
                                            evals_every=2, evals_limit=LIMIT, evals_data_dir=data,
                                            window_size=128), check=True, timeout=600)
    run_dir = only_run_dir(exps)
    final = run_json(run_dir, records.RESULTS_FILE)["evals"]
    plot = tmp_path / "curves.png"
    proc = run_script(["compare_experiments.py", "--experiments", exps, "--wide", "--no-write", "--sort", "centred",
                       "--desc", run_dir, "--plot", plot])
    assert proc.returncode == 0, proc.stderr
    assert "Core ±95% CI" in proc.stdout and "Gold bpb ±95% CI" in proc.stdout
    for key in ("core", "gold_bpb"):  # the recorded interval is symmetric (mean ± 1.96 se): ± its half width
        lo, hi = final[key + "_ci95"]
        assert f"{final[key]:.4f} ± {(hi - lo) / 2:.4f} (first {LIMIT})" in proc.stdout, (key, proc.stdout)
    assert plot.exists() and plot.stat().st_size > 0

    summary = run_script(["compare_experiments.py", "--experiments", exps, "--summary", "csv"])
    assert summary.returncode == 0, summary.stderr
    (row,) = csv.DictReader(io.StringIO(summary.stdout))
    assert float(row["core_mean"]) == pytest.approx(final["core"], rel=1e-5) and row["core_std"] == ""
    assert float(row["gold_bpb_mean"]) == pytest.approx(final["gold_bpb"], rel=1e-5)

    # the figure drawn: six panels, the suite's against tokens as metrics.csv has them at steps 2 and 4
    fig = drawn_figure(monkeypatch, [cmp.load_run(run_dir)])
    assert len(fig.axes) == 6
    rows = [r for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r.get("evals_core") is not None]
    assert [r["step"] for r in rows] == [2, 4]
    for ax, column in ((fig.axes[4], "evals_core"), (fig.axes[5], "evals_gold_bpb")):
        (line,) = ax.lines
        assert list(line.get_xdata()) == [r["tokens"] for r in rows] == [2 * 1024, 4 * 1024]
        assert list(line.get_ydata()) == pytest.approx([r[column] for r in rows])
