"""Synthetic run folders laid out as train_gpt.py writes them, for the tests of compare_experiments.py and
gptlab.compare (tests/unit/test_compare.py, tests/e2e/test_compare_e2e.py, and the cost, scaling, significance,
sweep and text-table tests): one run's files, its metrics and results, a `lab` of runs (a fixture), and readers of
the leaderboard they give."""
import csv
import io
import json
import math
import os
import re
import time

import pytest

from gptlab.train.records import (CODE_DIR, CONFIG_FILE, EVALS_PREFIX, LOG_FILE, METRICS_COLUMNS, METRICS_FILE,
                                  RESULTS_FILE)

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
        evals = [k for k in dict.fromkeys(k for r in rows for k in r) if k.startswith(EVALS_PREFIX)]  # --evals'
        writer = csv.DictWriter(buf, fieldnames=METRICS_COLUMNS + evals, lineterminator="\n")
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


@pytest.fixture
def priced(tmp_path):
    """Three single-GPU H100 runs (results without gpu_hours, as before they were recorded): Base 1.300 in 20 s,
    Cheap 1.250 in 20 s, Slow 1.280 in 56 s; and one 8-GPU run."""
    root = str(tmp_path)
    for folder, name, bpb, wall, world in [("20260101_000000_Base", "Base", 1.300, 20.0, 1),
                                           ("20260101_000001_Cheap", "Cheap", 1.250, 20.0, 1),
                                           ("20260101_000002_Slow", "Slow", 1.280, 56.0, 1),
                                           ("20260101_000003_Wide", "Wide", 1.350, 36.0, 8)]:
        config = variant(model_name=name, world_size=world, num_layers=len(name))
        make_run(root, folder, config, metrics_rows(10, bpb, 0.3),
                 finished_results(config, bpb, 0.3, wall_time_s=wall, world_size=world))
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


def drawn_figure(monkeypatch, runs, size=(1000, 800)):
    """The matplotlib figure compare_experiments.py's plot_runs draws for `runs` (nothing written)."""
    from gptlab.compare import plots

    figures = []
    real_draw = plots._draw_curves
    monkeypatch.setattr(plots, "_draw_curves", lambda *a, **k: figures.append(real_draw(*a, **k)) or figures[-1])
    plots.plot_runs(runs, [], size=size)
    (fig,) = figures
    return fig


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
