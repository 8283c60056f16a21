"""Read experiment run folders and compare them: leaderboard, seed-group noise, significance, curves, diffs.

Runs are read defensively (the tolerant readers of gptlab.experiment, which owns the folder layout): the trainer
writes these folders incrementally (and may be killed at any point), so a missing key shows as "—", a half-written
metrics.csv is parsed up to its last complete row, and a folder without results.json is classified as running or
crashed from how recently it was written to.
"""
import contextlib
import datetime
import difflib
import glob
import io
import json
import math
import os
import re
import statistics
import time
from dataclasses import dataclass

from gptlab.errors import UserError
from gptlab.experiment import (CODE_DIR, CONFIG_FILE, EXPERIMENTS_DIR, LOG_FILE, METRICS_FILE, RESULT_STATUSES,
                               RESULTS_FILE, Metrics, is_run_folder, read_metrics, read_run_json)
from gptlab.fileio import atomic_write, atomic_write_text, check_writable

LEADERBOARD_FILE = "LEADERBOARD.md"
PLOT_FILE = "compare.png"
MISSING = "—"
# A folder without results.json whose files changed this recently is taken to be a run still in progress.
RUNNING_WINDOW_S = 600
# Two final val bpb values closer than this many seed-to-seed standard deviations are "not distinguishable".
NOISE_SIGMAS = 2.0
STATUS_ORDER = {"finished": 0, "running": 1, "interrupted": 2, "crashed": 3, "failed": 4, "no metrics": 5}
# Config keys that differ between repeats of the same experiment (or only describe where/when it ran): ignored
# when forming seed groups.
VOLATILE_CONFIG_KEYS = {"seed", "command", "argv", "cmdline", "start_time", "started_at", "start_time_utc",
                        "timestamp", "date", "run_name", "run_id", "run_dir", "out_dir", "output_dir",
                        "experiments_dir", "experiment_dir", "folder", "hostname", "host", "pid", "master_port",
                        "git_commit", "versions", "cpu_model", "resume", "resumed_from", "resume_step",
                        "tokenizer_path"}
MIN_PLOT_SIZE = (800, 600)
RUN_FOLDER_RE = re.compile(r"^(\d{8}_\d{6})_(.+)$")


# ----------------------------------------------------------------------------------------------------------------
# Reading one run folder

def _number(value):
    if isinstance(value, bool) or value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def ci_interval(acc, ci):
    """(lo, hi) from a CI given as a half-width number or as a [lo, hi] pair; None when not usable."""
    if acc is None or ci is None:
        return None
    if isinstance(ci, (list, tuple)):
        if len(ci) != 2 or _number(ci[0]) is None or _number(ci[1]) is None:
            return None
        lo, hi = sorted((float(ci[0]), float(ci[1])))
        return lo, hi
    half = _number(ci)
    return None if half is None else (acc - abs(half), acc + abs(half))


@dataclass
class Run:
    path: str
    config: dict
    results: dict
    metrics: Metrics
    status: str
    notes: list
    # Summary figures: from results.json when the run finished, else the last measured values in metrics.csv.
    model_name: str = None
    started: str = None
    n_params: float = None
    tokens: float = None
    tokenizer: str = None
    tokenizer_id: str = None
    val_loss: float = None
    val_bpb: float = None
    hs_acc_norm: float = None
    hs_ci: tuple = None
    hs_n: int = None
    wall_time_s: float = None
    gpu: str = None
    peak_mem_gb: float = None
    peak_mem_is_rss: bool = False
    mfu: float = None  # model FLOPs utilisation (GPU runs whose bf16 peak the trainer knew)
    seed: object = None
    error: str = None

    @property
    def name(self):
        return os.path.basename(os.path.normpath(self.path))

    @property
    def final(self):
        """True when the summary figures are the run's final ones (not the last measured so far)."""
        return self.status == "finished"


def _folder_date(name, config, path):
    match = RUN_FOLDER_RE.match(name)
    if match:
        try:
            return datetime.datetime.strptime(match.group(1), "%Y%m%d_%H%M%S").strftime("%Y-%m-%d %H:%M")
        except ValueError:
            pass
    for key in ("start_time", "started_at", "start_time_utc", "timestamp"):
        if isinstance(config.get(key), str) and config[key]:
            return config[key][:16].replace("T", " ")
    return datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%Y-%m-%d %H:%M")


def _newest_mtime(path):
    times = [os.path.getmtime(os.path.join(path, name)) for name in (METRICS_FILE, LOG_FILE, CONFIG_FILE)
             if os.path.exists(os.path.join(path, name))]
    return max(times) if times else os.path.getmtime(path)


def load_run(path, now=None, with_metrics=True):
    """Read one run folder (config.json, metrics.csv, results.json) into a Run with its summary figures.

    with_metrics=False skips metrics.csv (enough for finished runs' final figures, e.g. to measure noise)."""
    now = time.time() if now is None else now
    notes = []
    metrics_path = os.path.join(path, METRICS_FILE)
    config = read_run_json(path, CONFIG_FILE, notes) or {}
    if not os.path.exists(os.path.join(path, CONFIG_FILE)):
        notes.append("no config.json")
    if config.get("resumed_from"):  # its metrics.csv starts where the checkpoint's run stopped
        notes.append(f"resumed at step {config.get('resume_step')} from {config['resumed_from']}; steps before "
                     "that are in the earlier run's folder")
    results = read_run_json(path, RESULTS_FILE, notes)
    metrics = read_metrics(metrics_path, strict=False) if with_metrics and os.path.exists(metrics_path) else Metrics()
    notes.extend(metrics.notes)

    if results is not None and results.get("status") in RESULT_STATUSES:
        status = results["status"]
    elif results is not None:
        status = "finished"
        notes.append(f"results.json has no valid status ({results.get('status')!r}); taken as finished")
    elif not os.path.exists(metrics_path) or not metrics.rows:
        status = "running" if now - _newest_mtime(path) < RUNNING_WINDOW_S else "no metrics"
    else:
        status = "running" if now - _newest_mtime(path) < RUNNING_WINDOW_S else "crashed"
    if status == "crashed" and not metrics.truncated:
        notes.append(f"no results.json and nothing written for over {RUNNING_WINDOW_S // 60} min: "
                     "killed or crashed (see its training_log.txt)")

    res = results or {}
    run = Run(path=path, config=config, results=results, metrics=metrics, status=status, notes=notes)
    folder_match = RUN_FOLDER_RE.match(run.name)
    run.model_name = (res.get("model_name") or config.get("model_name")
                      or (folder_match.group(2) if folder_match else run.name))
    run.started = _folder_date(run.name, config, path)
    run.n_params = _number(res.get("n_params")) or _number(config.get("n_params"))
    tok = res.get("tokenizer") or config.get("tokenizer_name") or config.get("tokenizer")
    run.tokenizer = os.path.splitext(os.path.basename(str(tok)))[0] if tok else None
    # Same ranks = same tokenizer, whatever the file is called; the name is the fallback.
    run.tokenizer_id = (config.get("tokenizer_ranks_sha256") or config.get("tokenizer_sha256")
                        or run.tokenizer)
    run.seed = res.get("seed", config.get("seed"))
    run.error = res.get("error")

    def final_or_last(result_key, metric_col):
        value = _number(res.get(result_key))
        return value if value is not None else metrics.last(metric_col)

    run.tokens = final_or_last("tokens", "tokens")
    run.val_loss = final_or_last("final_val_loss", "val_loss")
    run.val_bpb = final_or_last("final_val_bpb", "val_bpb")
    run.wall_time_s = final_or_last("wall_time_s", "elapsed_s")
    # a finished run's MFU is results.json's, even when that is null (one step: only the warm-up was measured)
    run.mfu = _number(res["mfu"]) if "mfu" in res else metrics.last("mfu")
    hellaswag = res.get("hellaswag") if isinstance(res.get("hellaswag"), dict) else {}
    run.hs_acc_norm = _number(hellaswag.get("acc_norm"))
    run.hs_n = _number(hellaswag.get("n"))
    run.hs_ci = ci_interval(run.hs_acc_norm, hellaswag.get("acc_norm_ci95"))
    if run.hs_acc_norm is None:
        run.hs_acc_norm = metrics.last("hellaswag_acc_norm")
    if run.hs_ci is None and run.hs_acc_norm is not None and run.hs_n:
        # Normal-approximation 95% interval when the trainer reported n but no interval.
        half = 1.96 * math.sqrt(run.hs_acc_norm * (1 - run.hs_acc_norm) / run.hs_n)
        run.hs_ci = (run.hs_acc_norm - half, run.hs_acc_norm + half)
    run.peak_mem_gb = _number(res.get("peak_mem_allocated_gb"))
    run.peak_mem_is_rss = str(res.get("peak_mem_label", "")).lower().startswith("cpu")
    gpu_name = res.get("gpu_name") or config.get("gpu_name")
    # Devices the run used (world size), not how many the machine had (gpu_count).
    count = (_number(res.get("world_size")) or _number(config.get("world_size"))
             or _number(config.get("gpu_count")))
    device = str(config.get("device", ""))
    if gpu_name:
        run.gpu = f"{gpu_name} ×{int(count)}" if count else str(gpu_name)
    elif device.startswith("cpu") or device == "":
        run.gpu = (f"CPU ×{int(count)}" if count else "CPU") if (device or count) else None
    else:
        run.gpu = device
    return run


# ----------------------------------------------------------------------------------------------------------------
# Finding run folders

def list_run_folders(experiments_dir):
    """(run folders, notes about skipped sub-folders); a missing or empty folder is a UserError saying what to do."""
    how = ("start a run with `python train_gpt.py ...` (it writes experiments/{date}_{model_name}/), "
           "or point --experiments at the folder that holds your runs")
    if not os.path.isdir(experiments_dir):
        raise UserError(f"experiments folder {experiments_dir!r} does not exist: {how}")
    runs, notes = [], []
    for name in sorted(os.listdir(experiments_dir)):
        path = os.path.join(experiments_dir, name)
        if not os.path.isdir(path) or name.startswith("."):
            continue
        if is_run_folder(path):
            runs.append(path)
        else:
            notes.append(f"skipped {path}: not a run folder (no {CONFIG_FILE}, {METRICS_FILE} or {RESULTS_FILE})")
    if not runs:
        raise UserError(f"no runs in {experiments_dir!r}: {how}")
    return runs, notes


def resolve_run(spec, experiments_dir):
    """A run folder from a path, a folder name inside experiments_dir, or a unique part of a folder name."""
    candidates = [spec, os.path.join(experiments_dir, spec)]
    for path in candidates:
        if os.path.isdir(path):
            if not is_run_folder(path):
                raise UserError(f"{path} is not a run folder (it has no {CONFIG_FILE}, {METRICS_FILE} or "
                                f"{RESULTS_FILE}); pass a folder that train_gpt.py wrote")
            return os.path.normpath(path)
    names = sorted(n for n in os.listdir(experiments_dir)
                   if is_run_folder(os.path.join(experiments_dir, n))) if os.path.isdir(experiments_dir) else []
    matches = [n for n in names if spec in n]
    if len(matches) == 1:
        return os.path.join(experiments_dir, matches[0])
    if len(matches) > 1:
        raise UserError(f"run {spec!r} is ambiguous, it matches {len(matches)} runs: {', '.join(matches[:8])}; "
                        "pass the full folder name")
    listing = f"; runs in {experiments_dir}: {', '.join(names[:8])}" + (" ..." if len(names) > 8 else "") \
        if names else f"; {experiments_dir} holds no runs"
    raise UserError(f"no run folder {spec!r}: give a path or a folder name from {experiments_dir}{listing}")


def resolve_runs(specs, experiments_dir):
    """Expand run arguments (paths, names, globs the shell left unexpanded) into unique run folders, in order."""
    paths, seen = [], set()
    for spec in specs:
        if glob.has_magic(spec):
            found = sorted(p for p in glob.glob(spec) + glob.glob(os.path.join(experiments_dir, spec))
                           if is_run_folder(p))
            if not found:
                raise UserError(f"no run folder matches {spec!r}; list the runs with `python compare_experiments.py`")
        else:
            found = [resolve_run(spec, experiments_dir)]
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                paths.append(path)
    return paths


# ----------------------------------------------------------------------------------------------------------------
# Noise (seed groups) and significance

def seed_group_key(config):
    """Runs with equal keys share every setting except the seed (and timestamps / command line). A key that is
    unset (None, empty) counts as absent, so a run recorded before the trainer wrote that key still matches."""
    if not config:
        return None
    settings = {k: v for k, v in config.items() if k not in VOLATILE_CONFIG_KEYS and v not in (None, [], {}, "")}
    return json.dumps(settings, sort_keys=True, default=str)


@dataclass
class SeedGroup:
    runs: list

    @property
    def finished(self):
        return [r for r in self.runs if r.final and r.val_bpb is not None]

    def stats(self, attr):
        """(mean, std, n) over distinct seeds: a rerun of the same seed reproduces a run rather than sampling the
        noise again, so only the first finished run of each seed counts."""
        by_seed = {}
        for run in self.runs:
            if run.final and getattr(run, attr) is not None:
                by_seed.setdefault(str(run.seed), getattr(run, attr))
        values = list(by_seed.values())
        if len(values) < 2:
            return None
        return statistics.mean(values), statistics.stdev(values), len(values)


def seed_groups(runs):
    """Groups of >= 2 runs that differ only by seed, in the order their first run appears."""
    groups = {}
    for run in runs:
        key = seed_group_key(run.config)
        if key is not None:
            groups.setdefault(key, []).append(run)
    return [SeedGroup(members) for members in groups.values() if len(members) >= 2]


@dataclass
class Noise:
    std: float
    source: str


def bpb_noise(reference, groups):
    """Seed-to-seed std of final val bpb: the reference's own seed group, else pooled over all seed groups."""
    for group in groups:
        if reference in group.runs:
            stats = group.stats("val_bpb")
            if stats:
                return Noise(stats[1], f"std over the {stats[2]} seeds of {reference.model_name}")
    measured = [(g, g.stats("val_bpb")) for g in groups if g.stats("val_bpb")]
    if not measured:
        return None
    if len(measured) == 1:
        group, (_, std, n) = measured[0]
        return Noise(std, f"std over the {n} seeds of {group.runs[0].model_name}, the only seed group")
    variances = [(std ** 2, n) for _, (_, std, n) in measured]
    pooled = math.sqrt(sum(v * (n - 1) for v, n in variances) / sum(n - 1 for _, n in variances))
    return Noise(pooled, f"std pooled over {len(variances)} seed group(s)")


def _unjudged(run, reference, attr):
    """The cell for `attr` when run vs reference needs no significance test (same run, a value missing, the run
    not finished), else None."""
    if run is reference:
        return "reference"
    value, ref_value = getattr(run, attr), getattr(reference, attr)
    if value is None or ref_value is None:
        return MISSING
    if not run.final:
        return f"{value - ref_value:+.4f} (not final)"
    return None


def compare_bpb(run, reference, noise):
    cell = _unjudged(run, reference, "val_bpb")
    if cell is not None:
        return cell
    diff = run.val_bpb - reference.val_bpb
    if noise is None:
        verdict = "lower" if diff < 0 else "higher" if diff > 0 else "equal"
        return f"{diff:+.4f} ({verdict}; noise unknown)"
    if abs(diff) < NOISE_SIGMAS * noise.std:
        return f"{diff:+.4f} not distinguishable"
    return f"{diff:+.4f} {'better' if diff < 0 else 'worse'}"


def compare_hellaswag(run, reference):
    cell = _unjudged(run, reference, "hs_acc_norm")
    if cell is not None:
        return cell
    diff = run.hs_acc_norm - reference.hs_acc_norm
    if run.hs_ci is None or reference.hs_ci is None:
        return f"{diff:+.4f} (no CI)"
    overlap = run.hs_ci[0] <= reference.hs_ci[1] and reference.hs_ci[0] <= run.hs_ci[1]
    if overlap:
        return f"{diff:+.4f} not distinguishable"
    return f"{diff:+.4f} {'better' if diff > 0 else 'worse'}"


def pick_reference(runs, baseline=None):
    """The run everything is compared against: --baseline, else the finished run with the lowest val bpb."""
    if baseline is not None:
        return baseline
    finished = [r for r in runs if r.final and r.val_bpb is not None]
    return min(finished, key=lambda r: r.val_bpb) if finished else None


# ----------------------------------------------------------------------------------------------------------------
# The leaderboard table

def _human(value, suffixes=((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))):
    if value is None:
        return MISSING
    for scale, suffix in suffixes:
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.0f}"


def format_duration(seconds):
    if seconds is None:
        return MISSING
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def format_hellaswag(run):
    if run.hs_acc_norm is None:
        return MISSING
    text = f"{run.hs_acc_norm:.4f}"
    if run.hs_ci is not None:
        lo, hi = run.hs_ci
        if abs((hi - run.hs_acc_norm) - (run.hs_acc_norm - lo)) < 1e-4:
            text += f" ± {(hi - lo) / 2:.4f}"
        else:
            text += f" [{lo:.4f}, {hi:.4f}]"
    return text


def _mark(run, text):
    """Figures of a run that has not finished are the last measured ones: mark them."""
    return text if run.final or text == MISSING else f"{text}*"


def _num(value, digits):
    return MISSING if value is None else f"{value:.{digits}f}"


# id -> (header, cell text, sort key).  Sort keys are None when the value is missing (sorted last).
COLUMNS = {
    "model": ("Model", lambda r: r.model_name, lambda r: r.model_name.lower()),
    "date": ("Date", lambda r: r.started, lambda r: r.started),
    "params": ("Params", lambda r: _human(r.n_params), lambda r: r.n_params),
    "tokens": ("Tokens", lambda r: _mark(r, _human(r.tokens)), lambda r: r.tokens),
    "tokenizer": ("Tokenizer", lambda r: r.tokenizer or MISSING, lambda r: r.tokenizer),
    "val_loss": ("Val loss", lambda r: _mark(r, _num(r.val_loss, 4)), lambda r: r.val_loss),
    "val_bpb": ("Val bpb", lambda r: _mark(r, _num(r.val_bpb, 4)), lambda r: r.val_bpb),
    "hellaswag": ("HellaSwag acc_norm ±95% CI", lambda r: _mark(r, format_hellaswag(r)), lambda r: r.hs_acc_norm),
    "wall_time": ("Wall time", lambda r: _mark(r, format_duration(r.wall_time_s)), lambda r: r.wall_time_s),
    "gpu": ("GPU", lambda r: r.gpu or MISSING, lambda r: r.gpu),
    "mfu": ("MFU", lambda r: MISSING if r.mfu is None else _mark(r, f"{100 * r.mfu:.1f}%"), lambda r: r.mfu),
    "peak_mem": ("Peak mem", lambda r: MISSING if r.peak_mem_gb is None else
                 f"{r.peak_mem_gb:.2f} GB" + (" RSS" if r.peak_mem_is_rss else ""),
                 lambda r: r.peak_mem_gb),
    "status": ("Status", lambda r: r.status, lambda r: STATUS_ORDER.get(r.status, 9)),
    "run": ("Run", lambda r: r.name, lambda r: r.name),
}
SORT_ALIASES = {"bpb": "val_bpb", "loss": "val_loss", "acc_norm": "hellaswag", "hs": "hellaswag", "time": "wall_time",
                "wall": "wall_time", "memory": "peak_mem", "mem": "peak_mem", "name": "model", "folder": "run",
                "n_params": "params"}


def sort_column(name):
    """Normalise a --sort argument to a column id, or a UserError listing the valid ones."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = SORT_ALIASES.get(key, key)
    if key not in COLUMNS:
        raise UserError(f"unknown --sort column {name!r}; valid columns: {', '.join(COLUMNS)}")
    return key


def sort_runs(runs, column=None, descending=False):
    """Default: finished runs first by val bpb ascending, then unfinished ones; else by `column`, missing last."""
    if column is None:
        return sorted(runs, key=lambda r: (not r.final, r.val_bpb is None,
                                           r.val_bpb if r.val_bpb is not None else 0.0,
                                           STATUS_ORDER.get(r.status, 9), r.name))
    key_of = COLUMNS[column][2]
    present = [r for r in runs if key_of(r) is not None]
    missing = [r for r in runs if key_of(r) is None]
    present.sort(key=lambda r: (key_of(r), r.name), reverse=descending)
    return present + sorted(missing, key=lambda r: r.name)


@dataclass
class Leaderboard:
    runs: list          # sorted
    reference: Run
    noise: Noise
    groups: list
    headers: list
    rows: list          # list of cell-text lists (the Run column holds the folder name)
    notes: list


def build_leaderboard(runs, sort=None, descending=False, baseline=None, folder_notes=(), noise_pool=()):
    """The table for `runs`; seed groups (noise) come from `runs` plus `noise_pool` (the other runs on disk)."""
    shown = {os.path.realpath(r.path) for r in runs}
    pool = list(runs) + [r for r in noise_pool if os.path.realpath(r.path) not in shown]
    groups = [g for g in seed_groups(pool) if any(os.path.realpath(r.path) in shown for r in g.runs)]
    reference = pick_reference(runs, baseline)
    noise = bpb_noise(reference, groups) if reference else None
    ordered = sort_runs(runs, sort, descending)
    ref_label = "baseline" if baseline is not None else "best"
    headers = ["#"] + [COLUMNS[c][0] for c in COLUMNS] + [f"bpb vs {ref_label}", f"HellaSwag vs {ref_label}"]
    rows = []
    for rank, run in enumerate(ordered, start=1):
        cells = [str(rank)] + [str(COLUMNS[c][1](run)) for c in COLUMNS]
        if reference is None:
            cells += [MISSING, MISSING]
        else:
            cells += [compare_bpb(run, reference, noise), compare_hellaswag(run, reference)]
        rows.append(cells)

    notes = []
    if reference is not None:
        how = f"--baseline {reference.name}" if baseline is not None else \
            f"the finished run with the lowest val bpb, {reference.name}"
        notes.append(f"Runs are compared against {how}.")
        if noise is not None:
            notes.append(f"val bpb differences below {NOISE_SIGMAS:g} × {noise.std:.4f} ({noise.source}) are "
                         "\"not distinguishable\"; HellaSwag is \"not distinguishable\" when the 95% CIs overlap.")
        else:
            notes.append("No seed group yet, so the val bpb noise is unknown: repeat a run with another --seed to "
                         "measure it. HellaSwag is \"not distinguishable\" when the 95% CIs overlap.")
    else:
        notes.append("No finished run with a val bpb yet, so nothing to compare against.")
    tokenizers = sorted({r.tokenizer_id for r in runs if r.tokenizer_id})
    if len(tokenizers) > 1:
        names = sorted({r.tokenizer or MISSING for r in runs})
        notes.append(f"These runs use {len(tokenizers)} different tokenizers ({', '.join(names)}): val loss is per "
                     "token and NOT comparable across tokenizers; compare on val bpb (bits per byte of text), which is.")
    if any(not r.final for r in runs):
        notes.append("* last measured value: the run has not finished (running, interrupted, crashed or failed).")
    for run in ordered:
        for note in run.notes + ([f"error: {run.error}"] if run.error else []):
            notes.append(f"{run.name}: {note}")
    notes.extend(folder_notes)
    return Leaderboard(ordered, reference, noise, groups, headers, rows, notes)


def noise_rows(groups):
    rows = []
    for group in groups:
        first = group.runs[0]
        seeds = ", ".join(str(r.seed) for r in group.runs)
        bpb, acc = group.stats("val_bpb"), group.stats("hs_acc_norm")
        rows.append([first.model_name, str(len(group.runs)), seeds,
                     f"{bpb[0]:.4f} ± {bpb[1]:.4f} (n={bpb[2]})" if bpb else MISSING,
                     f"{acc[0]:.4f} ± {acc[1]:.4f} (n={acc[2]})" if acc else MISSING,
                     ", ".join(r.name for r in group.runs)])
    return rows


NOISE_HEADERS = ["Model", "Runs", "Seeds", "Val bpb mean ± std", "HellaSwag acc_norm mean ± std", "Run folders"]


def text_table(headers, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _md_escape(text):
    return text.replace("|", "\\|").replace("*", "\\*")


def markdown_table(headers, rows):
    lines = ["| " + " | ".join(map(_md_escape, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(_md_escape, row)) + " |" for row in rows]
    return "\n".join(lines)


def render_text(board):
    out = [text_table(board.headers, board.rows), ""]
    out += [f"note: {n}" for n in board.notes]
    out += ["", "Noise (runs that differ only by seed):"]
    groups = noise_rows(board.groups)
    out.append(text_table(NOISE_HEADERS, groups) if groups else
               "  no seed groups yet: rerun a config with a different --seed to measure run-to-run noise")
    return "\n".join(out) + "\n"


def render_markdown(board, markdown_dir, title):
    """LEADERBOARD.md: the same table, with each run linked relative to the markdown file's folder."""
    run_col = board.headers.index(COLUMNS["run"][0])
    rows = []
    for run, row in zip(board.runs, board.rows):
        link = os.path.relpath(run.path, markdown_dir).replace(os.sep, "/") + "/"
        target = f"<{link}>" if " " in link else link
        rows.append(row[:run_col] + [f"[{run.name}]({target})"] + row[run_col + 1:])
    out = [f"# {title}", "",
           f"Generated by `python compare_experiments.py` on "
           f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; do not edit by hand.", "",
           markdown_table(board.headers, rows), ""]
    out += [f"- {_md_escape(n)}" for n in board.notes]
    out += ["", "## Noise", "", "Runs that share a config except the seed; the std of their final val bpb is the "
            "run-to-run noise used above.", ""]
    groups = noise_rows(board.groups)
    out.append(markdown_table(NOISE_HEADERS, groups) if groups else
               "No seed groups yet: rerun a config with a different `--seed` to measure run-to-run noise.")
    return "\n".join(out) + "\n"


def write_leaderboard(board, path, title):
    atomic_write_text(path, render_markdown(board, os.path.dirname(os.path.abspath(path)), title), overwrite=True)


# ----------------------------------------------------------------------------------------------------------------
# Plots

def parse_size(text):
    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text or "")
    if not match:
        raise UserError(f"--size {text!r} is not WIDTHxHEIGHT in pixels; use e.g. --size 1600x1200")
    width, height = int(match.group(1)), int(match.group(2))
    if not (MIN_PLOT_SIZE[0] <= width <= 10000 and MIN_PLOT_SIZE[1] <= height <= 10000):
        raise UserError(f"--size {width}x{height} is out of range: six labelled panels need at least "
                        f"{MIN_PLOT_SIZE[0]}x{MIN_PLOT_SIZE[1]} (at most 10000 per side); use e.g. 1600x1200")
    return width, height


def _smooth(values):
    """Centred moving average (no lag, unlike an EMA) over ~1/40 of the points: shows the trend of a noisy loss."""
    half = max(0, len(values) // 80)
    if half == 0:
        return list(values)
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    out = []
    for i in range(len(values)):
        lo, hi = max(0, i - half), min(len(values), i + half + 1)
        out.append((prefix[hi] - prefix[lo]) / (hi - lo))
    return out


def _time_unit(max_seconds):
    if max_seconds >= 2 * 3600:
        return 3600.0, "h"
    if max_seconds >= 2 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _use_log(xs):
    """Log x when the points span more than ~2 decades (early steps would otherwise be squashed into one pixel)."""
    positive = [x for x in xs if x > 0]
    return len(positive) >= 2 and max(positive) / min(positive) > 100


def plot_runs(runs, paths, size=(1600, 1200)):
    """One PNG of val bpb / train loss / HellaSwag acc_norm (rows) against tokens and wall time (columns)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Fonts follow the figure size: small PNGs stay legible, large ones are not sparse.
    font_scale = max(0.6, min(1.6, min(size[0] / 1600, size[1] / 1200) ** 0.7))
    with plt.rc_context({"font.size": 10 * font_scale}):
        fig = _draw_curves(plt, runs, size, dpi=100)
        for path in paths:
            with atomic_write(path, "wb", overwrite=True) as f:
                fig.savefig(f, format="png", dpi=100)
        plt.close(fig)


def _draw_curves(plt, runs, size, dpi):
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter, NullFormatter

    fig, axes = plt.subplots(3, 2, figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi,
                             gridspec_kw={"height_ratios": [1.2, 1.2, 1.0]})
    colors = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors
    all_times = [t for r in runs for t in r.metrics.series("elapsed_s", "elapsed_s")[0]]
    time_scale, time_unit = _time_unit(max(all_times, default=0.0))
    many_tokenizers = len({r.tokenizer_id for r in runs if r.tokenizer_id}) > 1
    # metrics.csv's elapsed_s is the training wall time (evaluations excluded, as modded-nanogpt times runs)
    xaxes = [("tokens", "tokens seen"), ("elapsed_s", f"training wall time ({time_unit}, evals excluded)")]
    panels = [("val_bpb", "val bpb (bits/byte)", "validation bits per byte (lower is better)"),
              ("train_loss", "train loss (nats/token)",
               "train loss (faint: raw, solid: smoothed)"
               + ("\nper token: not comparable across tokenizers (val bpb is)" if many_tokenizers else "")),
              ("hellaswag_acc_norm", "HellaSwag acc_norm",
               "HellaSwag acc_norm (higher is better; ◆ = final ± 95% CI)")]
    plotted = [[False, False] for _ in panels]
    # Tokens on log x per panel when its points span decades (early training would be one pixel wide otherwise);
    # wall time stays linear, where the end of training (the comparison that matters) gets the most room.
    log_tokens = [_use_log([x for r in runs for x in r.metrics.series("tokens", ycol)[0]]) for ycol, _, _ in panels]

    handles = []
    for color_index, run in enumerate(runs):
        color = colors[color_index % len(colors)]
        label = run.name + ("" if run.final else f" ({run.status})")
        handles.append(Line2D([], [], color=color, linewidth=2, label=label))
        for col, (xcol, _) in enumerate(xaxes):
            scale = time_scale if xcol == "elapsed_s" else 1.0
            for row, (ycol, _, _) in enumerate(panels):
                ax = axes[row][col]
                log_x = log_tokens[row] and xcol == "tokens"
                # A point needs x and y in the same metrics row (the trainer logs tokens/time on every row).
                xs, ys = run.metrics.series(xcol, ycol)
                if log_x:  # step 0 (x = 0) has no place on a log axis
                    xs, ys = [x for x in xs if x > 0], [y for x, y in zip(xs, ys) if x > 0]
                xs = [x / scale for x in xs]
                if ycol == "train_loss":
                    if xs:
                        ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.7)
                        ax.plot(xs, _smooth(ys), color=color, linewidth=1.6)
                elif xs:
                    ax.plot(xs, ys, color=color, linewidth=1.6, marker="o" if len(xs) <= 40 else None,
                            markersize=3.5)
                if ycol == "hellaswag_acc_norm" and run.final and run.hs_acc_norm is not None and run.hs_ci:
                    if xcol == "tokens":
                        final_x = run.tokens
                    else:  # on the same clock as the curve: the last row where HellaSwag was measured
                        hs_times = run.metrics.series("elapsed_s", "hellaswag_acc_norm")[0]
                        final_x = hs_times[-1] / scale if hs_times else None
                    if final_x is not None and (final_x > 0 or not log_x):
                        lo, hi = run.hs_ci
                        ax.errorbar([final_x], [run.hs_acc_norm], color=color, marker="D", markersize=6, capsize=4,
                                    yerr=[[run.hs_acc_norm - lo], [hi - run.hs_acc_norm]], linewidth=1.5)
                        xs = xs + [final_x]
                plotted[row][col] = plotted[row][col] or bool(xs)

    for col, (xcol, xlabel) in enumerate(xaxes):
        for row, (ycol, ylabel, title) in enumerate(panels):
            ax = axes[row][col]
            log_x = log_tokens[row] and xcol == "tokens"
            if log_x:
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())
            if xcol == "tokens":
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.set_xlabel(xlabel + (" (log scale)" if log_x else ""))
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize="medium")
            ax.grid(True, which="major", alpha=0.3)
            if ycol == "hellaswag_acc_norm":
                ax.axhline(0.25, color="gray", linestyle="--", linewidth=1, label="chance (0.25)")
                ax.legend(loc="lower right", fontsize="small")
            if not plotted[row][col]:
                ax.text(0.5, 0.5, "not measured yet", transform=ax.transAxes, ha="center", va="center",
                        color="gray")

    # One legend for all panels, below them, with as many entries per line as the width allows.
    font_px = plt.rcParams["font.size"] * dpi / 72
    entry_px = max(len(h.get_label()) for h in handles) * 0.62 * font_px + 4 * font_px
    ncol = max(1, min(len(handles), int(0.95 * size[0] // entry_px)))
    legend_rows = math.ceil(len(handles) / ncol)
    bottom = min(0.4, (1.45 * font_px * legend_rows + font_px) / size[1])
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Diff of two runs

def _fmt_value(value):
    return json.dumps(value, sort_keys=True, default=str)


def _code_files(run_path):
    root = os.path.join(run_path, CODE_DIR)
    files = {}
    if os.path.isdir(root):
        for dirpath, _, names in os.walk(root):
            for name in names:
                full = os.path.join(dirpath, name)
                files[os.path.relpath(full, root).replace(os.sep, "/")] = full
    return files


def _read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def diff_runs(path_a, path_b):
    """Text of what changed from run A to run B: config keys (both values) and code backups (unified diffs)."""
    notes_a, notes_b = [], []
    name_a, name_b = os.path.basename(os.path.normpath(path_a)), os.path.basename(os.path.normpath(path_b))
    config_a, config_b = read_run_json(path_a, CONFIG_FILE, notes_a), read_run_json(path_b, CONFIG_FILE, notes_b)
    out = [f"A = {path_a}", f"B = {path_b}", "", f"== config ({CONFIG_FILE}) =="]
    out += [f"  note: A: {n}" for n in notes_a] + [f"  note: B: {n}" for n in notes_b]
    if config_a is None or config_b is None:
        missing = " and ".join(n for n, c in ((name_a, config_a), (name_b, config_b)) if c is None)
        out.append(f"  cannot compare configs: no readable {CONFIG_FILE} in {missing}")
    else:
        changed = [k for k in sorted(set(config_a) & set(config_b)) if config_a[k] != config_b[k]]
        # What the experimenter changed first; what always differs between repeats (seed, time, command) last.
        changed.sort(key=lambda k: k in VOLATILE_CONFIG_KEYS)
        only_a = sorted(set(config_a) - set(config_b))
        only_b = sorted(set(config_b) - set(config_a))
        if not (changed or only_a or only_b):
            out.append("  identical")
        for key in changed:
            tag = "  (varies between repeats)" if key in VOLATILE_CONFIG_KEYS else ""
            out.append(f"  ~ {key}: {_fmt_value(config_a[key])} -> {_fmt_value(config_b[key])}{tag}")
        out += [f"  - {k}: {_fmt_value(config_a[k])}  (only in A)" for k in only_a]
        out += [f"  + {k}: {_fmt_value(config_b[k])}  (only in B)" for k in only_b]

    out += ["", f"== code ({CODE_DIR}/) =="]
    files_a, files_b = _code_files(path_a), _code_files(path_b)
    if not files_a or not files_b:
        missing = " and ".join(n for n, f in ((name_a, files_a), (name_b, files_b)) if not f)
        out.append(f"  cannot compare code: no {CODE_DIR}/ backup in {missing}")
        return "\n".join(out) + "\n"
    removed = sorted(set(files_a) - set(files_b))
    added = sorted(set(files_b) - set(files_a))
    patches, changed_files = [], []
    for rel in sorted(set(files_a) & set(files_b)):
        lines_a, lines_b = _read_lines(files_a[rel]), _read_lines(files_b[rel])
        if lines_a == lines_b:
            continue
        changed_files.append(rel)
        if lines_a is None or lines_b is None:
            patches.append(f"Binary file {rel} differs\n")
            continue
        patch = difflib.unified_diff(lines_a, lines_b, fromfile=f"A/{CODE_DIR}/{rel}", tofile=f"B/{CODE_DIR}/{rel}")
        patches.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                               for line in patch))
    if not (removed or added or changed_files):
        out.append(f"  identical ({len(files_a)} files)")
    out += [f"  changed: {rel}" for rel in changed_files]
    out += [f"  added in B: {rel}" for rel in added]
    out += [f"  removed in B: {rel}" for rel in removed]
    text = "\n".join(out) + "\n"
    if patches:
        text += "\n" + "".join(patches)
    return text


# ----------------------------------------------------------------------------------------------------------------
# Entry point used by compare_experiments.py

@contextlib.contextmanager
def _writing(what, fix):
    """Turn a failed write (read-only folder, full disk) into one clear error instead of a traceback."""
    try:
        yield
    except OSError as err:
        raise UserError(f"cannot write {what}: {err.strerror or err}; pass {fix}") from None


def compare(run_specs=(), experiments_dir=EXPERIMENTS_DIR, sort=None, descending=False, baseline=None, plot=None,
            no_plot=False, size="1600x1200", write=None, overwrite=False, diff=None, now=None, out=None):
    """Print the leaderboard (and noise), write LEADERBOARD.md and plots; or print a diff. Returns a summary dict."""
    out = out or io.StringIO()
    if diff:
        path_a, path_b = (resolve_run(spec, experiments_dir) for spec in diff)
        out.write(diff_runs(path_a, path_b))
        return {"diff": (path_a, path_b)}

    sort_id = sort_column(sort) if sort else ("val_bpb" if descending else None)
    plot_size = parse_size(size)
    if plot:
        if not plot.lower().endswith(".png"):
            raise UserError(f"--plot {plot}: the plot is a PNG image; give a path ending in .png")
        check_writable(plot, overwrite)  # before any work
    if run_specs:
        paths, folder_notes = resolve_runs(run_specs, experiments_dir), []
    else:
        paths, folder_notes = list_run_folders(experiments_dir)
    runs = [load_run(p, now=now) for p in paths]
    baseline_run = None
    if baseline:
        baseline_path = os.path.realpath(resolve_run(baseline, experiments_dir))
        baseline_run = next((r for r in runs if os.path.realpath(r.path) == baseline_path), None)
        if baseline_run is None:  # compared against, so it joins the table
            baseline_run = load_run(baseline_path, now=now)
            runs.append(baseline_run)

    noise_pool = []
    if run_specs and os.path.isdir(experiments_dir):
        # Named runs are compared with the noise measured by every run on disk, shown or not.
        noise_pool = [load_run(p, now=now, with_metrics=False) for p in
                      (os.path.join(experiments_dir, n) for n in sorted(os.listdir(experiments_dir)))
                      if is_run_folder(p) and os.path.exists(os.path.join(p, RESULTS_FILE))]
    board = build_leaderboard(runs, sort_id, descending, baseline_run, folder_notes, noise_pool)
    out.write(render_text(board))
    written = []
    if write is None:
        write = not run_specs
    if write:
        # Beside the runs: their common parent folder, else the experiments folder.
        parents = {os.path.dirname(os.path.abspath(r.path)) for r in runs}
        target_dir = parents.pop() if len(parents) == 1 else experiments_dir
        leaderboard_path = os.path.join(target_dir, LEADERBOARD_FILE)
        title = "Leaderboard" if not run_specs else f"Leaderboard ({len(runs)} selected runs)"
        with _writing(leaderboard_path, "--no-write"):
            write_leaderboard(board, leaderboard_path, title)
        written.append(leaderboard_path)
    if not no_plot and (plot or run_specs):
        plot_paths = [plot] if plot else [os.path.join(r.path, PLOT_FILE) for r in runs]
        with _writing(", ".join(plot_paths), "--plot PATH somewhere writable, or --no-plot"):
            plot_runs(board.runs, plot_paths, plot_size)
        written.extend(plot_paths)
    elif not no_plot:
        out.write("\n(curves: pass --plot PATH, or name the runs to compare to get compare.png in each run folder)\n")
    if written:
        out.write("\nwrote " + ", ".join(written) + "\n")
    return {"board": board, "written": written}
