"""compare_experiments.py end to end, as a subprocess, on synthetic run folders laid out like train_gpt.py writes
them (tests/helpers/run_folders.py): the leaderboard, its sorting, plots, diffs, bad input and Ctrl-C.
gptlab.compare in process: tests/unit/test_compare.py."""
import os
import re
import struct
import time

import pytest

from conftest import run_script
from helpers.run_folders import backdate, finished_results, make_run, metrics_rows, table_order, variant
from helpers.run_folders import lab  # noqa: F401 (a fixture)
from gptlab.train.records import METRICS_COLUMNS, METRICS_FILE, RESULTS_FILE


def run_compare(lab, *args):
    # --wide: every column (piped without it, the compact key columns)
    proc = run_script(["compare_experiments.py", "--experiments", lab, *(args if "--columns" in args else
                                                                          ("--wide", *args))])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def row_of(stdout, name):
    return next(line for line in stdout.splitlines() if line[:1].isdigit() and name in line)


def test_leaderboard_order_status_and_significance(lab):
    out = run_compare(lab)
    assert table_order(out) == [
        "20260102_090000_BetterIdea", "20260102_100000_TinyTweak", "20260101_100002_Baseline",
        "20260101_100000_Baseline", "20260101_100001_Baseline", "20260103_080000_OtherTok",
        "20260104_080000_Crashy", "20260105_080000_StillGoing", "20260105_090000_Oom", "20260105_100000_Empty"]
    # status: finished / crashed (no results, old, truncated) / running (recent) / failed / no metrics
    assert "finished" in row_of(out, "BetterIdea")
    assert "crashed" in row_of(out, "Crashy") and "running" in row_of(out, "StillGoing")
    assert "failed" in row_of(out, "_Oom") and "no metrics" in row_of(out, "_Empty")
    # figures: params, tokens, bpb, HellaSwag ± CI (number and [lo, hi] forms), GPU, memory, wall time
    best = row_of(out, "BetterIdea")
    for text in ("9.00M", "81.92K", "1.2500", "0.3300 ± 0.0090", "NVIDIA H100 80GB HBM3 ×1", "1.50 GB", "20.0s"):
        assert text in best, (text, best)
    # the reference is the docs' baseline group (named Baseline), its first-started run, not the best run;
    # BetterIdea has other parameters (9M vs 7.34M): not compared as if equal, and the cell says why
    assert "reference" in row_of(out, "20260101_100000_Baseline")
    assert "not compared: other size (9M vs 7.34M params)" in best
    assert "0.3250 ± 0.0090" in row_of(out, "TinyTweak")
    # significance: TinyTweak 0.045 below the baseline group (std 0.004, 3 seeds) is better; HellaSwag +0.025
    tweak = row_of(out, "TinyTweak")
    assert "-0.0450 better" in tweak and "+0.0250 better" in tweak
    # unfinished runs: last measured values, starred, and a note on the truncated CSV
    assert "*" in row_of(out, "Crashy")
    assert "Crashy: metrics.csv: last line" in out and "half-written" in out
    assert "Oom: error: CUDA out of memory" in out
    assert "skipped" in out and "notes" in out
    # tokenizers differ: a note says loss is not comparable but bpb is
    assert "different tokenizers" in out and "val loss is per token and NOT comparable" in out
    # noise section: the seed group of three with mean ± std
    noise = out[out.index("Noise"):]
    assert "Baseline" in noise and "1, 2, 3" in noise and "1.3000 ± 0.0040 (n=3)" in noise
    assert "0.3000 ± 0.0020 (n=3)" in noise


def test_leaderboard_markdown_written_with_links(lab):
    run_compare(lab)
    with open(os.path.join(lab, "LEADERBOARD.md")) as f:
        md = f.read()
    assert md.startswith("# Leaderboard")
    assert "| 1 | BetterIdea |" in md
    assert "[20260102_090000_BetterIdea](20260102_090000_BetterIdea/)" in md
    assert "## Noise" in md and "1.3000 ± 0.0040 (n=3)" in md
    assert "NOT comparable across tokenizers" in md
    assert not [n for n in os.listdir(lab) if ".tmp." in n]
    # Naming runs does not rewrite the all-runs leaderboard unless asked.
    before = os.path.getmtime(os.path.join(lab, "LEADERBOARD.md"))
    time.sleep(0.05)
    run_compare(lab, "TinyTweak", "BetterIdea", "--no-plot")
    assert os.path.getmtime(os.path.join(lab, "LEADERBOARD.md")) == before
    run_compare(lab, "TinyTweak", "BetterIdea", "--no-plot", "--write")
    with open(os.path.join(lab, "LEADERBOARD.md")) as f:
        md = f.read()
    assert md.startswith("# Leaderboard (2 selected runs)") and "OtherTok" not in md


def test_sort_columns(lab):
    out = run_compare(lab, "--sort", "params", "--desc", "--no-write")
    order = table_order(out)
    assert order[0] == "20260102_090000_BetterIdea"  # 9.0M, all others 7.34M
    out = run_compare(lab, "--sort", "hellaswag", "--desc", "--no-write")
    order = table_order(out)
    assert order[:2] == ["20260102_090000_BetterIdea", "20260102_100000_TinyTweak"]
    assert order[-1] == "20260105_100000_Empty"  # missing values go last in either direction
    out = run_compare(lab, "--sort", "status", "--no-write")
    order = table_order(out)
    assert order[-3:] == ["20260104_080000_Crashy", "20260105_090000_Oom", "20260105_100000_Empty"]
    # an explicit column sort ignores status: the unfinished runs' last bpb (2.44, 2.34) are the highest
    out = run_compare(lab, "--sort", "val-bpb", "--desc", "--no-write")
    assert table_order(out)[:3] == ["20260105_090000_Oom", "20260105_080000_StillGoing", "20260104_080000_Crashy"]
    assert table_order(out)[-1] == "20260105_100000_Empty"
    out = run_compare(lab, "--sort", "model", "--no-write")
    models = [row_of(out, n).split()[1] for n in table_order(out)]
    assert models == sorted(models, key=str.lower)


def test_mfu_column_shows_gpu_runs_speed(lab):
    out = run_compare(lab, "--sort", "mfu", "--desc", "--no-write")
    assert table_order(out)[:2] == ["20260102_090000_BetterIdea", "20260105_080000_StillGoing"]
    assert "41.2%" in row_of(out, "BetterIdea") and "35.0%*" in row_of(out, "StillGoing")  # * = last measured
    assert "%" not in row_of(out, "20260101_100000_Baseline")  # no MFU recorded: a dash
    # a finished one-step run: results.json's null (only the warm-up step was timed) wins over that step's figure
    one_step = variant(model_name="OneStep", num_layers=2)
    rows = [dict(r, mfu=0.05) if r.get("train_loss") is not None else r for r in metrics_rows(1, 1.9, 0.25)]
    make_run(lab, "20260106_080000_OneStep", one_step, rows, finished_results(one_step, 1.9, 0.25, mfu=None))
    assert "%" not in row_of(run_compare(lab, "--no-write"), "OneStep")


def test_keys_a_newer_trainer_leaves_unset_do_not_split_a_seed_group(tmp_path):
    root = str(tmp_path / "experiments")
    os.makedirs(root)
    for i, extra in enumerate([{}, {"gpu_bf16_peak_tflops": None, "from_checkpoint": []}]):
        config = variant(seed=i, **extra)
        make_run(root, f"2026010{i + 1}_100000_Baseline", config, metrics_rows(40, 1.3 + i / 100, 0.3),
                 finished_results(config, 1.3 + i / 100, 0.3))
    assert re.search(r"^Baseline +2 +0, 1 ", run_compare(root, "--no-write"), re.M)  # one seed group of two


def test_plot_png_size_in_each_run_and_at_path(lab, tmp_path):
    out_png = str(tmp_path / "out.png")
    run_compare(lab, os.path.join(lab, "2026*_Baseline"), os.path.join(lab, "*_BetterIdea"), "*Crashy",
                "--plot", out_png, "--size", "900x700")
    with open(out_png, "rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    assert struct.unpack(">II", header[16:24]) == (900, 700)
    # an existing --plot file is only replaced with --overwrite
    proc = run_script(["compare_experiments.py", "--experiments", lab, "BetterIdea", "--plot", out_png])
    assert proc.returncode == 2 and "--overwrite" in proc.stderr
    proc = run_script(["compare_experiments.py", "--experiments", lab, "BetterIdea", "--plot", str(tmp_path / "a.jpg")])
    assert proc.returncode == 2 and "ending in .png" in proc.stderr and not os.path.exists(tmp_path / "a.jpg")
    # named runs without --plot: compare.png (default size) in each compared run's folder
    run_compare(lab, "BetterIdea", "TinyTweak")
    for folder in ("20260102_090000_BetterIdea", "20260102_100000_TinyTweak"):
        with open(os.path.join(lab, folder, "compare.png"), "rb") as f:
            assert struct.unpack(">II", f.read(24)[16:24]) == (1600, 1200)
    assert not os.path.exists(os.path.join(lab, "20260101_100000_Baseline", "compare.png"))


def test_diff_names_changed_flag_and_files(lab):
    out = run_compare(lab, "--diff", "20260101_100000_Baseline", "BetterIdea")
    assert "~ model_dim: 128 -> 192" in out
    assert '~ model_name: "Baseline" -> "BetterIdea"' in out
    assert "changed: train_gpt.py" in out
    assert "added in B: gptlab/muon.py" in out and "removed in B: gptlab/model.py" in out
    assert "--- A/code/train_gpt.py" in out and "-LR = 0.01" in out and "+LR = 0.02" in out
    same = run_compare(lab, "--diff", "20260101_100000_Baseline", "20260101_100001_Baseline")
    assert "~ seed: 1 -> 2  (varies between repeats)" in same and "identical (3 files)" in same


@pytest.mark.parametrize("args, expected", [
    (["--experiments", "{tmp}/nowhere"], "does not exist: start a run with `python train_gpt.py"),
    (["--experiments", "{tmp}/empty"], "no runs in"),
    (["--experiments", "{lab}", "--sort", "speed"], "unknown --sort column 'speed'; valid columns: model, date"),
    (["--experiments", "{lab}", "--diff", "20260101_100000_Baseline", "NoSuchRun"], "no run folder 'NoSuchRun'"),
    (["--experiments", "{lab}", "--diff", "Baseline", "BetterIdea"], "ambiguous"),
    (["--experiments", "{lab}", "{lab}/2099*_Nope"], "no run folder matches"),
    (["--experiments", "{lab}", "{lab}/notes"], "is not a run folder"),
    (["--experiments", "{lab}", "--size", "big"], "--size 'big' is not WIDTHxHEIGHT"),
    (["--experiments", "{lab}", "--baseline", "NoSuchRun"], "no run folder 'NoSuchRun'"),
])
def test_bad_input_clear_message_exit_2(lab, tmp_path, args, expected):
    os.makedirs(tmp_path / "empty", exist_ok=True)
    args = [a.format(tmp=tmp_path, lab=lab) for a in args]
    proc = run_script(["compare_experiments.py", *args])
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_damaged_files_are_reported_not_fatal(tmp_path):
    root = str(tmp_path)
    path = make_run(root, "20260101_000000_Damaged", None, metrics_rows(20, 1.5, 0.27), age_s=3600)
    with open(os.path.join(path, METRICS_FILE), "a") as f:  # a garbage row in the middle, then a good one
        f.write("not,a,number" + "," * (len(METRICS_COLUMNS) - 3) + "\n99,1,2.5" + "," * (len(METRICS_COLUMNS) - 3) + "\n")
    with open(os.path.join(path, RESULTS_FILE), "w") as f:
        f.write('{"status": "fini')  # results.json cut off: the run is judged from its metrics instead
    backdate(path, 3600)
    make_run(root, "20260101_000001_HeaderOnly", {"model_name": "HeaderOnly"}, [], age_s=3600)
    proc = run_script(["compare_experiments.py", "--experiments", root, "--no-write", "--wide"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Damaged: no config.json" in out
    assert "Damaged: results.json is unreadable" in out
    assert "Damaged: metrics.csv: ignored 1 unreadable line(s)" in out
    assert "crashed" in row_of(out, "Damaged") and "no metrics" in row_of(out, "HeaderOnly")
    assert "No finished run with a val bpb yet" in out


def test_ctrl_c_while_reading_runs_exits_130_without_a_traceback(tmp_path):
    """Interrupted while reading a run's metrics.csv (a named pipe fed its header and kept open): status 130, one
    'interrupted' line, no traceback, no LEADERBOARD.md."""
    from conftest import interrupt_while_reading

    root = str(tmp_path / "experiments")
    os.makedirs(root)
    config = variant()
    make_run(root, "20260101_100000_Baseline", config, results=finished_results(config, 1.3, 0.3))
    fifo = os.path.join(root, "20260101_100000_Baseline", METRICS_FILE)
    code, _, err = interrupt_while_reading(["compare_experiments.py", "--experiments", root], fifo,
                                           (",".join(METRICS_COLUMNS) + "\n").encode())
    assert code == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err, err[-2000:]
    assert not os.path.exists(os.path.join(root, "LEADERBOARD.md"))
