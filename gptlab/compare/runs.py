"""Reading experiment run folders: one folder into a Run with its summary figures (load_run), and listing or
resolving the run folders to compare."""
import csv
import datetime
import glob
import math
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass

from gptlab.compare import judged
from gptlab.core.errors import UserError
from gptlab.train import code_backup, cost
from gptlab.train.records import (CODE_DIR, CONFIG_FILE, EVALS_PREFIX, HEARTBEAT_FILE, LOG_FILE, METRICS_FILE,
                                  RESULT_STATUSES, RESULTS_FILE, Metrics, heartbeat_process, is_run_folder,
                                  read_metrics, read_run_json)

# How a figure a run folder does not have (yet) is shown.
MISSING = "—"
# A folder without results.json whose files changed this recently is taken to be a run still in progress.
RUNNING_WINDOW_S = 600
RUN_FOLDER_RE = re.compile(r"^(\d{8}_\d{6})_(.+)$")
# A bound on what is read of a run folder's metrics.csv (a crafted or damaged folder must not exhaust memory;
# train_gpt.py writes about 150 bytes per step); its JSON files are bounded by records.read_run_json.
MAX_METRICS_BYTES = 512 << 20


class BadRunFolder(UserError):
    """A run folder whose files hold a value of the wrong type or out of range: it is left out of a comparison,
    with a line naming it and the field."""


# ----------------------------------------------------------------------------------------------------------------
# Bounded readers

def _read_metrics(path):
    """metrics.csv read as gptlab.train.records.read_metrics(strict=False) does, within bounds: a file that is not
    regular (nor a named pipe, read up to the bound), too large or unreadable as CSV (a field over the csv module's
    limit) gives no rows and a note."""
    try:
        st = os.stat(path)
    except OSError as err:
        return Metrics(notes=[f"{METRICS_FILE} cannot be read ({err.strerror or err}); ignored it"])
    why = None
    if stat.S_ISFIFO(st.st_mode):  # a stream: read it up to the bound, then parse that copy
        return _read_metrics_stream(path)
    if not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_size > MAX_METRICS_BYTES:
        why = f"is too large ({st.st_size:,} bytes; at most {MAX_METRICS_BYTES:,} are read)"
    else:
        try:
            return read_metrics(path, strict=False)
        except (OSError, csv.Error, ValueError, RecursionError) as err:
            why = f"is unreadable ({type(err).__name__}: {str(err)[:200]})"
    return Metrics(notes=[f"{METRICS_FILE} {why}; ignored it"])


def _read_metrics_stream(path):
    with open(path, "rb") as f:
        data = f.read(MAX_METRICS_BYTES + 1)
    if len(data) > MAX_METRICS_BYTES:
        return Metrics(notes=[f"{METRICS_FILE} is too large (over {MAX_METRICS_BYTES:,} bytes); ignored it"])
    with tempfile.TemporaryDirectory(prefix="gptlab-metrics-") as tmp:
        copy = os.path.join(tmp, METRICS_FILE)
        with open(copy, "wb") as f:
            f.write(data)
        return _read_metrics(copy)


# What load_run accepts in config.json / results.json: a key missing or null is "not recorded"; text that is no
# number, or a loss that is not finite (a diverged run), reads as not recorded too. A value of another type, a
# number out of its range, or any other number that is not finite makes the run a BadRunFolder: it is left out
# with a line naming the field, never counted (in a seed group, a mean, a fit).
_TEXT_KEYS = ("model_name", "tokenizer", "tokenizer_name", "tokenizer_path", "tokenizer_ranks_sha256",
              "tokenizer_sha256", "gpu_name", "device", "peak_mem_label", "error", "resumed_from")
# key: (lowest, highest) allowed
_NUMBER_KEYS = {"n_params": (0, None), "tokens": (0, None), "final_val_loss": (0, None), "final_val_bpb": (0, None),
                "wall_time_s": (0, None), "mfu": (0, None), "peak_mem_allocated_gb": (0, None),
                "train_flops": (0, None), "gpu_hours": (0, None), "usd_per_gpu_hour": (0, None)}
# The figures a diverged run may record as nan or inf (shown as missing); any other number must be finite.
_DIVERGED_KEYS = ("final_val_loss", "final_val_bpb")
# Counts and the seed: a JSON integer (not text, a float or true/false) within (lowest, highest), or the run is
# impossible (a seed of -5 or a world size of 0 would join or split a seed group). The seed's range is train_gpt.py's.
_INTEGER_KEYS = {"seed": (0, 2**63 - 1), "world_size": (1, 10**7), "gpu_count": (0, 10**7), "steps": (0, None),
                 "train_steps": (1, None), "resume_step": (0, None)}
_HELLASWAG_KEYS = {"acc_norm": (0, 1)}
_HELLASWAG_INTEGER_KEYS = {"n": (0, 10**12)}
# results.json's "evals" (train_gpt.py --evals): the suite's final figures. core is a mean of centred accuracies
# ((acc - chance) / (1 - chance)): below 0 when under chance, so only finite; gold_bpb is bits per byte.
_EVALS_KEYS = {"core": (None, 1), "gold_bpb": (0, None)}
_EVALS_INTEGER_KEYS = {"limit": (1, 10**12)}


def _in_range(value, bounds):
    low, high = bounds
    return (low is None or value >= low) and (high is None or value <= high)


def _shown(number):
    return str(number) if isinstance(number, int) else f"{number:g}"


def _bounds_text(bounds):
    low, high = bounds
    if low is None:
        return f"{_shown(high)} or less"
    return f"between {_shown(low)} and {_shown(high)}" if high is not None else f"{_shown(low)} or more"


def _integer_problem(key, value, bounds):
    """Why `value` is no integer within bounds (a line naming the field), or None; None also when not recorded."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"field {key!r} must be an integer, got {repr(value) if isinstance(value, float) else _kind(value)}"
    if not _in_range(value, bounds):
        return f"field {key!r} must be {_bounds_text(bounds)}, got {value}"
    return None


def _kind(value):
    return {dict: "an object", list: "a list", str: "text", bool: "true/false"}.get(type(value), type(value).__name__)


def field_problems(data, filename):
    """Lines naming each field of a config.json / results.json dict that load_run cannot use."""
    problems = []
    for key in _TEXT_KEYS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            problems.append(f"{filename} field {key!r} must be text, got {_kind(value)}")
    checks = [(key, data.get(key), bounds) for key, bounds in _NUMBER_KEYS.items()]
    hellaswag = data.get("hellaswag")
    if hellaswag is not None and not isinstance(hellaswag, dict):
        problems.append(f"{filename} field 'hellaswag' must be an object, got {_kind(hellaswag)}")
    elif hellaswag:
        checks += [(f"hellaswag.{key}", hellaswag.get(key), bounds) for key, bounds in _HELLASWAG_KEYS.items()]
    integers = [(key, data.get(key), bounds) for key, bounds in _INTEGER_KEYS.items()]
    if isinstance(hellaswag, dict):
        integers += [(f"hellaswag.{key}", hellaswag.get(key), bounds) for key, bounds in _HELLASWAG_INTEGER_KEYS.items()]
    problems += [f"{filename} {problem}" for problem in (_integer_problem(*check) for check in integers) if problem]
    for key, value, bounds in checks:
        if value is None or isinstance(value, bool):
            continue  # not recorded
        if not isinstance(value, (int, float, str)):
            problems.append(f"{filename} field {key!r} must be a number, got {_kind(value)}")
            continue
        if isinstance(value, float) and not math.isfinite(value) and key not in _DIVERGED_KEYS:
            problems.append(f"{filename} field {key!r} must be a finite number, got {value}")
            continue
        number = _number(value)  # None for text that is no number, or a diverged value: shown as missing
        if number is not None and not _in_range(number, bounds):
            problems.append(f"{filename} field {key!r} must be {_bounds_text(bounds)}, got {number:g}")
    if filename == RESULTS_FILE:  # config.json's "evals" is the --evals flag (text)
        problems += _evals_problems(data.get("evals"), filename)
    shards = data.get("val_shards")
    if shards is not None and not (isinstance(shards, list) and all(isinstance(p, str) for p in shards)):
        problems.append(f"{filename} field 'val_shards' must be a list of paths")
    return problems


def _evals_problems(evals, filename):
    """Lines naming each field of results.json's "evals" that load_run cannot use (None: not recorded)."""
    if evals is None:
        return []
    if not isinstance(evals, dict):
        return [f"{filename} field 'evals' must be an object, got {_kind(evals)}"]
    problems = []
    for key, bounds in _EVALS_KEYS.items():
        value = evals.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(f"{filename} field 'evals.{key}' must be a finite number, got {value!r}")
        elif not _in_range(value, bounds):
            problems.append(f"{filename} field 'evals.{key}' must be {_bounds_text(bounds)}, got {value:g}")
    problems += [f"{filename} {p}" for p in (_integer_problem(f"evals.{k}", evals.get(k), b)
                                             for k, b in _EVALS_INTEGER_KEYS.items()) if p]
    tasks = evals.get("tasks")
    if tasks is not None and not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
        problems.append(f"{filename} field 'evals.tasks' must be a list of task names")
    return problems


# ----------------------------------------------------------------------------------------------------------------
# Reading one run folder

def _number(value):
    if isinstance(value, bool) or value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer beyond a float's range
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
    # train_gpt.py --evals: the suite's core (mean centred accuracy) and gold_bpb with their 95% intervals, over
    # which tasks and how many examples of each (None: all); a figure is comparable only on the same suite
    evals_core: float = None
    evals_core_ci: tuple = None
    evals_gold_bpb: float = None
    evals_gold_bpb_ci: tuple = None
    evals_tasks: tuple = None
    evals_limit: int = None
    wall_time_s: float = None
    gpu: str = None
    peak_mem_gb: float = None
    peak_mem_is_rss: bool = False
    mfu: float = None  # model FLOPs utilisation (GPU runs whose bf16 peak the trainer knew)
    on_gpu: bool = False
    world_size: int = 1
    gpu_hours: float = None  # processes x wall time (a CPU run: process-hours)
    usd_per_gpu_hour: float = None
    cost_usd: float = None
    train_flops: float = None
    train_flops_source: str = None  # "results.json", "metrics.csv" or "6ND"
    bytes_per_token: float = None  # its tokenizer on its validation shards (filled in by the report)
    seed: object = None
    error: str = None
    research_code: dict = None  # {research file: sha256} of its code/ backup (None without one): part of its group
    judged: list = None  # gptlab.compare.judged.Judging of each judge.py summary in its judge/ folder
    cpu_threads: int = None  # torch's threads per process, as the run recorded them
    load: float = None  # the machine's highest 1-minute load average the run recorded (start, end)
    cores: int = None  # the CPUs the run could use

    @property
    def overloaded(self):
        """True when the machine's load average went above its cores during the run: its timings (wall time,
        GPU-h, cost) measure the load as much as the run."""
        return self.load is not None and self.cores is not None and self.load > self.cores

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

    Read defensively (the tolerant readers of gptlab.train.records, which owns the folder layout): the trainer writes
    these folders incrementally (and may be killed at any point), so a missing key shows as MISSING ("—"), a
    half-written metrics.csv is parsed up to its last complete row, and a folder without results.json is classified
    as running or crashed from how recently it was written to.

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
    problems = field_problems(config, CONFIG_FILE) + field_problems(results or {}, RESULTS_FILE)
    seeds = (config.get("seed"), (results or {}).get("seed"))
    if not problems and None not in seeds and seeds[0] != seeds[1]:  # a run has one seed: which group is it in?
        problems.append(f"{RESULTS_FILE} field 'seed' is {seeds[1]} but {CONFIG_FILE} says {seeds[0]}")
    if problems:
        raise BadRunFolder(f"{path}: {'; '.join(problems[:3])}" + (" ..." if len(problems) > 3 else ""))
    metrics = _read_metrics(metrics_path) if with_metrics and os.path.lexists(metrics_path) else Metrics()
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
    # the heartbeat is read by its owner, records.py; a damaged one (bounded check here) tells nothing
    readable_beat = results is None and read_run_json(path, HEARTBEAT_FILE, []) is not None
    process, beat = heartbeat_process(path) if readable_beat else (None, None)
    if process == "gone":  # its training process, on this host, is no more: no need to wait for the window
        status = "crashed" if metrics.rows else "no metrics"
        notes.append(f"no results.json and its process (pid {beat['pid']} on {beat['host']}) is gone: killed or "
                     f"crashed after step {beat.get('step')} (see its training_log.txt)")
    elif process == "alive":
        status = "running"
    elif status == "crashed" and not metrics.truncated:
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
    run.research_code = code_backup.research_code(os.path.join(path, CODE_DIR))
    run.judged, damaged = judged.find_judgings(run, path)  # judge.py's win rates of this run over a baseline
    notes.extend(f"{os.path.relpath(p, path)} {why}: its judged win rate is left out" for p, why in damaged)
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
    _check_measured(run)
    if run.hs_ci is None and run.hs_acc_norm is not None and run.hs_n:
        # Normal-approximation 95% interval when the trainer reported n but no interval.
        half = 1.96 * math.sqrt(run.hs_acc_norm * (1 - run.hs_acc_norm) / run.hs_n)
        run.hs_ci = (run.hs_acc_norm - half, run.hs_acc_norm + half)
    _read_evals(run, res, config, metrics)
    run.peak_mem_gb = _number(res.get("peak_mem_allocated_gb"))
    run.peak_mem_is_rss = str(res.get("peak_mem_label", "")).lower().startswith("cpu")
    gpu_name = res.get("gpu_name") or config.get("gpu_name")
    # Devices the run used (world size), not how many the machine had (gpu_count).
    count = (_number(res.get("world_size")) or _number(config.get("world_size"))
             or _number(config.get("gpu_count")))
    device = str(config.get("device", ""))
    run.on_gpu = bool(gpu_name)
    run.world_size = int(count) if count else 1
    run.train_flops, run.train_flops_source = _train_flops(res, metrics, run)
    price_run(run)
    if gpu_name:
        run.gpu = f"{gpu_name} ×{int(count)}" if count else str(gpu_name)
    elif device.startswith("cpu") or device == "":
        run.gpu = (f"CPU ×{int(count)}" if count else "CPU") if (device or count) else None
    else:
        run.gpu = device
    run.cpu_threads = _count(config.get("cpu_threads"))
    run.cores = _count(config.get("cpu_cores"))
    loads = [_number(x[0]) for x in (config.get("load_avg_start"), res.get("load_avg_end"))
             if isinstance(x, list) and x]
    loads = [x for x in loads if x is not None and x >= 0]
    run.load = max(loads) if loads else None
    return run


def _read_evals(run, res, config, metrics):
    """The suite's figures: results.json's "evals" (the final evaluation), else metrics.csv's last evals_* row
    (tasks from its columns, the limit from config.json)."""
    evals = res.get("evals") if isinstance(res.get("evals"), dict) else None
    if evals is not None and _number(evals.get("core")) is not None:
        run.evals_core, run.evals_gold_bpb = _number(evals.get("core")), _number(evals.get("gold_bpb"))
        run.evals_core_ci = ci_interval(run.evals_core, evals.get("core_ci95"))
        run.evals_gold_bpb_ci = ci_interval(run.evals_gold_bpb, evals.get("gold_bpb_ci95"))
        tasks, limit = evals.get("tasks"), evals.get("limit")
    else:
        row = next((r for r in reversed(metrics.rows) if r.get(f"{EVALS_PREFIX}core") is not None), None)
        if row is None:
            return
        run.evals_core, run.evals_gold_bpb = row[f"{EVALS_PREFIX}core"], row.get(f"{EVALS_PREFIX}gold_bpb")
        # evals_<task>_acc per task (a task's name may hold "_", but no other figure's column ends in "_acc")
        tasks = [c[len(EVALS_PREFIX):-len("_acc")] for c in metrics.columns
                 if c.startswith(EVALS_PREFIX) and c.endswith("_acc")]
        limit = config.get("evals_limit")
    run.evals_tasks = tuple(sorted(tasks)) if isinstance(tasks, list) and tasks else None
    run.evals_limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def _count(value):
    """A recorded positive whole number (threads, cores), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# The run's figures, wherever they came from (results.json was checked by field_problems; these catch
# metrics.csv's): attribute, its metrics.csv column, (lowest, highest).
_MEASURED = (("tokens", "tokens", (0, None)), ("val_loss", "val_loss", (0, None)), ("val_bpb", "val_bpb", (0, None)),
             ("wall_time_s", "elapsed_s", (0, None)), ("mfu", "mfu", (0, None)),
             ("hs_acc_norm", "hellaswag_acc_norm", (0, 1)), ("evals_core", "evals_core", (None, 1)),
             ("evals_gold_bpb", "evals_gold_bpb", (0, None)))


def _check_measured(run):
    problems = [f"{METRICS_FILE} column {column!r} must be {_bounds_text(bounds)}, got {getattr(run, attr):g}"
                for attr, column, bounds in _MEASURED
                if getattr(run, attr) is not None and not _in_range(getattr(run, attr), bounds)]
    if problems:
        raise BadRunFolder(f"{run.path}: {'; '.join(problems)}")


def _positive_finite(value):
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _train_flops(res, metrics, run):
    """(FLOPs, source): results.json's train_flops (the sum of every step's), else the sum over metrics.csv's step
    rows of tflops_per_gpu x step_time_s x world size (the same figures, as logged), else 6 x parameters x tokens."""
    # each source only when it gives a positive, finite figure (a damaged or crafted one falls through)
    recorded = _positive_finite(_number(res.get("train_flops")))
    if recorded:
        return recorded, "results.json"
    steps = [(r.get("tflops_per_gpu"), r.get("step_time_s")) for r in metrics.rows if r.get("train_loss") is not None]
    if steps and all(t is not None and s is not None for t, s in steps):
        summed = _positive_finite(sum(t * s for t, s in steps) * 1e12 * run.world_size)
        if summed:
            return summed, "metrics.csv"
    if run.n_params and run.tokens:
        product = _positive_finite(6.0 * run.n_params * run.tokens)
        if product:
            return product, "6ND"
    return None, None


def price_run(run, usd_per_gpu_hour=None, overhead_minutes=0.0):
    """Set run.gpu_hours, usd_per_gpu_hour and cost_usd: processes x (wall time + overhead), at the price given,
    else the one the run recorded, else gptlab/train/cost.py's table by GPU name (GPU runs only)."""
    res = run.results or {}
    recorded = _number(res.get("gpu_hours"))
    run.gpu_hours = recorded if recorded is not None and not overhead_minutes else cost.gpu_hours(
        run.wall_time_s, run.world_size, overhead_minutes)
    price = usd_per_gpu_hour
    if price is None:
        price = _number(res.get("usd_per_gpu_hour"))
    if price is None:
        price = _number(run.config.get("usd_per_gpu_hour"))
    if price is None and run.on_gpu:
        price = cost.table_price(res.get("gpu_name") or run.config.get("gpu_name"))
    run.usd_per_gpu_hour = price
    run.cost_usd = cost.cost_usd(run.gpu_hours, price)


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
