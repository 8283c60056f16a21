"""Hyperparameter sweeps: every combination of a grid of train_gpt.py flags, for each seed, one run after another.

    sweep = plan_sweep(name, grid, seeds, train_flags, ...)    # the points, named after their settings
    run_sweep(sweep, script="train_gpt.py", experiments_dir=...)

Each point is a normal train_gpt.py run (through torchrun when nproc_per_node > 1) whose --model_name is the sweep's
name plus its settings (Sweep_lr_scale0.5), so the seeds of one setting form a seed group on the leaderboard. The
sweep's record, experiments/sweep_<name>.json, holds every point's status, run folder and error; a failed run is
recorded and the sweep goes on; running the same sweep again skips the points whose run finished (a longer grid or
more seeds extend it). The sweep ends with the leaderboard of its runs.
"""
import argparse
import difflib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from gptlab.core.cli import FlagValueError
from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write_text, check_folder_creatable, exclusive_lock, read_json_file
from gptlab.core.processes import die_with_parent
from gptlab.core.processes import libc_prctl as _libc_prctl  # a name of this module: tests replace it
from gptlab.core.progress import progress_bar
from gptlab.train.records import RESULTS_FILE, read_run_json

SWEEP_FORMAT = "gptlab-sweep"
# flags the sweep sets itself on every run (the grid and the passed-through flags may not)
SWEEP_SET_FLAGS = ("seed", "model_name", "experiments_dir")
ERROR_TAIL_LINES = 20
POINT_STATUSES = ("pending", "finished", "failed", "interrupted")
MAX_RECORD_BYTES = 64 << 20  # a record holds a few hundred bytes per point


def sweep_record_path(experiments_dir, name):
    return os.path.join(experiments_dir, f"sweep_{name}.json")


# ------------------------------------------------------------------------------------------------ the plan
# train_gpt.py's argument group of the flags that keep a run's books (gptlab/train/run.py's add_run_flags: folder,
# checkpoints, logging, resuming, price) rather than set its experiment: a grid over one would run the same
# experiment under several names (--log_every), or no new run at all (--resume, --dry_run)
BOOKKEEPING_GROUP = "run"
# flags that make train_gpt.py do something other than start a run: refused after -- too
NOT_A_RUN_FLAGS = ("resume", "dry_run")


def train_flags_of(parser):
    """What parse_grid needs of train_gpt.py's parser: (flag names, switches {flag: has a --no- form} of the flags
    that take no value, types {flag: its type=}, the bookkeeping flags)."""
    flags = [a for a in parser._actions if a.option_strings]
    switches = {a.dest: isinstance(a, argparse.BooleanOptionalAction) for a in flags if a.nargs == 0}
    types = {a.dest: a.type for a in flags if callable(a.type)}
    bookkeeping = {a.dest for group in parser._action_groups if group.title == BOOKKEEPING_GROUP
                   for a in group._group_actions}
    return {a.dest for a in flags}, switches, types, bookkeeping


def _setting(text, kind):
    """The value train_gpt.py will take from `text` (1, 1.0 and 01 are one lr_scale), or the text itself where its
    type refuses it (that run fails, and is recorded as failed)."""
    if kind is None:
        return text
    try:
        return kind(text)
    except (ValueError, TypeError, ArithmeticError, argparse.ArgumentTypeError):
        return text


def parse_grid(specs, known_flags, switches=None, types=None, bookkeeping=()):
    """['lr_scale=0.5,1,2', ...] → [('lr_scale', ['0.5', '1', '2']), ...]; each key a flag of train_gpt.py that
    sets the experiment (not one of `bookkeeping`), each value a different setting once parsed by the flag's type
    (types: {flag: type}). switches: {flag: True when it has a --no- form} for train_gpt.py's flags that take no
    value; their grid values are true / false. train_flags_of(train_gpt's parser) gives the last four."""
    grid, seen, switches, types = [], set(), switches or {}, types or {}
    for spec in specs:
        key, sep, values = spec.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        values = [v.strip() for v in values.split(",")]
        if not sep or not key or not all(values):
            raise UserError(f"--grid {spec!r} is not FLAG=V1,V2,...; write e.g. --grid lr_scale=0.5,1,2")
        if key in SWEEP_SET_FLAGS:
            fix = {"seed": "--seeds 0,1,2", "model_name": "--name NAME", "experiments_dir": "--experiments_dir DIR"}
            raise UserError(f"--grid {key}=... is set by the sweep itself; use the sweep's {fix[key]}")
        if key not in known_flags:
            close = difflib.get_close_matches(key, sorted(known_flags), n=3)
            raise UserError(f"--grid {key}: train_gpt.py has no flag --{key}"
                            + (f" (did you mean {', '.join('--' + c for c in close)}?)" if close else
                               "; python train_gpt.py --help lists its flags"))
        if key in NOT_A_RUN_FLAGS:
            raise UserError(f"--grid {key}=...: with --{key} train_gpt.py starts no new run, and a sweep runs one per "
                            "setting; sweep over experiment settings such as --grid lr_scale=0.5,1,2 (sweep.py "
                            "--dry_run shows the commands)")
        if key in seen:
            raise UserError(f"--grid {key} is given twice; list all its values in one --grid {key}=V1,V2,...")
        if key in switches and not switches[key]:
            raise UserError(f"--grid {key}: train_gpt.py's --{key} is a switch with no off form; pass it after -- to "
                            "give it to every run")
        if key in bookkeeping:
            raise UserError(f"--grid {key}=...: --{key} is not an experiment setting (it keeps the run's books), so "
                            f"the runs would be one experiment under several names; pass --{key} after -- to give "
                            "it to every run")
        if key in switches:  # --compile / --no-compile: no value on the command line
            values = [v.lower() for v in values]
            if not set(values) <= {"true", "false"}:
                raise UserError(f"--grid {spec!r}: --{key} is a switch; its values are true and false, e.g. "
                                f"--grid {key}=true,false")
        settings = [_setting(v, types.get(key)) for v in values]
        for i, (value, setting) in enumerate(zip(values, settings)):
            twin = next((values[j] for j in range(i) if settings[j] == setting), None)
            if twin is not None:
                same = "" if twin == value else f": {twin} and {value} are the same --{key} {setting!r}"
                raise UserError(f"--grid {spec!r} repeats a value{same}; list each value once")
        seen.add(key)
        grid.append((key, values))
    return grid


def parse_seeds(text):
    """--seeds "0,1,2" → [0, 1, 2] (the flag's type)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds):
        raise FlagValueError(f"{text!r} is not a list of distinct integers; write e.g. --seeds 0,1,2")
    return seeds


def sweep_name(name):
    """--name (the flag's type): it names the record file and begins every run's folder name."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+-]*", name):
        raise FlagValueError(f"{name!r} must be a plain name (letters, digits, . + -), e.g. --name LrSweep")
    return name


def flags_given(argv):
    """Names of the --flags in a train_gpt.py argument list (--flag VALUE and --flag=VALUE forms)."""
    return {a[2:].split("=", 1)[0].replace("-", "_") for a in argv if a.startswith("--") and len(a) > 2}


def _name_part(value):
    return re.sub(r"[^A-Za-z0-9.+-]", "-", value)


def point_name(name, settings):
    """The run's --model_name: the sweep's name and its settings, e.g. Sweep_lr_scale0.5_num_layers4."""
    return "_".join([name] + [f"{key}{_name_part(value)}" for key, value in settings])


@dataclass
class Point:
    settings: list  # [(flag, value), ...] in grid order
    seed: int
    model_name: str
    status: str = "pending"  # pending | finished | failed | interrupted
    run_dir: str = None
    error: str = None
    exit_code: int = None
    seconds: float = None

    @property
    def key(self):
        return self.model_name, self.seed

    def label(self):
        return " ".join(f"{k}={v}" for k, v in self.settings) + f" seed={self.seed}"


@dataclass
class Sweep:
    name: str
    grid: list
    seeds: list
    train_flags: list
    nproc_per_node: int = 1
    points: list = field(default_factory=list)
    switches: tuple = ()  # grid flags that take no value: true → --flag, false → --no-flag


def plan_sweep(name, grid, seeds, train_flags, nproc_per_node=1, switches=()):
    """Every combination of the grid for each seed, seed-major: one run of every setting before the next seed
    (name: a sweep_name, seeds: parse_seeds's list, nproc_per_node >= 1, as sweep.py's flags give them)."""
    not_runs = sorted(flags_given(train_flags) & set(NOT_A_RUN_FLAGS))
    if not_runs:
        raise UserError(f"the train_gpt.py flags after -- set {', '.join('--' + c for c in not_runs)}, with which "
                        "train_gpt.py starts no new run; a sweep runs one per setting: drop them after -- (sweep.py "
                        "--dry_run shows the commands)")
    clash = sorted(flags_given(train_flags) & (set(SWEEP_SET_FLAGS) | {k for k, _ in grid}))
    if clash:
        raise UserError(f"the train_gpt.py flags after -- set {', '.join('--' + c for c in clash)}, which the sweep "
                        "sets itself (from --grid, --seeds, --name, --experiments_dir); drop them after --")
    combos = list(itertools.product(*[[(key, v) for v in values] for key, values in grid]))
    named = {}
    for combo in combos:  # a run is known by its name: two settings may not share one
        other = named.setdefault(point_name(name, combo), combo)
        if other is not combo:
            a, b = (" ".join(f"{k}={v!r}" for k, v in c if dict(other)[k] != dict(combo)[k]) for c in (other, combo))
            raise UserError(f"--grid values {a} and {b} give the same run name {point_name(name, combo)!r} (only "
                            "letters, digits and . + - are kept in names); give values that differ in those")
    points = [Point(list(combo), seed, point_name(name, combo)) for seed in seeds for combo in combos]
    return Sweep(name, grid, seeds, list(train_flags), nproc_per_node, points, tuple(switches))


# ------------------------------------------------------------------------------------------------ the record
def _record(sweep):
    return {"format": SWEEP_FORMAT, "name": sweep.name, "grid": sweep.grid, "seeds": sweep.seeds,
            "train_flags": sweep.train_flags, "nproc_per_node": sweep.nproc_per_node,
            "points": [asdict(p) for p in sweep.points]}


def save_record(sweep, path):
    atomic_write_text(path, json.dumps(_record(sweep), indent=2) + "\n", overwrite=True)


def _read_record(path):
    """The sweep record at `path` as a dict, or the reason it cannot be used (bounded read, every field checked)."""
    old, problem = read_json_file(path, MAX_RECORD_BYTES)
    if problem:
        return f"it {problem}"
    return _record_problem(old) or old


def _is_text_list(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _record_problem(old):
    """Why a parsed record is not one this module wrote (a field missing or of the wrong type), or None."""
    if not isinstance(old, dict) or old.get("format") != SWEEP_FORMAT:
        return f"its format is not {SWEEP_FORMAT!r}"
    grid = old.get("grid", [])
    if not (isinstance(grid, list) and all(isinstance(g, list) and len(g) == 2 and isinstance(g[0], str)
                                           and _is_text_list(g[1]) for g in grid)):
        return "its 'grid' is not a list of [flag, [values]]"
    if not _is_text_list(old.get("train_flags", [])):
        return "its 'train_flags' is not a list of text"
    nproc = old.get("nproc_per_node", 1)
    if isinstance(nproc, bool) or not isinstance(nproc, int):
        return "its 'nproc_per_node' is not an integer"
    points = old.get("points", [])
    if not isinstance(points, list):
        return "its 'points' is not a list"
    kinds = {"model_name": (str,), "seed": (int,), "status": (str,), "run_dir": (str, type(None)),
             "error": (str, type(None)), "exit_code": (int, type(None)), "seconds": (int, float, type(None))}
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            return f"point {i} is not an object"
        for key, types in kinds.items():
            if key not in point:
                if key in ("model_name", "seed"):
                    return f"point {i} has no {key!r}"
                continue
            if isinstance(point[key], bool) or not isinstance(point[key], types):
                return (f"point {i}'s {key!r} is {type(point[key]).__name__}, not "
                        f"{' or '.join(t.__name__ for t in types)}")
        if point.get("status", "pending") not in POINT_STATUSES:
            return f"point {i}'s status {point['status']!r} is not one of {', '.join(POINT_STATUSES)}"
    return None


def load_previous(sweep, path, overwrite=False):
    """Carry the recorded status of each point over from an earlier run of this sweep (same train_gpt flags, same
    grid flags; more values or seeds extend it). A point counts as finished only if its run folder says so."""
    if not os.path.lexists(path) or overwrite:
        return
    old = _read_record(path)
    if isinstance(old, str):
        raise UserError(f"{path} is not a readable sweep record ({old}); pass --overwrite to replace it (its run "
                        "folders are kept), or --name NEW for another sweep")
    same = (old.get("train_flags") == sweep.train_flags and [k for k, _ in old.get("grid", [])] ==
            [k for k, _ in sweep.grid] and old.get("nproc_per_node", 1) == sweep.nproc_per_node)
    if not same:
        raise UserError(f"{path} records another sweep named {sweep.name} (grid {[k for k, _ in old.get('grid', [])]}, "
                        f"flags {' '.join(old.get('train_flags', []))}, nproc_per_node {old.get('nproc_per_node')}); "
                        "pass --name NEW for a new sweep, or --overwrite to start this one afresh (run folders are "
                        "kept)")
    recorded = {(p["model_name"], p["seed"]): p for p in old.get("points", [])}
    for point in sweep.points:
        before = recorded.get(point.key)
        if before is None:
            continue
        point.run_dir, point.error, point.exit_code, point.seconds = (before.get("run_dir"), before.get("error"),
                                                                       before.get("exit_code"), before.get("seconds"))
        point.status = before.get("status", "pending")
        if point.status == "finished" and not _run_finished(point.run_dir, point):
            point.status = "pending"  # its folder was removed, never finished or is another run's: run it again


def _run_finished(run_dir, point=None):
    """The run folder holds a finished run (of `point`: its model name and seed, where results.json records them)."""
    if not run_dir or not os.path.isdir(run_dir):
        return False
    try:
        results = read_run_json(run_dir, RESULTS_FILE, [])
    except RecursionError:
        return False
    if not results or results.get("status") != "finished":
        return False
    if point is not None:
        for key, want in (("model_name", point.model_name), ("seed", point.seed)):
            if key in results and results[key] != want:
                return False  # another point's (or another run's) folder
    return True


# ------------------------------------------------------------------------------------------------ running
def command_of(sweep, point, script, experiments_dir):
    launcher = [sys.executable]
    if sweep.nproc_per_node > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={sweep.nproc_per_node}"]
    flags = [arg for key, value in point.settings for arg in
             ((f"--{key}" if value == "true" else f"--no-{key}",) if key in sweep.switches else (f"--{key}", value))]
    return launcher + [script] + sweep.train_flags + flags + [
        "--seed", str(point.seed), "--model_name", point.model_name, "--experiments_dir", experiments_dir]


# The child gets this signal when the sweep dies, even by kill -9: SIGTERM, as a preemption, so train_gpt.py (and
# torchrun, which forwards it to its workers) can stop cleanly.
CHILD_DEATH_SIGNAL = signal.SIGTERM
# Off Linux (no prctl), a small watcher process stands between the sweep and the child: it polls its parent and
# ends the child when the sweep is gone.
_WATCHER = r"""
import os, signal, subprocess, sys, time
parent = int(sys.argv[1])
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the child itself; the watcher waits for it
child = subprocess.Popen(sys.argv[2:])
while child.poll() is None:
    if os.getppid() != parent:
        child.terminate()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
        break
    time.sleep(0.5)
sys.exit(child.wait())
"""


def _child_launch(command):
    """(command, preexec_fn) so the child dies with the sweep: on Linux prctl(PR_SET_PDEATHSIG) in the child, else
    the command under the watcher."""
    if _libc_prctl() is None:  # (called here, in the parent: the child only calls the function it found)
        return [sys.executable, "-c", _WATCHER, str(os.getpid())] + list(command), None
    parent = os.getpid()
    return list(command), lambda: die_with_parent(parent, CHILD_DEATH_SIGNAL)  # in the child, before exec


def _run_one(command, write):
    """Run a training command: stdout lines go to `write` as they come, stderr is kept; (exit code, run folder,
    stderr lines). The command ends with the sweep, even when the sweep is killed outright (_child_launch)."""
    command, preexec_fn = _child_launch(command)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            bufsize=1, env=dict(os.environ, PYTHONUNBUFFERED="1"), preexec_fn=preexec_fn)
    stderr = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    run_dir = None
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if run_dir is None and line.startswith("run folder: "):
                run_dir = line[len("run folder: "):].strip()
            write(line)
        proc.wait()
    except KeyboardInterrupt:  # the run got the same Ctrl-C: let it record itself as interrupted
        try:
            proc.wait(timeout=60)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            proc.kill()
        raise
    finally:
        reader.join(timeout=5)
    lines = [piece for chunk in stderr for piece in re.split(r"[\r\n]", chunk) if piece.strip()]
    return proc.returncode, run_dir, lines


def _error_of(stderr_lines, exit_code):
    errors = [line for line in stderr_lines if line.startswith("error:")]
    if errors:
        return errors[-1][len("error:"):].strip()
    tail = stderr_lines[-ERROR_TAIL_LINES:]
    return "\n".join(tail) if tail else f"exit code {exit_code}"


def run_sweep(sweep, script, experiments_dir, overwrite=False, dry_run=False, out=None):
    """Run the points not yet finished, one after another; returns the sweep (statuses filled in)."""
    from tqdm import tqdm  # ~25 ms: sweep.py --help imports this module (tqdm.write: lines past a bar)

    out = out or sys.stdout
    path = sweep_record_path(experiments_dir, sweep.name)
    check_folder_creatable(experiments_dir)
    if dry_run:
        load_previous(sweep, path, overwrite)
        for point in sweep.points:
            state = "finished: skipped" if point.status == "finished" else "would run"
            out.write(f"[{state}] {' '.join(command_of(sweep, point, script, experiments_dir))}\n")
        return sweep
    # one sweep of a name at a time: a second one (the same command in another terminal) is refused at once
    with exclusive_lock(os.path.join(experiments_dir, f".sweep_{sweep.name}.lock"), f"sweep {sweep.name} ({path})"):
        load_previous(sweep, path, overwrite)
        _run_points(sweep, script, experiments_dir, path, out, tqdm)
    return sweep


def _run_points(sweep, script, experiments_dir, path, out, tqdm):
    todo = [p for p in sweep.points if p.status != "finished"]
    os.makedirs(experiments_dir, exist_ok=True)
    save_record(sweep, path)
    done = len(sweep.points) - len(todo)
    if done:
        out.write(f"sweep {sweep.name}: {done} of {len(sweep.points)} runs already finished (skipped); "
                  f"{len(todo)} to run\n")
    bar = progress_bar(total=len(sweep.points), initial=done, unit="run", desc=f"sweep {sweep.name}",
                       file=sys.stderr, dynamic_ncols=True)
    try:
        for point in todo:
            def write(line):
                tqdm.write(line, file=out)
            write(f"== {sweep.name}: {point.label()} ({point.model_name})")
            start = time.perf_counter()
            point.status = "interrupted"  # until it returns
            try:
                code, run_dir, stderr = _run_one(command_of(sweep, point, script, experiments_dir), write)
            finally:
                point.seconds = time.perf_counter() - start
                save_record(sweep, path)
            point.exit_code, point.run_dir = code, run_dir or point.run_dir
            if code == 0 and run_dir and _run_finished(run_dir, point):  # the folder this very run printed
                point.status, point.error = "finished", None
            else:
                point.status, point.error = "failed", _error_of(stderr, code)
                write(f"== {point.label()} failed (exit code {code}): {point.error.splitlines()[-1]}; the sweep "
                      "goes on")
            save_record(sweep, path)
            bar.update(1)
    finally:
        bar.close()


def summary_lines(sweep):
    width = max(len(p.label()) for p in sweep.points)
    lines = [f"sweep {sweep.name}: " + ", ".join(f"{n} {s}" for s, n in _count(sweep.points))]
    for p in sweep.points:
        where = os.path.basename(p.run_dir) if p.run_dir else "no run folder"
        error = f": {p.error.splitlines()[-1]}" if p.status == "failed" and p.error else ""
        lines.append(f"  {p.label():<{width}}  {p.status:<11} {where}{error}")
    return lines


def _count(points):
    counts = {}
    for p in points:
        counts[p.status] = counts.get(p.status, 0) + 1
    return sorted(counts.items())


def sweep_run_dirs(sweep):
    """The run folders of the sweep's points that have one (its leaderboard)."""
    return [p.run_dir for p in sweep.points if p.run_dir and os.path.isdir(p.run_dir)]
