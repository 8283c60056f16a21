"""compare_experiments.py / gptlab.compare on synthetic run folders laid out like train_gpt.py writes them."""
import csv
import io
import json
import math
import os
import re
import struct
import time

import pytest

from conftest import run_script
from gptlab import compare as cmp
from gptlab.train.records import CODE_DIR, CONFIG_FILE, LOG_FILE, METRICS_COLUMNS, METRICS_FILE, RESULTS_FILE

BASE_CONFIG = {"model_name": "Baseline", "tokenizer": "gpt2", "tokenizer_name": "gpt2",
               "tokenizer_ranks_sha256": "aaa111", "git_commit": "abc", "versions": {"torch": "2.13.0"},
               "vocab_size": 50304, "num_layers": 4, "num_heads": 4, "model_dim": 128, "head_dim": 32,
               "mlp_ratio": 4, "train_seq_len": 256, "batch_size": 8, "train_steps": 40, "seed": 1,
               "world_size": 1, "device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1,
               "n_params": 7_340_032, "command": "train_gpt.py --seed 1", "start_time": "2026-01-01T10:00:00"}
BASE_CODE = {"train_gpt.py": "import torch\nLR = 0.01\n\ndef train():\n    return LR\n",
             "gptlab/model.py": "class GPT:\n    pass\n", "requirements.txt": "torch==2.13.0\n"}


def metrics_rows(steps, final_bpb, final_acc, tokens_per_step=2048, step_time=0.5, eval_every=10):
    """Train rows every step and eval rows every `eval_every` steps, loss decaying towards the final figures."""
    rows = []
    for step in range(steps + 1):
        progress = step / steps
        tokens, elapsed = step * tokens_per_step, step * step_time
        if step > 0:
            rows.append({"step": step, "tokens": tokens, "train_loss": final_bpb * 2.3 + 4.0 * math.exp(-5 * progress)
                         + 0.15 * math.sin(step * 2.7),
                         "lr": 0.01, "step_time_s": step_time, "elapsed_s": elapsed,
                         "tokens_per_s": tokens_per_step / step_time})
        if step % eval_every == 0:
            bpb = final_bpb + 1.5 * (1 - progress) ** 2
            rows.append({"step": step, "tokens": tokens, "val_loss": bpb * 2.4, "val_bpb": bpb, "elapsed_s": elapsed,
                         "hellaswag_acc": final_acc - 0.01 - 0.05 * (1 - progress),
                         "hellaswag_acc_norm": final_acc - 0.05 * (1 - progress)})
    return rows


def make_run(root, folder, config=None, rows=None, results=None, code=None, age_s=0, truncate_last=False):
    """Write one run folder; `age_s` back-dates its files (a crashed run stops writing)."""
    path = os.path.join(root, folder)
    os.makedirs(path)
    if config is not None:
        with open(os.path.join(path, CONFIG_FILE), "w") as f:
            json.dump(config, f)
    if rows is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=METRICS_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
        if truncate_last:  # killed mid-write: the last row stops half-way, no newline
            text = text[:-1]
            text = text[: text.rfind("\n") + 1 + 9]
        with open(os.path.join(path, METRICS_FILE), "w") as f:
            f.write(text)
        with open(os.path.join(path, LOG_FILE), "w") as f:
            f.write("step 1 ...\n")
    if results is not None:
        with open(os.path.join(path, RESULTS_FILE), "w") as f:
            json.dump(results, f)
    for rel, text in (code or {}).items():
        os.makedirs(os.path.dirname(os.path.join(path, CODE_DIR, rel)), exist_ok=True)
        with open(os.path.join(path, CODE_DIR, rel), "w") as f:
            f.write(text)
    if age_s:
        backdate(path, age_s)
    return path


def backdate(path, age_s):
    old = time.time() - age_s
    for dirpath, _, names in os.walk(path):
        for name in names:
            os.utime(os.path.join(dirpath, name), (old, old))
    os.utime(path, (old, old))


def finished_results(config, bpb, acc, ci=0.009, status="finished", **extra):
    res = {"status": status, "final_val_loss": bpb * 2.4, "final_val_bpb": bpb,
           "hellaswag": {"acc": acc - 0.01, "acc_ci95": ci, "acc_norm": acc, "acc_norm_ci95": ci, "n": 10042},
           "tokens": 40 * 2048, "steps": 40, "wall_time_s": 20.0, "peak_mem_allocated_gb": 1.5,
           "peak_mem_reserved_gb": 2.0, "n_params": config["n_params"], "gpu_name": config["gpu_name"],
           "world_size": 1, "tokenizer": config["tokenizer"], "model_name": config["model_name"],
           "seed": config["seed"]}
    res.update(extra)
    return res


def variant(**changes):
    config = dict(BASE_CONFIG)
    config.update(changes)
    return config


@pytest.fixture
def lab(tmp_path):
    """A seed group of 3, a clear winner, a near tie, another tokenizer, crashed / running / failed runs."""
    root = str(tmp_path / "experiments")
    os.makedirs(root)
    for i, (seed, bpb, acc) in enumerate([(1, 1.300, 0.300), (2, 1.304, 0.302), (3, 1.296, 0.298)]):
        config = variant(seed=seed, command=f"train_gpt.py --seed {seed}", start_time=f"2026-01-01T10:0{i}:00",
                         git_commit=f"commit{i}")
        make_run(root, f"20260101_10000{i}_Baseline", config, metrics_rows(40, bpb, acc),
                 finished_results(config, bpb, acc), BASE_CODE)
    better = variant(model_name="BetterIdea", model_dim=192, n_params=9_000_000)
    better_code = dict(BASE_CODE, **{"train_gpt.py": BASE_CODE["train_gpt.py"].replace("0.01", "0.02"),
                                     "gptlab/muon.py": "def step():\n    pass\n"})
    del better_code["gptlab/model.py"]
    make_run(root, "20260102_090000_BetterIdea", better, metrics_rows(40, 1.250, 0.330),
             finished_results(better, 1.250, 0.330, mfu=0.412), better_code)
    tweak = variant(model_name="TinyTweak", mlp_ratio=3)
    make_run(root, "20260102_100000_TinyTweak", tweak, metrics_rows(40, 1.255, 0.325),
             finished_results(tweak, 1.255, 0.325, ci=[0.316, 0.334]))
    other = variant(model_name="OtherTok", tokenizer="tokenizers/mytok_32768.pkl", tokenizer_name="mytok_32768",
                    tokenizer_ranks_sha256="bbb222",
                    vocab_size=32768)
    make_run(root, "20260103_080000_OtherTok", other, metrics_rows(40, 1.400, 0.290),
             finished_results(other, 1.400, 0.290))
    crashed = variant(model_name="Crashy", num_layers=6)
    make_run(root, "20260104_080000_Crashy", crashed, metrics_rows(40, 1.200, 0.310)[:30], age_s=7200,
             truncate_last=True)
    running = variant(model_name="StillGoing", num_layers=8)
    running_rows = metrics_rows(40, 1.500, 0.280)[:20]
    for row in running_rows:
        if row.get("train_loss") is not None:
            row["mfu"] = 0.35  # a GPU run's per-step MFU (no results.json yet)
    make_run(root, "20260105_080000_StillGoing", running, running_rows)
    failed = variant(model_name="Oom", model_dim=4096)
    make_run(root, "20260105_090000_Oom", failed, metrics_rows(40, 1.600, 0.27)[:12],
             {"status": "failed", "error": "CUDA out of memory", "model_name": "Oom"})
    make_run(root, "20260105_100000_Empty", variant(model_name="Empty"), age_s=7200)
    os.makedirs(os.path.join(root, "notes"))
    return root


def table_order(stdout):
    """Run folder names in the order of the printed leaderboard rows."""
    names = []
    for line in stdout.splitlines():
        if line.startswith("note:"):
            break
        match = re.search(r"\b\d{8}_\d{6}_\S+", line)
        if line[:1].isdigit() and match:
            names.append(match.group(0))
    return names


def run_compare(lab, *args):
    proc = run_script(["compare_experiments.py", "--experiments", lab, *args])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def row_of(stdout, name):
    return next(line for line in stdout.splitlines() if line[:1].isdigit() and name in line)


def cells_by_run(board):
    """{run folder name: {column header: cell}} of a built leaderboard."""
    return {r.name: dict(zip(board.headers, row)) for r, row in zip(board.runs, board.rows)}


def t_p(t, df):
    """Two-sided p of Student's t with a whole number df, in closed form (Abramowitz & Stegun 26.7.3-4), independent
    of scipy: with θ = atan(|t|/√df), P(|T| < |t|) = (2/π)(θ + sinθ (cosθ + (2/3)cos³θ + ... up to cos^(df-2)θ)) for
    odd df, sinθ (1 + (1/2)cos²θ + (1·3)/(2·4)cos⁴θ + ... up to cos^(df-2)θ) for even df."""
    assert df == int(df) and df >= 1
    theta = math.atan(abs(t) / math.sqrt(df))
    cos, series, term = math.cos(theta), 0.0, 1.0
    if df % 2:
        for k in range((int(df) - 1) // 2):  # powers 1, 3, ..., df - 2; coefficients 1, 2/3, 2·4/(3·5), ...
            series += term * cos ** (2 * k + 1)
            term *= (2 * k + 2) / (2 * k + 3)
        return 1.0 - 2.0 / math.pi * (theta + math.sin(theta) * series)
    for k in range(int(df) // 2):  # powers 0, 2, ..., df - 2; coefficients 1, 1/2, 1·3/(2·4), ...
        series += term * cos ** (2 * k)
        term *= (2 * k + 1) / (2 * k + 2)
    return 1.0 - math.sin(theta) * series


def shown_p(p):
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}"


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
    for text in ("9.00M", "81.92K", "1.2500", "0.3300 ± 0.0090", "NVIDIA H100 80GB HBM3 ×1", "1.50 GB", "20.0s",
                 "reference"):
        assert text in best, (text, best)
    assert "0.3250 ± 0.0090" in row_of(out, "TinyTweak")
    # significance: the tie is within 2 x seed noise (0.004) and CIs overlap; the baseline is clearly worse
    tweak = row_of(out, "TinyTweak")
    assert tweak.count("not distinguishable") == 2 and "+0.0050" in tweak
    baseline = row_of(out, "20260101_100000_Baseline")
    assert "+0.0500 worse" in baseline and "-0.0300 worse" in baseline
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


def test_baseline_uses_noise_of_runs_not_shown(lab):
    board = cmp.compare(["20260101_100000_Baseline", "BetterIdea", "TinyTweak"], experiments_dir=lab,
                        baseline="20260101_100000_Baseline", no_plot=True)["board"]
    cells = cells_by_run(board)
    # The other two seeds of Baseline are not in the table but still measure its noise (std 0.004, 2 dof).
    assert board.noise.std == pytest.approx(0.004) and "3 seeds of Baseline" in board.noise.source
    assert board.noise.df == 2
    # BetterIdea (one run, 1.250) against Baseline's seed group (mean 1.300, n=3): t = -0.05 / (0.004 sqrt(1 + 1/3))
    p = t_p(-0.05 / (0.004 * math.sqrt(1 + 1 / 3)), 2)
    better = cells["20260102_090000_BetterIdea"]
    assert better["bpb vs baseline"] == f"-0.0500 better, {shown_p(p)}" and 0.005 < p < 0.01
    # HellaSwag 0.330 vs 0.300 of 10042 each: Pearson's chi-square on the 2x2 table gives p ~ 5e-6
    assert better["HellaSwag vs baseline"] == "+0.0300 better, p < 0.0001"
    assert cells["20260101_100000_Baseline"]["bpb vs baseline"] == "reference"
    assert "HellaSwag vs baseline" in board.headers and len(board.groups) == 1


def test_noise_unknown_without_seed_group(tmp_path):
    for folder, name, bpb in [("20260101_000000_A", "A", 1.30), ("20260101_000001_B", "B", 1.301)]:
        config = variant(model_name=name)
        make_run(str(tmp_path), folder, config, metrics_rows(10, bpb, 0.3), finished_results(config, bpb, 0.3))
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False)["board"]
    assert board.noise is None and board.groups == []
    assert cells_by_run(board)["20260101_000001_B"]["bpb vs best"] == "+0.0010 (higher; noise unknown)"
    assert any("noise is unknown: repeat a run with another --seed" in n for n in board.notes)


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


def test_half_written_csv_keeps_complete_rows(lab):
    run = cmp.load_run(os.path.join(lab, "20260104_080000_Crashy"))
    assert run.metrics.truncated and run.status == "crashed"
    assert len(run.metrics.rows) == 29  # 30 written, the last one cut off mid-row
    assert run.val_bpb is not None and run.tokens == run.metrics.rows[-1]["tokens"]


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


def test_readers_tolerate_missing_keys_and_ci_forms(tmp_path):
    assert cmp.ci_interval(0.3, 0.01) == pytest.approx((0.29, 0.31))
    assert cmp.ci_interval(0.3, [0.31, 0.29]) == (0.29, 0.31)
    assert cmp.ci_interval(0.3, "n/a") is None and cmp.ci_interval(None, 0.01) is None
    # results.json with almost nothing in it, config without most keys: every missing figure shows as "—"
    make_run(str(tmp_path), "20260101_000000_Bare", {"seed": 0}, metrics_rows(10, 2.0, 0.26, eval_every=5),
             {"status": "finished", "hellaswag": None})
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True)["board"]
    row = dict(zip(board.headers, board.rows[0]))
    assert row["Model"] == "Bare" and row["Params"] == cmp.MISSING and row["GPU"] == cmp.MISSING
    assert row["Val bpb"] == "2.0000" and row["Status"] == "finished"
    assert row["HellaSwag acc_norm ±95% CI"] == "0.2600"  # from metrics.csv, no interval known


def test_damaged_files_are_reported_not_fatal(tmp_path):
    root = str(tmp_path)
    path = make_run(root, "20260101_000000_Damaged", None, metrics_rows(20, 1.5, 0.27), age_s=3600)
    with open(os.path.join(path, METRICS_FILE), "a") as f:  # a garbage row in the middle, then a good one
        f.write("not,a,number" + "," * (len(METRICS_COLUMNS) - 3) + "\n99,1,2.5" + "," * (len(METRICS_COLUMNS) - 3) + "\n")
    with open(os.path.join(path, RESULTS_FILE), "w") as f:
        f.write('{"status": "fini')  # results.json cut off: the run is judged from its metrics instead
    backdate(path, 3600)
    make_run(root, "20260101_000001_HeaderOnly", {"model_name": "HeaderOnly"}, [], age_s=3600)
    proc = run_script(["compare_experiments.py", "--experiments", root, "--no-write"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Damaged: no config.json" in out
    assert "Damaged: results.json is unreadable" in out
    assert "Damaged: metrics.csv: ignored 1 unreadable line(s)" in out
    assert "crashed" in row_of(out, "Damaged") and "no metrics" in row_of(out, "HeaderOnly")
    assert "No finished run with a val bpb yet" in out


def test_a_rerun_of_the_same_seed_does_not_shrink_the_noise(lab):
    # A reproduction of seed 1 (as a user's quickstart run reproduces a committed baseline) is not a new sample.
    config = variant(seed=1, command="train_gpt.py --seed 1", start_time="2026-01-06T10:00:00")
    make_run(lab, "20260106_100000_Baseline", config, metrics_rows(40, 1.300, 0.300),
             finished_results(config, 1.300, 0.300))
    board = cmp.compare([], experiments_dir=lab, no_plot=True, write=False)["board"]
    assert board.noise.std == pytest.approx(0.004) and "3 seeds of Baseline" in board.noise.source
    group = next(g for g in board.groups if len(g.runs) == 4)
    assert group.stats("val_bpb")[2] == 3


def test_reruns_of_one_seed_measure_no_noise(tmp_path):
    for i in range(2):
        config = variant(seed=7, start_time=f"2026-01-01T10:0{i}:00")
        make_run(str(tmp_path), f"20260101_10000{i}_Baseline", config, metrics_rows(10, 1.3, 0.3),
                 finished_results(config, 1.3, 0.3))
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False)["board"]
    assert board.noise is None


def _finished_run(root, folder, bpb, **changes):
    config = variant(**changes)
    make_run(root, folder, config, metrics_rows(10, bpb, 0.3), finished_results(config, bpb, 0.3))


def test_single_runs_are_judged_with_the_noise_pooled_over_seed_groups(tmp_path):
    """The reference has no seed group of its own, so the noise is pooled over the two groups there are:
    A (1.0, 1.2: variance 0.02, 1 degree of freedom) and B (2.0, 2.1, 2.2: variance 0.01, 2 degrees of freedom),
    by hand sqrt((1 * 0.02 + 2 * 0.01) / 3) = 0.115470 with 3 degrees of freedom. Two single runs differ by d:
    t = d / (0.115470 sqrt(2)); p < 0.05 needs t > 3.1824 (t(0.975, 3)), d > 0.5197: 0.5100 is not
    distinguishable, 0.5300 is."""
    root = str(tmp_path)
    for seed, bpb in [(1, 1.0), (2, 1.2)]:
        _finished_run(root, f"20260101_00000{seed}_A", bpb, model_name="A", num_layers=2, seed=seed)
    for seed, bpb in [(1, 2.0), (2, 2.1), (3, 2.2)]:
        _finished_run(root, f"20260102_00000{seed}_B", bpb, model_name="B", num_layers=3, seed=seed)
    _finished_run(root, "20260103_000000_Ref", 0.9, model_name="Ref", num_layers=5)
    _finished_run(root, "20260103_000001_Under", 0.9 + 0.5100, model_name="Under", num_layers=6)
    _finished_run(root, "20260103_000002_Over", 0.9 + 0.5300, model_name="Over", num_layers=7)
    _finished_run(root, "20260103_000003_Below", 0.9 - 0.5300, model_name="Below", num_layers=8)
    board = cmp.compare([], experiments_dir=root, baseline="20260103_000000_Ref", no_plot=True,
                        write=False)["board"]
    std = math.sqrt(0.04 / 3)
    assert board.noise.std == pytest.approx(std, rel=1e-9) and board.noise.df == 3
    assert board.noise.source == "std pooled over 2 seed group(s)"
    verdict = {name: cells["bpb vs baseline"] for name, cells in cells_by_run(board).items()}
    p_under, p_over = t_p(0.51 / (std * math.sqrt(2)), 3), t_p(0.53 / (std * math.sqrt(2)), 3)
    assert 0.05 < p_under < 0.06 and 0.04 < p_over < 0.05
    assert verdict["20260103_000001_Under"] == f"+0.5100 not distinguishable, {shown_p(p_under)}"
    assert verdict["20260103_000002_Over"] == f"+0.5300 worse, {shown_p(p_over)}"
    assert verdict["20260103_000003_Below"] == f"-0.5300 better, {shown_p(p_over)}"


def test_a_single_run_against_the_reference_s_seed_group(tmp_path):
    """Noise from the reference's own group (1.30, 1.31, 1.32: mean 1.31, std 0.01, 2 degrees of freedom). A single
    run x is compared with the group's mean: t = (x - 1.31) / (0.01 sqrt(1 + 1/3)); p < 0.05 needs |t| > 4.3027
    (t(0.975, 2)), a difference over 0.04968: 0.0490 is not distinguishable, 0.0505 is."""
    root = str(tmp_path)
    for seed, bpb in [(1, 1.30), (2, 1.31), (3, 1.32)]:
        _finished_run(root, f"20260101_00000{seed}_Base", bpb, model_name="Base", seed=seed)
    _finished_run(root, "20260102_000000_Near", 1.31 + 0.0490, model_name="Near", num_layers=6)
    _finished_run(root, "20260102_000001_Far", 1.31 + 0.0505, model_name="Far", num_layers=7)
    board = cmp.compare([], experiments_dir=root, baseline="20260101_000002_Base", no_plot=True,
                        write=False)["board"]
    assert board.noise.std == pytest.approx(0.01) and "3 seeds of Base" in board.noise.source
    verdict = {name: cells["bpb vs baseline"] for name, cells in cells_by_run(board).items()}
    scale = 0.01 * math.sqrt(1 + 1 / 3)
    p_near, p_far = t_p(0.0490 / scale, 2), t_p(0.0505 / scale, 2)
    assert p_near > 0.05 > p_far
    assert verdict["20260102_000000_Near"] == f"+0.0490 not distinguishable, {shown_p(p_near)}"
    assert verdict["20260102_000001_Far"] == f"+0.0505 worse, {shown_p(p_far)}"
    assert verdict["20260101_000001_Base"] == "-0.0100 same config (seed noise)"


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


def test_plot_draws_each_run_s_curves_in_the_right_panels(lab, monkeypatch):
    """What the PNG holds, read back from the figure: rows val bpb / train loss / HellaSwag acc_norm, columns
    tokens / training time; each run's points are its metrics.csv values (worked out here from the fixture's
    formulas: evals every 10 of 40 steps of 2048 tokens and 0.5 s, val bpb = final + 1.5 (1 - step/40)^2)."""
    from gptlab.compare import plots

    figures = []
    real_draw = plots._draw_curves
    monkeypatch.setattr(plots, "_draw_curves", lambda *a, **k: figures.append(real_draw(*a, **k)) or figures[-1])
    runs = [cmp.load_run(os.path.join(lab, name))
            for name in ("20260102_090000_BetterIdea", "20260102_100000_TinyTweak")]
    cmp.plot_runs(runs, [os.path.join(lab, "p.png")], size=(1000, 800))
    (fig,) = figures
    axes = [fig.axes[i:i + 2] for i in (0, 2, 4)]
    titles = [[ax.get_title() for ax in row] for row in axes]
    assert titles[0][0].startswith("validation bits per byte") and titles[1][0].startswith("train loss")
    assert titles[2][0].startswith("HellaSwag acc_norm")
    assert [ax.get_xlabel() for ax in axes[0]] == ["tokens seen", "training wall time (s, evals excluded)"]
    eval_steps = [0, 10, 20, 30, 40]
    for i, final in enumerate([1.250, 1.255]):
        bpb_line = axes[0][0].lines[i]
        assert list(bpb_line.get_xdata()) == [s * 2048 for s in eval_steps]
        assert list(bpb_line.get_ydata()) == pytest.approx([final + 1.5 * (1 - s / 40) ** 2 for s in eval_steps])
        assert list(axes[0][1].lines[i].get_xdata()) == pytest.approx([s * 0.5 for s in eval_steps])
        raw = axes[1][0].lines[2 * i]  # raw, then smoothed (40 points: no smoothing window)
        assert list(raw.get_xdata()) == [s * 2048 for s in range(1, 41)]
        assert list(raw.get_ydata()) == pytest.approx(
            [final * 2.3 + 4.0 * math.exp(-5 * s / 40) + 0.15 * math.sin(s * 2.7) for s in range(1, 41)])
        assert list(axes[1][0].lines[2 * i + 1].get_ydata()) == pytest.approx(list(raw.get_ydata()))
    acc_final = [0.330, 0.325]
    hs_lines = [ln for ln in axes[2][0].lines if len(ln.get_xdata()) == 5]
    for line, final in zip(hs_lines, acc_final):
        assert list(line.get_ydata()) == pytest.approx([final - 0.05 * (1 - s / 40) for s in eval_steps])
    diamonds = [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in axes[2][0].lines if ln.get_marker() == "D"]
    assert diamonds == [([81920], [pytest.approx(0.330)]), ([81920], [pytest.approx(0.325)])]
    chance = [ln for ln in axes[2][0].lines if list(ln.get_ydata()) == [0.25, 0.25]]
    assert len(chance) == 1 and chance[0].get_linestyle() == "--"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [r.name for r in runs]


def test_a_partial_hellaswag_is_marked_and_not_compared_with_the_full_set(tmp_path):
    """A run scored on the first 100 examples beside one scored on all 10042: its cell says so, and its "vs best"
    HellaSwag verdict is withheld (other examples, not a difference of models)."""
    full = dict(BASE_CONFIG, model_name="Full")
    make_run(tmp_path, "20260101_100000_Full", full, metrics_rows(40, 1.20, 0.30),
             {"status": "finished", "final_val_bpb": 1.20, "hellaswag": {"acc_norm": 0.30, "n": 10042}})
    make_run(tmp_path, "20260101_110000_Part", dict(BASE_CONFIG, model_name="Part"), metrics_rows(40, 1.25, 0.40),
             {"status": "finished", "final_val_bpb": 1.25, "hellaswag": {"acc_norm": 0.40, "n": 100}})
    runs = [cmp.load_run(p) for p in cmp.resolve_runs([str(tmp_path / "*")], str(tmp_path))]
    board = cmp.build_leaderboard(runs)
    cells = {row[board.headers.index("Model")]: row for row in board.rows}
    hs = board.headers.index("HellaSwag acc_norm ±95% CI")
    assert cells["Part"][hs].endswith("(first 100)") and "(first" not in cells["Full"][hs]
    versus = [h for h in board.headers if h.startswith("HellaSwag vs")][0]
    assert cells["Part"][board.headers.index(versus)] == "+0.1000 not compared (n = 100 vs 10042: other examples)"


def test_two_tokenizers_with_one_name_are_told_apart_by_hash(tmp_path):
    for i, sha in enumerate(("aaa11111ffff", "bbb22222ffff")):
        config = dict(BASE_CONFIG, model_name=f"T{i}", tokenizer_ranks_sha256=sha)
        make_run(tmp_path, f"2026010{i + 1}_100000_T{i}", config, metrics_rows(40, 1.2 + i / 10, 0.3),
                 {"status": "finished", "final_val_bpb": 1.2 + i / 10})
    runs = [cmp.load_run(p) for p in cmp.resolve_runs([str(tmp_path / "*")], str(tmp_path))]
    board = cmp.build_leaderboard(runs)
    assert any("2 different tokenizers (gpt2 (aaa11111), gpt2 (bbb22222))" in note for note in board.notes)
