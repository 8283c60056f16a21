"""The run folder (one owner for its layout): experiments/{YYYYmmdd_HHMMSS}_{model_name}/

    config.json        every flag and derived setting, command line, versions, hardware (written at start)
    metrics.csv        one row per train step and per eval (METRICS_COLUMNS; empty cell = not measured)
    training_log.txt   human-readable log
    results.json       written at the end: status "finished" ("failed" with an error, "interrupted"), final figures
    code/              train_gpt.py and model.py whole, the rest as git commit + uncommitted.patch (a full copy
                       outside git), tokenizer_train_script.py (gptlab/train/code_backup.py)
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
import platform
import random
import subprocess
import sys
from dataclasses import dataclass, field

from gptlab.errors import UserError
from gptlab.fileio import atomic_write, atomic_write_text

EXPERIMENTS_DIR = "experiments"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.csv"
LOG_FILE = "training_log.txt"
RESULTS_FILE = "results.json"
CODE_DIR = "code"
HEARTBEAT_FILE = "heartbeat.json"
CHECKPOINT_DIR = "checkpoints"
METRICS_COLUMNS = ["step", "tokens", "train_loss", "val_loss", "val_bpb", "lr", "step_time_s", "elapsed_s",
                   "tokens_per_s", "hellaswag_acc", "hellaswag_acc_norm", "tflops_per_gpu", "mfu"]

CHECKPOINT_FORMAT = "gptlab-checkpoint"
CHECKPOINT_VERSION = 3  # 2: carries "sha256", a digest of everything else in it, verified on load; 3: carries
#                          "model_source", the model.py that made it (gptlab.train.model_source builds from it)
CONVERT_HINT = "python -m gptlab.train.convert_checkpoint"


# ------------------------------------------------------------------------------------------------ run folder
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
    """metrics.csv: METRICS_COLUMNS, one row per call, flushed at once; missing values are empty cells."""

    def __init__(self, path):
        self.file = open(path, "x", newline="")  # "x": never overwrite another run's metrics
        self.writer = csv.DictWriter(self.file, fieldnames=METRICS_COLUMNS, extrasaction="raise")
        self.writer.writeheader()
        self.file.flush()

    def write(self, **values):
        row = {k: ("" if values.get(k) is None else _fmt(values[k])) for k in METRICS_COLUMNS}
        unknown = set(values) - set(METRICS_COLUMNS)
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
    last line and unreadable lines are skipped and described in `notes`, columns not in METRICS_COLUMNS are
    ignored, and NaN / inf / "none" cells read as None."""
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
                                 if column in METRICS_COLUMNS})
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


def read_run_json(run_dir, filename, notes):
    """run_dir/filename (config.json or results.json) as a dict; None when it is missing, or when it is unreadable
    or not a JSON object (a run killed mid-write), in which case a line is added to `notes`."""
    path = os.path.join(run_dir, filename)
    if not os.path.exists(path):
        return None
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        notes.append(f"{filename} is unreadable ({type(err).__name__}: {err}); ignored it")
        return None
    if not isinstance(data, dict):
        notes.append(f"{filename} is not a JSON object; ignored it")
        return None
    return data


def is_run_folder(path):
    """A folder train_gpt.py wrote: it holds at least one of config.json, metrics.csv, results.json."""
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                       for name in (CONFIG_FILE, METRICS_FILE, RESULTS_FILE))


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


# ------------------------------------------------------------------------------------------------ heartbeat
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
    import socket

    write_json(os.path.join(run_dir, HEARTBEAT_FILE),
               {"host": socket.gethostname(), "pid": os.getpid(), "process_start": _process_start(os.getpid()),
                "step": step, "time": datetime.datetime.now().isoformat(timespec="seconds")}, overwrite=True)


def heartbeat_process(run_dir):
    """("alive" | "gone", heartbeat dict) for a run whose training process ran on this host; (None, dict or None)
    when that cannot be told (no heartbeat, or another host)."""
    import socket

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


# ------------------------------------------------------------------------------------------------ environment
def git_commit(repo_root):
    """HEAD's commit (with '-dirty' when the tree has changes), or None outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        # --no-optional-locks: read only, never refresh the index of the checkout being recorded
        # experiments/ is left out: its reports (LEADERBOARD.md, plots) are regenerated, not code
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)experiments"],
                               cwd=repo_root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) if commit else None


def versions():
    import numpy
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
           "cuda": torch.version.cuda, "platform": platform.platform()}
    try:
        import tiktoken
        out["tiktoken"] = tiktoken.__version__
    except Exception:  # optional for the record only
        out["tiktoken"] = None
    return out


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# dense bf16 tensor-core peaks (TFLOP/s, no sparsity; NVIDIA datasheets) by name as torch.cuda.get_device_name()
# prints it: the denominator of MFU in train_gpt.py's log and bench/bench_train.py. A key matches whole words
# only ("L4" must not match "NVIDIA L40"); where one name holds two keys (H100 PCIe, H100), the earlier wins.
GPU_BF16_PEAK_TFLOPS = [("H200 NVL", 835.5), ("H200", 989.0), ("GH200", 989.0), ("H100 SXM", 989.4),
                        ("H100 80GB HBM3", 989.4), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4),
                        ("B200", 2250.0), ("A100", 312.0), ("L40S", 362.05), ("L40", 181.05), ("L4", 121.0),
                        ("RTX 4090", 165.2), ("A10G", 70.0), ("RTX 3090", 71.0), ("V100", 125.0)]


def lookup_gpu(table, gpu_name):
    """The value of the first (key, value) of `table` whose key is a whole word of `gpu_name` (case-insensitive;
    "L4" does not match "NVIDIA L40"), or None."""
    import re

    name = (gpu_name or "").lower()
    for key, value in table:
        if re.search(r"(?<![a-z0-9])" + re.escape(key.lower()) + r"(?![a-z0-9])", name):
            return value
    return None


def gpu_bf16_peak_tflops(gpu_name):
    """The dense bf16 peak of a GPU named like torch.cuda.get_device_name() prints it, or None if unknown."""
    return lookup_gpu(GPU_BF16_PEAK_TFLOPS, gpu_name)


def hardware_info(device):
    """{gpu_name, gpu_count, gpu_bf16_peak_tflops, cpu_model, cpu_count, nvidia_smi (text or None)}."""
    import torch

    info = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "gpu_name": None, "gpu_count": 0,
            "gpu_bf16_peak_tflops": None, "nvidia_smi": None}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        info["gpu_name"] = torch.cuda.get_device_name(device)
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_bf16_peak_tflops"] = gpu_bf16_peak_tflops(info["gpu_name"])
        try:
            info["nvidia_smi"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def peak_memory(device):
    """Peak memory in GB: CUDA allocated/reserved, or on CPU the process's max RSS for both (labelled)."""
    import torch

    if str(device).startswith("cuda"):
        return {"allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30,
                "reserved_gb": torch.cuda.max_memory_reserved(device) / 2**30,
                "label": "CUDA max_memory_allocated / max_memory_reserved"}
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_gb = rss / 2**30 if sys.platform == "darwin" else rss / 2**20  # bytes on macOS, kilobytes on Linux
    return {"allocated_gb": rss_gb, "reserved_gb": rss_gb,
            "label": "CPU: process max RSS (ru_maxrss), reported for both allocated and reserved"}


# ------------------------------------------------------------------------------------------------ checkpoints
def rng_states():
    """Every random generator a training run draws from (torch CPU, Python, CUDA), for a checkpoint."""
    import torch

    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_states(states):
    """Restore rng_states() from a checkpoint (missing parts are left alone)."""
    import torch

    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "python" in states:
        random.setstate(_tuplify(states["python"]))
    if states.get("cuda") and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, (list, tuple)) else x


def save_checkpoint(path, *, model_state, model_config, step, args=None, tokenizer=None, optimizer_states=None,
                    dataloader_state=None, rng_states=None, extra=None, data=None, model_source=None,
                    overwrite=False):
    """Write one training checkpoint atomically (never over an existing file unless overwrite).

    The file is a `torch.save` of plain values only (tensors, numbers, strings, lists, dicts), so
    `load_checkpoint` can open it with `weights_only=True`:
        format, format_version, step (optimizer steps done), model (plain state dict: no `_orig_mod.`
        prefixes from torch.compile), model_config (GPT(GPTConfig(**model_config)) rebuilds the network),
        model_source {file, code, sha256} (the model.py that defines GPT and GPTConfig), args (every flag),
        tokenizer {name, ranks_sha256}, optimizers [state dicts], dataloader (position), rng, extra,
        data {train_sha256, val_sha256} (gptlab.dataloader.data_fingerprint), sha256 (of all the rest).
    """
    import torch

    state = {k.removeprefix("_orig_mod."): v.detach().cpu() for k, v in model_state.items()}
    payload = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_VERSION, "step": int(step),
               "model": state, "model_config": dict(model_config), "model_source": model_source,
               "args": dict(args or {}),
               "tokenizer": dict(tokenizer or {}), "optimizers": list(optimizer_states or []),
               "dataloader": dataloader_state, "rng": rng_states or {}, "extra": extra or {}, "data": data or {}}
    payload["sha256"] = payload_sha256(payload)
    try:
        with atomic_write(path, "wb", overwrite=overwrite) as f:
            torch.save(payload, f)
    except (OSError, RuntimeError) as err:  # torch's zip writer turns a failed write (disk full) into RuntimeErrors
        failed_write = err if isinstance(err, OSError) else err.__context__
        if not isinstance(failed_write, OSError) and "writ" not in str(err):
            raise
        reason = getattr(failed_write, "strerror", None) or str(err).splitlines()[0][:200]
        raise UserError(f"could not write checkpoint {path}: {reason}. Nothing half-written was left; free space "
                        "(or fix the folder) and resume from the last checkpoint") from None
    return path


def payload_sha256(payload):
    """sha256 over a checkpoint's content (every tensor's dtype, shape and bytes, every value; the "sha256" entry
    left out), in a fixed order, so a flipped byte anywhere in its data shows on load."""
    import hashlib

    import torch

    digest = hashlib.sha256()

    def feed(value):
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b"")
        elif isinstance(value, dict):
            digest.update(b"{")
            for key in sorted(value, key=repr):
                if key != "sha256" or value is not payload:
                    digest.update(repr(key).encode())
                    feed(value[key])
            digest.update(b"}")
        elif isinstance(value, (list, tuple)):
            digest.update(b"[" if isinstance(value, list) else b"(")
            for item in value:
                feed(item)
            digest.update(b"]")
        else:
            digest.update(repr(value).encode())

    feed(payload)
    return digest.hexdigest()


def load_checkpoint(path, map_location="cpu", allow_old=False):
    """Read a checkpoint written by save_checkpoint → dict (see save_checkpoint for the keys).

    The model it holds is built by gptlab.train.model_source.load_model (from the source it carries). Loading
    never runs code from the file (weights_only=True). A checkpoint of an older format is refused with the command
    that converts it (allow_old=True reads it anyway: the converter does).
    """
    import torch

    if not os.path.isfile(path):
        raise UserError(f"checkpoint {path} does not exist; pass a .pt file from an experiments/<run>/"
                        f"{CHECKPOINT_DIR}/ folder")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except PermissionError:
        raise UserError(f"checkpoint {path} is not readable (permission denied); check its permissions") from None
    except Exception as err:
        first_line = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise UserError(f"checkpoint {path} cannot be read ({type(err).__name__}: {first_line}); it is damaged or "
                        "not a gptlab checkpoint") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not a gptlab checkpoint (no format={CHECKPOINT_FORMAT!r})")
    if payload.get("format_version", 0) > CHECKPOINT_VERSION:
        raise UserError(f"{path} has checkpoint format_version {payload['format_version']}, newer than this code "
                        f"({CHECKPOINT_VERSION}); update gptlab")
    if payload.get("format_version", 0) >= 2 and payload.get("sha256") != payload_sha256(payload):
        raise UserError(f"checkpoint {path} is damaged: its content does not match the checksum it was saved with; "
                        "resume from another checkpoint of the run")
    if payload.get("format_version", 0) < CHECKPOINT_VERSION and not allow_old:
        raise UserError(f"checkpoint {path} has format_version {payload.get('format_version', 0)}, from before "
                        f"checkpoints carried their model's source; convert it once with: {CONVERT_HINT} {path}")
    return payload


def check_resume_compatible(ckpt, model_config, tokenizer, train_steps, arch_keys, shards=None, allow_new_data=False):
    """Refuse a --resume checkpoint this run cannot continue: another architecture (the model_config entries
    named by arch_keys), another tokenizer (by hash), already at or past train_steps, or (unless allow_new_data)
    other training or validation data than it recorded (shards: a gptlab.dataloader.RunShards)."""
    differ = [k for k in arch_keys if ckpt["model_config"].get(k) != model_config[k]]
    if differ:
        raise UserError("--resume checkpoint has a different architecture: " + ", ".join(
            f"--{k} {ckpt['model_config'].get(k)} (checkpoint) vs {model_config[k]}" for k in differ)
            + "; pass the checkpoint's values")
    if ckpt["tokenizer"].get("ranks_sha256") not in (None, tokenizer.ranks_sha256):
        raise UserError(f"--resume checkpoint was trained with tokenizer {ckpt['tokenizer'].get('name')}, not "
                        f"{tokenizer.name}; pass --tokenizer {ckpt['tokenizer'].get('name')}")
    if ckpt["step"] >= train_steps:
        raise UserError(f"--resume checkpoint is at step {ckpt['step']}, not before --train_steps "
                        f"{train_steps}; raise --train_steps to train further")
    recorded = ckpt.get("data") or {}
    for split in ("train", "val"):
        was, now = recorded.get(f"{split}_sha256"), getattr(shards, f"{split}_sha256", None)
        if was and now and was != now and not allow_new_data:
            raise UserError(f"--resume checkpoint was trained on other {split} data: the {split} shards now "
                            f"({', '.join(getattr(shards, f'{split}_files'))}) differ from the ones it recorded "
                            "(rebuilt with another seed or text?); point --train_files/--val_files at the original "
                            "shards, or pass --allow_new_data to continue on these")


def checkpoint_tokenizer(ckpt, path):
    """The tokenizer a checkpoint (read from `path`) was trained with, as a gptlab.tokenizer.LoadedTokenizer: its
    --tokenizer as recorded, else its name in tokenizers/, checked by hash."""
    from gptlab.tokenizer import open_tokenizer

    recorded = ckpt["tokenizer"]
    candidates = [c for c in (ckpt["args"].get("tokenizer"), recorded.get("name")) if c]
    for candidate in candidates:
        try:
            tokenizer = open_tokenizer(candidate)
            break
        except UserError:
            continue
    else:
        raise UserError(f"the tokenizer of {path} ({' or '.join(map(str, candidates))}) was not found; put it in "
                        "tokenizers/")
    if recorded.get("ranks_sha256") not in (None, tokenizer.ranks_sha256):
        raise UserError(f"{tokenizer.path} is not the tokenizer {path} was trained with (its hash differs)")
    return tokenizer


def command_line():
    return " ".join([os.path.basename(sys.executable)] + sys.argv)
