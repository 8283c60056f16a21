"""Benchmark tasks: one small Python file each in gptlab/evals/tasks/, found by listing that folder.

A task file (copy gptlab/evals/tasks/_template.py; docs/evals.md walks through one) defines:

    NAME             the task's name: the file's name without .py (lower case, digits, _)
    HUB_REPO         the Hugging Face dataset it downloads, e.g. "allenai/ai2_arc"
    HUB_CONFIG       its config (subset), or None
    HUB_SPLIT        the split scored, e.g. "validation"
    HUB_FILES        the split's parquet file(s) in the repo, a glob: "ARC-Easy/validation-*.parquet"
    REVISION         branch, tag or commit of the repo
    SHA256           sha256 of the rows as download_evals.py writes them (one json.dumps(row, ensure_ascii=False)
                     line each), or None: the download is then pinned by REVISION only
    COLUMNS          {column: type} every row must have (str, int, bool, list, dict)
    RANDOM_BASELINE  accuracy of a uniform guess: a number, or "uniform" (1 / number of choices, per example)
    render(row)      → {"context": str, or a list of str (one per choice, WinoGrande), "choices": [str],
                        "gold": index of the right choice}
Optional: KIND ("multiple_choice", default; or "greedy": one choice, right when the model's greedy tokens are
exactly it, as LAMBADA), TARGET_DELIMITER (" ": put between the context and each choice), FEWSHOT_DELIMITER
("\\n\\n": between shots), CORE (True: part of --tasks core).

A continuation scored is TARGET_DELIMITER + choice after its context (lm-eval's multiple_choice requests). With
--fewshot K, the context is K other rows of the same file, each rendered as its context + delimiter + its gold
choice, joined and followed by FEWSHOT_DELIMITER, then the row's own context (lm-eval's layout); the K rows are
drawn with a seed made of the task's name and the row's index, never the row itself.
"""
import importlib.util
import json
import os
import random
import re

from gptlab.core.errors import UserError
from gptlab.data.evals_download import DATA_DIR  # noqa: F401 (where the rows are: data/evals/<task>.jsonl)
from gptlab.data.hellaswag import not_a_file

TASKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")
REQUIRED = ("NAME", "HUB_REPO", "HUB_CONFIG", "HUB_SPLIT", "HUB_FILES", "REVISION", "SHA256", "COLUMNS",
            "RANDOM_BASELINE", "render")
DEFAULTS = {"KIND": "multiple_choice", "TARGET_DELIMITER": " ", "FEWSHOT_DELIMITER": "\n\n", "CORE": True}
KINDS = ("multiple_choice", "greedy")
COLUMN_TYPES = (str, int, bool, float, list, dict)
MAX_ROW_CHARS = 1_000_000  # far above any benchmark row (BoolQ's longest is ~5 kB): a longer line is a broken file
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class Task:
    """A loaded task spec: its fields as attributes (see the module's docstring) and `path`, the file."""

    def __init__(self, module, path):
        self.path = path
        for field in REQUIRED:
            setattr(self, field, getattr(module, field))
        for field, default in DEFAULTS.items():
            setattr(self, field, getattr(module, field, default))

    def data_path(self, data_dir=DATA_DIR):
        return os.path.join(data_dir, f"{self.NAME}.jsonl")

    def __repr__(self):
        return f"Task({self.NAME})"


def task_files(extra_dir=None):
    """{name: path} of every task file: the built-in folder's and extra_dir's (--tasks_dir). Files starting with _
    are not tasks (the template, __init__)."""
    files = {}
    for folder in [TASKS_DIR] + ([extra_dir] if extra_dir else []):
        if not os.path.isdir(folder):
            raise UserError(f"--tasks_dir {folder} is not a folder; give the folder that holds your task files")
        for n in sorted(os.listdir(folder)):
            if n.endswith(".py") and not n.startswith("_"):
                if n[:-3] in files:
                    raise UserError(f"task {n[:-3]} is defined twice ({files[n[:-3]]} and {os.path.join(folder, n)}); "
                                    "rename yours")
                files[n[:-3]] = os.path.join(folder, n)
    return files


def task_names(extra_dir=None):
    return sorted(task_files(extra_dir))


def _problem(module, name):
    """What is wrong with a task module's fields, or None."""
    missing = [f for f in REQUIRED if not hasattr(module, f)]
    if missing:
        return f"has no {', '.join(missing)}"
    if module.NAME != name:
        return f"has NAME {module.NAME!r}, but the file is {name}.py: they must be the same"
    for field in ("HUB_REPO", "HUB_SPLIT", "HUB_FILES", "REVISION"):
        if not isinstance(getattr(module, field), str) or not getattr(module, field):
            return f"{field} must be a non-empty string"
    if module.HUB_CONFIG is not None and not isinstance(module.HUB_CONFIG, str):
        return "HUB_CONFIG must be a string or None"
    if module.SHA256 is not None and not re.fullmatch(r"[0-9a-f]{64}", str(module.SHA256)):
        return "SHA256 must be 64 lower-case hex digits or None"
    if not (isinstance(module.COLUMNS, dict) and module.COLUMNS
            and all(isinstance(k, str) and v in COLUMN_TYPES for k, v in module.COLUMNS.items())):
        return "COLUMNS must be a non-empty {column name: str | int | bool | float | list | dict}"
    b = module.RANDOM_BASELINE
    if b != "uniform" and not (isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1):
        return f"RANDOM_BASELINE must be \"uniform\" or a number in [0, 1), got {b!r}"
    if not callable(module.render):
        return "render must be a function of a row"
    if getattr(module, "KIND", "multiple_choice") not in KINDS:
        return f"KIND must be one of {', '.join(KINDS)}"
    for field in ("TARGET_DELIMITER", "FEWSHOT_DELIMITER"):
        if not isinstance(getattr(module, field, ""), str):
            return f"{field} must be a string"
    return None


def load_task(name, extra_dir=None):
    """The Task of the file of that name; an unknown name or a spec with a missing or bad field is a UserError."""
    files = task_files(extra_dir)
    if name not in files:
        raise UserError(f"unknown task {name!r}; the tasks are {', '.join(sorted(files))} (add one: a file in "
                        f"{os.path.relpath(TASKS_DIR)}, see docs/evals.md)")
    path = files[name]
    if not _NAME.match(name):
        raise UserError(f"task file {path}: its name must be lower case letters, digits and _, starting with a "
                        "letter; rename it")
    spec = importlib.util.spec_from_file_location(f"gptlab_eval_task_{name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # the user's file: any error in it is theirs to fix
        raise UserError(f"task spec {path} does not load ({type(err).__name__}: {err}); fix the file") from None
    problem = _problem(module, name)
    if problem:
        raise UserError(f"task spec {path} {problem}; see {os.path.join(os.path.relpath(TASKS_DIR), '_template.py')}")
    return Task(module, path)


def resolve_tasks(text, extra_dir=None):
    """--tasks: "core" (the tasks with CORE = True), "all", or names separated by commas → [Task]."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise UserError("--tasks is empty; give core, all, or task names separated by commas")
    names = []
    for word in words:
        if word in ("core", "all"):
            tasks = [load_task(n, extra_dir) for n in task_names(extra_dir)]
            names += [t.NAME for t in tasks if word == "all" or t.CORE]
        else:
            names.append(word)
    return [load_task(n, extra_dir) for n in dict.fromkeys(names)]


# ---- rows

def check_row(task, row, where):
    """A UserError unless row is a JSON object with the task's COLUMNS of their types."""
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object (a row of {task.HUB_REPO}), got {type(row).__name__}")
    for column, kind in task.COLUMNS.items():
        if column not in row:
            raise UserError(f"{where}: no column {column!r} ({task.NAME} rows have {', '.join(task.COLUMNS)}); is it "
                            f"{task.NAME}'s file? re-download it: python download_evals.py --tasks {task.NAME} "
                            "--overwrite")
        value = row[column]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise UserError(f"{where}: column {column!r} must be {kind.__name__}, got {type(value).__name__}; "
                            f"re-download it: python download_evals.py --tasks {task.NAME} --overwrite")


def load_rows(task, data_dir=DATA_DIR):
    """The rows of the task's downloaded file, each checked against COLUMNS."""
    path = task.data_path(data_dir)
    problem = not_a_file(path)
    if problem == "does not exist":
        raise UserError(f"{path} not found; download it: python download_evals.py --tasks {task.NAME}")
    if problem:
        raise UserError(f"{path} {problem}; give the folder download_evals.py wrote (--data_dir)")
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(iter(lambda: f.readline(MAX_ROW_CHARS + 1), ""), 1):
                where = f"{path} line {line_no}"
                if len(line) > MAX_ROW_CHARS:
                    raise UserError(f"{where} is longer than {MAX_ROW_CHARS:,} characters; re-download it: "
                                    f"python download_evals.py --tasks {task.NAME} --overwrite")
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise UserError(f"{where}: not valid JSON ({err.msg}); re-download it: python download_evals.py "
                                    f"--tasks {task.NAME} --overwrite") from None
                check_row(task, row, where)
                rows.append(row)
    except (UnicodeDecodeError, OSError) as err:
        raise UserError(f"cannot read {path} ({err}); re-download it: python download_evals.py --tasks "
                        f"{task.NAME} --overwrite") from None
    if not rows:
        raise UserError(f"{path} holds no rows; re-download it: python download_evals.py --tasks {task.NAME} "
                        "--overwrite")
    return rows


# ---- rendering

def render(task, row, where):
    """task.render(row), checked: {"contexts": [str] (one per choice), "choices": [str], "gold": int}."""
    try:
        out = task.render(row)
    except Exception as err:  # the spec's code on a row it does not fit: name both
        raise UserError(f"{where}: {task.path}'s render failed on this row ({type(err).__name__}: {err}); the row "
                        "does not have the layout the spec expects") from None
    if not isinstance(out, dict) or not {"context", "choices", "gold"} <= set(out):
        raise UserError(f"{task.path}: render must return a dict with context, choices and gold")
    choices, gold, context = out["choices"], out["gold"], out["context"]
    if not (isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices)):
        raise UserError(f"{where}: {task.path}'s render gave choices that are not a non-empty list of strings")
    if task.KIND == "greedy" and len(choices) != 1:
        raise UserError(f"{where}: {task.path} is KIND greedy, so render must give exactly one choice")
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise UserError(f"{where}: {task.path}'s render gave gold {gold!r}, not an index of its {len(choices)} "
                        "choices")
    contexts = [context] * len(choices) if isinstance(context, str) else context
    if not (isinstance(contexts, list) and len(contexts) == len(choices) and all(isinstance(c, str) for c in contexts)):
        raise UserError(f"{where}: {task.path}'s render gave a context that is neither a string nor one string per "
                        "choice")
    return {"contexts": contexts, "choices": choices, "gold": gold}


def fewshot_indices(task, index, n_rows, k):
    """The k rows shown before row `index`: drawn with a seed of the task's name and the index, never index."""
    if k <= 0:
        return []
    if k > n_rows - 1:
        raise UserError(f"--fewshot {k} needs {k + 1} rows, but {task.NAME} has {n_rows}; use a smaller --fewshot")
    others = random.Random(f"{task.NAME}/{index}").sample(range(n_rows - 1), k)
    return [i if i < index else i + 1 for i in others]  # skip the row itself


def requests(task, rows, index, fewshot=0, rendered=None):
    """Row `index` as what is scored: {"contexts": [str], "continuations": [str], "choices": [str], "gold"}.
    rendered: a cache {index: render(...)} shared by the calls (few-shot rows are rendered once)."""
    rendered = {} if rendered is None else rendered

    def get(i):
        if i not in rendered:
            rendered[i] = render(task, rows[i], f"{task.NAME} row {i + 1}")
        return rendered[i]

    own = get(index)
    prefix = ""
    for i in fewshot_indices(task, index, len(rows), fewshot):
        shot = get(i)
        prefix += shot["contexts"][shot["gold"]] + task.TARGET_DELIMITER + shot["choices"][shot["gold"]]
        prefix += task.FEWSHOT_DELIMITER
    return {"contexts": [prefix + c for c in own["contexts"]],
            "continuations": [task.TARGET_DELIMITER + c for c in own["choices"]],
            "choices": own["choices"], "gold": own["gold"]}


def baseline(task, n_choices):
    """The random baseline of one example."""
    return 1.0 / n_choices if task.RANDOM_BASELINE == "uniform" else float(task.RANDOM_BASELINE)


def row_sha256_lines(rows):
    """The bytes download_evals.py writes for rows (and SHA256 is of): one json.dumps line per row."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")

