"""The run folder's files (one owner for its layout and formats): experiments/{YYYYmmdd_HHMMSS}_{model_name}/

    config.json        every flag and derived setting, command line, versions, hardware (written at start)
    metrics.csv        one row per train step and per eval (METRICS_COLUMNS; empty cell = not measured)
    training_log.txt   human-readable log
    results.json       written at the end: status "finished" ("failed" with an error, "interrupted"), final figures
    code/              train_gpt.py and model.py whole, the rest as git commit + uncommitted.patch (a full copy
                       outside git), tokenizer_train_script.py; code/.gitignore keeps the copies the commit holds
                       out of a committed run folder (gptlab/train/code_backup.py)
    checkpoints/       --save_model checkpoints (git-ignored)
    heartbeat.json     the training process (host, pid, its start time) and its last reported step, so a reader
                       on the same host knows at once whether a run without results.json is alive

A folder with no results.json is a run still in progress, or one that was killed.
"""
import csv
import datetime
import json
import math
import os
import re
import socket
from dataclasses import dataclass, field

from gptlab.checkpoint import CHECKPOINT_DIR  # (the checkpoint stage's name; callers read it here with the rest)
from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write_text, read_json_file

EXPERIMENTS_DIR = "experiments"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.csv"
LOG_FILE = "training_log.txt"
RESULTS_FILE = "results.json"
CODE_DIR = "code"
HEARTBEAT_FILE = "heartbeat.json"
METRICS_COLUMNS = ["step", "tokens", "train_loss", "val_loss", "val_bpb", "lr", "step_time_s", "elapsed_s",
                   "tokens_per_s", "hellaswag_acc", "hellaswag_acc_norm", "tflops_per_gpu", "mfu"]
# train_gpt.py --evals adds its suite's columns after these (gptlab.evals.in_run.metrics_columns: evals_core,
# evals_gold_bpb, evals_<task>_acc, ...); readers keep every column with this prefix
EVALS_PREFIX = "evals_"


def create_run_dir(experiments_dir, model_name, now=None):
    """Make a new, empty experiments/{YYYYmmdd_HHMMSS}_{model_name}/ (with _2, _3... if the name is taken)."""
    if not model_name or any(c in model_name for c in "/\\") or model_name.startswith("."):
        raise UserError(f"--model_name {model_name!r} must be a plain folder name (no slashes, not hidden)")
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d_%H%M%S")
    try:
        os.makedirs(experiments_dir, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create --experiments_dir {experiments_dir}: {err}") from None
    base = os.path.join(experiments_dir, f"{stamp}_{model_name}")
    for suffix in [""] + [f"_{i}" for i in range(2, 1000)]:
        try:
            os.makedirs(base + suffix)  # exist_ok=False: two runs never share a folder
            return base + suffix
        except FileExistsError:
            continue
    raise UserError(f"could not find a free run folder name for {base}")


class MetricsWriter:
    """metrics.csv: METRICS_COLUMNS (then extra_columns, the --evals suite's), one row per call, flushed at once;
    missing values are empty cells."""

    def __init__(self, path, extra_columns=()):
        if any(not c.startswith(EVALS_PREFIX) or c in METRICS_COLUMNS for c in extra_columns):
            raise ValueError(f"extra metrics columns must start with {EVALS_PREFIX!r}: {list(extra_columns)}")
        self.columns = METRICS_COLUMNS + list(extra_columns)
        self.file = open(path, "x", newline="")  # "x": never overwrite another run's metrics
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns, extrasaction="raise")
        self.writer.writeheader()
        self.file.flush()

    def write(self, **values):
        row = {k: ("" if values.get(k) is None else _fmt(values[k])) for k in self.columns}
        unknown = set(values) - set(self.columns)
        if unknown:
            raise ValueError(f"unknown metrics columns {sorted(unknown)}")
        self.writer.writerow(row)
        self.file.flush()

    def close(self):
        self.file.close()


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.8g}"
    return value


# Cells that read as "not measured" when browsing runs (strict reading keeps NaN as a float and refuses the rest).
_MISSING_CELLS = ("nan", "none", "null")
_INT_COLUMNS = ("step", "tokens")


@dataclass
class Metrics:
    """metrics.csv parsed: `rows` of {column: int (step, tokens) / float / None = not measured}.

    Iterating, len() and indexing go to `rows`. `notes` says what could not be read and `truncated` is True when
    the last line was cut off mid-write (both only when read with strict=False)."""
    columns: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    truncated: bool = False

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]

    def series(self, x_col, y_col):
        """(xs, ys) over the rows where both cells were measured."""
        xs, ys = [], []
        for row in self.rows:
            x, y = row.get(x_col), row.get(y_col)
            if x is not None and y is not None:
                xs.append(x)
                ys.append(y)
        return xs, ys

    def last(self, col):
        """The last measured value of `col`, or None."""
        for row in reversed(self.rows):
            if row.get(col) is not None:
                return row[col]
        return None


def _metrics_cell(column, text, strict):
    text = text.strip()
    if text == "" or (not strict and text.lower() in _MISSING_CELLS):
        return None
    value = float(text)  # ValueError for garbage
    if not strict and not math.isfinite(value):
        return None  # a diverged value cannot be plotted or ranked: shown as not measured
    return int(value) if column in _INT_COLUMNS else value


def read_metrics(path, strict=True):
    """metrics.csv → Metrics (iterable like a list of row dicts; None for empty cells).

    strict=True (the trainer's own files): any unreadable line is a ValueError naming the file and line.
    strict=False (browsing runs that may have been killed mid-write): every complete row is kept, a half-written
    last line and unreadable lines are skipped and described in `notes`, columns not in METRICS_COLUMNS (nor
    --evals' evals_*) are ignored, and NaN / inf / "none" cells read as None."""
    metrics = Metrics()
    name = os.path.basename(path)

    def damaged(note):  # `note` names the file by its base name; a strict error names the full path
        if strict:
            raise ValueError(note.replace(name, path, 1))
        metrics.notes.append(note)

    with open(path, "r", encoding="utf-8", errors="strict" if strict else "replace", newline="") as f:
        text = f.read()
    if not text.strip():
        damaged(f"{name} is empty")
        return metrics
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    elif len(lines) > 1:
        # No newline after the last line: the writer was cut off mid-row.
        lines.pop()
        metrics.truncated = True
        damaged(f"{name}: last line is half-written (run cut off mid-write); ignored it")
    reader = csv.reader(lines)
    header = [column.strip() for column in next(reader)]
    if not set(header) & set(METRICS_COLUMNS):
        damaged(f"{name} has no known column in its header ({', '.join(header[:5])}...)")
        return metrics
    metrics.columns = header
    bad_lines = []
    for line_no, cells in enumerate(reader, start=2):
        if not cells:
            continue
        try:
            if len(cells) != len(header):
                raise ValueError(f"{len(cells)} cells for {len(header)} columns")
            metrics.rows.append({column: _metrics_cell(column, cell, strict) for column, cell in zip(header, cells)
                                 if column in METRICS_COLUMNS or column.startswith(EVALS_PREFIX)})
        except (ValueError, OverflowError) as err:
            if strict:
                raise ValueError(f"{path}: line {line_no} is unreadable ({err})") from None
            bad_lines.append(line_no)
    if bad_lines:
        if bad_lines == [len(lines)]:
            metrics.truncated = True
            damaged(f"{name}: last line ({bad_lines[0]}) is incomplete; ignored it")
        else:
            shown = ", ".join(map(str, bad_lines[:5])) + (" ..." if len(bad_lines) > 5 else "")
            damaged(f"{name}: ignored {len(bad_lines)} unreadable line(s): {shown}")
    return metrics


# train_gpt.py writes JSON files of a few KB, nested 3 deep: these bounds are far above that
MAX_JSON_BYTES = 16 << 20
MAX_JSON_DEPTH = 32


def _depth(value):
    """How deep JSON containers nest in `value` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_run_json(run_dir, filename, notes, max_bytes=MAX_JSON_BYTES, max_depth=MAX_JSON_DEPTH):
    """run_dir/filename (config.json, results.json, heartbeat.json...) as a dict, read within bounds (a crafted or
    damaged folder must not exhaust memory or the stack); None when it is missing, or (with a line in `notes`) when
    it is not a regular file, is too large, too deeply nested, unreadable (a run killed mid-write) or not a JSON
    object."""
    path = os.path.join(run_dir, filename)
    if not os.path.lexists(path):
        return None
    data, problem = read_json_file(path, max_bytes)
    if problem is None and not isinstance(data, dict):
        problem = "is not a JSON object"
    elif problem is None and _depth(data) > max_depth:
        problem = f"nests deeper than {max_depth} levels"
    if problem:
        notes.append(f"{filename} {problem}; ignored it")
        return None
    return data


def is_run_folder(path):
    """A folder train_gpt.py wrote: it holds at least one of config.json, metrics.csv, results.json."""
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                       for name in (CONFIG_FILE, METRICS_FILE, RESULTS_FILE))


_STEP = re.compile(r"step_(\d+)(\.pt)?\Z")


def latest_checkpoint(path):
    """A checkpoint path from CHECKPOINT_OR_RUN: a run folder means the highest step in its checkpoints/ (a .pt
    file, or a --shard_params folder); anything else is taken as a checkpoint. A run folder without one is a
    UserError."""
    folder = os.path.join(path, CHECKPOINT_DIR)
    if not os.path.isdir(folder):
        if is_run_folder(path):  # a run trained without --save_model: say so, not "not a sharded checkpoint"
            raise UserError(f"run folder {path} has no checkpoint ({folder} does not exist); train with --save_model, "
                            "or pass a checkpoint file")
        return path
    steps = [(int(m.group(1)), n) for n in os.listdir(folder) if (m := _STEP.match(n))]
    if not steps:
        raise UserError(f"run folder {path} has no checkpoint in {folder}; train with --save_model, or pass a "
                        "checkpoint file")
    return os.path.join(folder, max(steps)[1])


class RunLog:
    """training_log.txt: append lines and flush each one, so a killed run keeps its log."""

    def __init__(self, path, echo=False):
        self.file = open(path, "x")
        self.echo = echo

    def __call__(self, text=""):
        self.file.write(text + "\n")
        self.file.flush()
        if self.echo:
            print(text, flush=True)

    def close(self):
        self.file.close()


def write_json(path, data, overwrite=False):
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", overwrite=overwrite)


def write_config(run_dir, config):
    write_json(os.path.join(run_dir, CONFIG_FILE), config)


RESULT_STATUSES = ("finished", "failed", "interrupted")


def write_results(run_dir, results):
    """results.json; status "finished", "failed" (with "error") or "interrupted" (Ctrl-C, with the last
    checkpoint). Written once, at the end of a run."""
    if results.get("status") not in RESULT_STATUSES:
        raise ValueError(f"results status must be one of {RESULT_STATUSES}")
    write_json(os.path.join(run_dir, RESULTS_FILE), results)


def _process_start(pid):
    """A process's start time in clock ticks since boot (/proc/PID/stat field 22), or None where unknown: with the
    pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def write_heartbeat(run_dir, step):
    """heartbeat.json: this process and its last reported step (rewritten at every report)."""
    write_json(os.path.join(run_dir, HEARTBEAT_FILE),
               {"host": socket.gethostname(), "pid": os.getpid(), "process_start": _process_start(os.getpid()),
                "step": step, "time": datetime.datetime.now().isoformat(timespec="seconds")}, overwrite=True)


def heartbeat_process(run_dir):
    """("alive" | "gone", heartbeat dict) for a run whose training process ran on this host; (None, dict or None)
    when that cannot be told (no heartbeat, or another host)."""
    beat = read_run_json(run_dir, HEARTBEAT_FILE, [])
    if not beat or beat.get("host") != socket.gethostname() or not isinstance(beat.get("pid"), int):
        return None, beat
    try:
        os.kill(beat["pid"], 0)
    except ProcessLookupError:
        return "gone", beat
    except PermissionError:  # another user's process: it exists
        pass
    recorded = beat.get("process_start")
    if recorded is not None and _process_start(beat["pid"]) not in (None, recorded):
        return "gone", beat  # the pid now belongs to another process
    return "alive", beat
