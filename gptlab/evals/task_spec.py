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
    COLUMNS          {column: type} every row must have (str, int, bool, float, list, dict); a tuple of them with
                     None, e.g. (str, None), for a column that may be null
    RANDOM_BASELINE  accuracy of a uniform guess: a number, or "uniform" (1 / number of choices, per example)
    render(row)      → {"context": str, or a list of str (one per choice, WinoGrande), "choices": [str],
                        "gold": index of the right choice}
Optional: KIND ("multiple_choice", default; or "greedy": one choice, right when the model's greedy tokens are
exactly it, as LAMBADA), TARGET_DELIMITER (" ": put between the context and each choice), FEWSHOT_DELIMITER
("\\n\\n": after each shot), CORE (True: part of --tasks core; False by default: a task joins
the lab's fixed suite only when its file says so), and the few-shot source (--fewshot K):

    FEWSHOT_SPLIT    the split shots come from, as lm-eval's task of the same name draws them (its fewshot_split,
                     else training_split, else validation_split), or None (default): the task has none, and
                     --fewshot K > 0 on it is refused
    FEWSHOT_FILES    that split's parquet file(s), a glob (None when FEWSHOT_SPLIT is HUB_SPLIT: the scored rows
                     are the shots' pool); download_evals.py writes them to data/evals/<task>.fewshot.jsonl
    FEWSHOT_SHA256   sha256 of that file as download_evals.py writes it, or None: pinned by REVISION only
    FEWSHOT_EXCLUDE_SELF  True (default): each row's K shots are the first K of K + 1 drawn once every row equal to
                     the row itself is removed (lm-eval passes the row as eval_doc when its fewshot split is its
                     test_split, both unset included); False: K drawn (lm-eval's arc_easy, arc_challenge and
                     openbookqa, whose test_split is another split). True whenever FEWSHOT_SPLIT is HUB_SPLIT.
    FEWSHOT_TARGET_DELIMITER  between a shot's context and its answer (default: TARGET_DELIMITER)
    FEWSHOT_SAMPLER  "default" (lm-eval's default sampler: drawn at random, as below) or "first_n" (lm-eval's
                     fewshot_config sampler first_n, as MMLU's: the first K rows of the split, in order, less every
                     copy of the row itself under FEWSHOT_EXCLUDE_SELF)
    KEEP_ROW         a function of a row: False leaves the row out of the examples and of the shots' pool
                     (lm-eval's process_docs where it filters the rows, as winogender_male's); None (default): all
    DESCRIPTION      lm-eval's description: text put once before the shots and the row's context ("" by default), or
                     a function of the row giving it (where lm-eval's description is a template of the row)
    LM_EVAL          lm-eval's task file this task renders as, under lm_eval/tasks/ (e.g. "sciq/sciq.yaml"), or
                     None (default): bench/bench_evals.py times and checks the task against it
    LM_EVAL_OVERRIDES  keys of that file to replace where our rows' columns are not its dataset's (boolq's
                     doc_to_target: google/boolq's answer for super_glue's label), or None

A continuation scored is TARGET_DELIMITER + choice after its context (lm-eval's multiple_choice requests). With
--fewshot K, the context is DESCRIPTION, then K rows of the few-shot split, each rendered as its context +
FEWSHOT_TARGET_DELIMITER + its gold choice + FEWSHOT_DELIMITER, then the row's own context (lm-eval's layout); the
rows are drawn as lm-eval 0.4.13's samplers draw them (fewshot_draws): its default one with one random.Random(1234)
per task, over the scored rows in order, so that on the same rows our K-shot contexts are lm-eval's byte for byte.
"""
import importlib.util
import itertools
import json
import os
import random
import re

from gptlab.core.errors import UserError
from gptlab.dataset.evals_download import DATA_DIR  # noqa: F401 (where the rows are: data/evals/<task>.jsonl)
from gptlab.dataset.hellaswag_file import not_a_file

TASKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tasks")
REQUIRED = ("NAME", "HUB_REPO", "HUB_CONFIG", "HUB_SPLIT", "HUB_FILES", "REVISION", "SHA256", "COLUMNS",
            "RANDOM_BASELINE", "render")
DEFAULTS = {"KIND": "multiple_choice", "TARGET_DELIMITER": " ", "FEWSHOT_DELIMITER": "\n\n", "CORE": False,
            "FEWSHOT_SPLIT": None, "FEWSHOT_FILES": None, "FEWSHOT_SHA256": None, "FEWSHOT_EXCLUDE_SELF": True,
            "FEWSHOT_TARGET_DELIMITER": None, "FEWSHOT_SAMPLER": "default", "DESCRIPTION": "",
            "KEEP_ROW": None, "LM_EVAL": None, "LM_EVAL_OVERRIDES": None}
FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed (lm_eval.evaluator.simple_evaluate)
KINDS = ("multiple_choice", "greedy")
SAMPLERS = ("default", "first_n")  # lm-eval 0.4.13's samplers that draw (its balanced and manual ones raise)
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
        if self.FEWSHOT_TARGET_DELIMITER is None:
            self.FEWSHOT_TARGET_DELIMITER = self.TARGET_DELIMITER

    def data_path(self, data_dir=DATA_DIR):
        return os.path.join(data_dir, f"{self.NAME}.jsonl")

    def fewshot_file(self):
        """Whether the shots come from a file of their own (FEWSHOT_SPLIT set and not the split scored)."""
        return self.FEWSHOT_SPLIT is not None and self.FEWSHOT_SPLIT != self.HUB_SPLIT

    def fewshot_path(self, data_dir=DATA_DIR):
        """The few-shot split's rows: <task>.fewshot.jsonl (a task's name has no dot: never another task's file)."""
        return os.path.join(data_dir, f"{self.NAME}.fewshot.jsonl")

    def __repr__(self):
        return f"Task({self.NAME})"


def task_files(extra_dir=None):
    """{name: path} of every task file: the built-in folder's and extra_dir's (--tasks_dir). Files starting with _
    are not tasks (the template, __init__)."""
    files = {}
    for folder in [TASKS_DIR] + ([extra_dir] if extra_dir else []):
        if not os.path.isdir(folder):
            raise UserError(f"--tasks_dir {folder} is not a folder; give the folder that holds your task files")
        if folder is extra_dir and os.path.samefile(folder, TASKS_DIR):  # else: every task "defined twice"
            raise UserError(f"--tasks_dir {folder} is the built-in tasks' folder, always read; drop --tasks_dir, or "
                            "give a folder of your own task files")
        for n in sorted(os.listdir(folder)):
            if n.endswith(".py") and not n.startswith("_"):
                if n[:-3] in files:
                    raise UserError(f"task {n[:-3]} is defined twice ({files[n[:-3]]} and {os.path.join(folder, n)}); "
                                    f"rename yours: another file name, and the same name as its NAME (e.g. "
                                    f"{n[:-3]}_mine.py with NAME = \"{n[:-3]}_mine\")")
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
            and all(isinstance(k, str) and _column_kinds(v) for k, v in module.COLUMNS.items())):
        return ("COLUMNS must be a non-empty {column name: str | int | bool | float | list | dict, or a tuple of them "
                "with None for a column that may be null, e.g. (str, None)}")
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
    if not isinstance(getattr(module, "CORE", False), bool):
        return "CORE must be True or False"
    keep = getattr(module, "KEEP_ROW", None)
    if keep is not None and not callable(keep):
        return "KEEP_ROW must be a function of a row giving True or False, or None"
    description = getattr(module, "DESCRIPTION", "")
    if not (isinstance(description, str) or callable(description)):
        return "DESCRIPTION must be a string or a function of a row giving one"
    lm_file, overrides = getattr(module, "LM_EVAL", None), getattr(module, "LM_EVAL_OVERRIDES", None)
    if lm_file is not None and not (isinstance(lm_file, str) and lm_file.endswith(".yaml")):
        return (f"LM_EVAL must be the path of an lm-eval task file under lm_eval/tasks/ (\"sciq/sciq.yaml\") or "
                f"None, got {lm_file!r}")
    if overrides is not None and not (isinstance(overrides, dict) and all(isinstance(k, str) for k in overrides)):
        return "LM_EVAL_OVERRIDES must be a dict of lm-eval task-file keys to values, or None"
    if overrides and lm_file is None:
        return "sets LM_EVAL_OVERRIDES but LM_EVAL is None; name the lm-eval task file they change"
    return _fewshot_problem(module)


def _fewshot_problem(module):
    """What is wrong with a task module's FEWSHOT_* fields, or None."""
    split, files = getattr(module, "FEWSHOT_SPLIT", None), getattr(module, "FEWSHOT_FILES", None)
    sha, exclude = getattr(module, "FEWSHOT_SHA256", None), getattr(module, "FEWSHOT_EXCLUDE_SELF", True)
    if split is not None and not (isinstance(split, str) and split):
        return "FEWSHOT_SPLIT must be a non-empty string or None"
    if files is not None and not (isinstance(files, str) and files):
        return "FEWSHOT_FILES must be a non-empty string or None"
    if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", str(sha)):
        return "FEWSHOT_SHA256 must be 64 lower-case hex digits or None"
    if not isinstance(exclude, bool):
        return "FEWSHOT_EXCLUDE_SELF must be True or False"
    delimiter = getattr(module, "FEWSHOT_TARGET_DELIMITER", None)
    if delimiter is not None and not isinstance(delimiter, str):
        return "FEWSHOT_TARGET_DELIMITER must be a string or None"
    sampler = getattr(module, "FEWSHOT_SAMPLER", "default")
    if sampler not in SAMPLERS:
        return (f"FEWSHOT_SAMPLER must be one of {', '.join(SAMPLERS)} (lm-eval's fewshot_config sampler), got "
                f"{sampler!r}")
    if split is None and (files is not None or sha is not None):
        return "sets FEWSHOT_FILES or FEWSHOT_SHA256 but FEWSHOT_SPLIT is None; name the split they are of"
    if split is not None and split == module.HUB_SPLIT:
        if files is not None or sha is not None:
            return (f"FEWSHOT_SPLIT is HUB_SPLIT ({split}): the scored rows are the shots' pool, so FEWSHOT_FILES "
                    "and FEWSHOT_SHA256 must be None")
        if not exclude:
            return "FEWSHOT_SPLIT is HUB_SPLIT, so FEWSHOT_EXCLUDE_SELF must be True (a row is never its own shot)"
    elif split is not None and files is None:
        return f"FEWSHOT_SPLIT is {split!r} but FEWSHOT_FILES is None; give that split's parquet file(s), a glob"
    return None


def _column_kinds(kind):
    """A COLUMNS value as a tuple of types (None: null allowed), or None when it is not one."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if kinds and all(k is None or k in COLUMN_TYPES for k in kinds) and any(k is not None for k in kinds):
        return kinds
    return None


def load_task(name, extra_dir=None):
    """The Task of the file of that name; an unknown name or a spec with a missing or bad field is a UserError."""
    files = task_files(extra_dir)
    if name not in files:
        where = f"{extra_dir} (your --tasks_dir)" if extra_dir else f"{_shown(TASKS_DIR)}, or in a folder of your " \
            "own passed as --tasks_dir"
        raise UserError(f"unknown task {name!r}; the tasks are {', '.join(sorted(files))} (add one: a file {name}.py "
                        f"in {where}; see docs/evals.md, \"Add a task\")")
    path = files[name]
    if not _NAME.match(name):
        raise UserError(f"task file {path}: its name must be lower case letters, digits and _, starting with a "
                        "letter; rename it")
    spec = importlib.util.spec_from_file_location(f"gptlab_eval_task_{name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as err:  # the user's file: any error in it (sys.exit too) is theirs to fix
        raise UserError(f"task spec {path} does not load ({type(err).__name__}: {err}); fix the file") from None
    problem = _problem(module, name)
    if problem:
        template = _shown(os.path.join(TASKS_DIR, "_template.py"))
        if not hasattr(module, "NAME") and not hasattr(module, "render"):  # a helper, not a task
            raise UserError(f"{path} is in a tasks folder but is no task file (no NAME, no render): a task is one "
                            f"file (copy what it needs into it, see {template}); rename a file that is no task to "
                            f"start with _, or move it out")
        raise UserError(f"task spec {path} {problem}; see {template}")
    return Task(module, path)


def resolve_tasks(text, extra_dir=None):
    """--tasks: "core" (the tasks with CORE = True), "all", or names separated by commas → [Task]."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise UserError("--tasks is empty; give core, all, or task names separated by commas")
    repeated = sorted({w for w in words if words.count(w) > 1})
    if repeated:  # a slip (copa,copa): scoring it once would hide it, twice would count it twice in core
        raise UserError(f"--tasks names {', '.join(repeated)} more than once; give each task once")
    names = []
    for word in words:
        if word in ("core", "all"):
            tasks = [load_task(n, extra_dir) for n in task_names(extra_dir)]
            names += [t.NAME for t in tasks if word == "all" or t.CORE]
        else:
            names.append(word)
    return [load_task(n, extra_dir) for n in dict.fromkeys(names)]


# ---- rows

def download_command(task, data_dir=DATA_DIR, overwrite=False):
    """The download_evals.py line that (re)writes the task's files where they are read: its --data_dir when not the
    default, and --tasks_dir for a task of the user's folder (else download_evals.py would not know the task)."""
    line = f"python download_evals.py --tasks {task.NAME}"
    if os.path.dirname(os.path.abspath(task.path)) != TASKS_DIR:
        line += f" --tasks_dir {os.path.dirname(task.path)}"
    if os.path.normpath(data_dir) != os.path.normpath(DATA_DIR):
        line += f" --data_dir {data_dir}"
    return line + (" --overwrite" if overwrite else "")


def check_row(task, row, where, fix=None):
    """A UserError unless row is a JSON object with the task's COLUMNS of their types; fix: how to get a good file
    (download_command's line for the default folder when not given)."""
    fix = fix or f"re-download it: {download_command(task, overwrite=True)}"
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object (a row of {task.HUB_REPO}), got {type(row).__name__}")
    for column, kind in task.COLUMNS.items():
        if column not in row:
            raise UserError(f"{where}: no column {column!r} ({task.NAME} rows have {', '.join(task.COLUMNS)}); is it "
                            f"{task.NAME}'s file? {fix}")
        value = row[column]
        kinds = _column_kinds(kind)
        if not any(_is(value, k) for k in kinds):
            want = " or ".join("null" if k is None else k.__name__ for k in kinds)
            got = "null" if value is None else type(value).__name__
            how = fix
            if value is None:  # a dataset may hold nulls in a column: the spec can allow them
                allowed = ", ".join(k.__name__ for k in kinds)
                how = (f"if the dataset has nulls in that column, allow them in {task.path}: COLUMNS[{column!r}] = "
                       f"({allowed}, None); else {fix}")
            raise UserError(f"{where}: column {column!r} must be {want}, got {got}; {how}")


def _is(value, kind):
    """Whether a JSON value is of a COLUMNS type (None: null; float takes ints too, int takes no bool)."""
    if kind is None:
        return value is None
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def load_rows(task, data_dir=DATA_DIR, fewshot=False):
    """The rows of the task's downloaded file (fewshot: of its few-shot split's file), each checked against COLUMNS
    and against the first row's columns (download_evals.py writes every row with the dataset's columns)."""
    path = task.fewshot_path(data_dir) if fewshot else task.data_path(data_dir)
    problem = not_a_file(path)
    if problem == "does not exist":
        what = (f": {task.NAME}'s few-shot rows (its {task.FEWSHOT_SPLIT} split), which --fewshot needs" if fewshot
                else "")
        raise UserError(f"{path} not found{what}; download {'them' if fewshot else 'it'}: "
                        f"{download_command(task, data_dir)}")
    if problem:
        raise UserError(f"{path} {problem}; give the folder download_evals.py wrote (--data_dir)")
    fix = f"re-download it: {download_command(task, data_dir, overwrite=True)}"
    rows, columns = [], None
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(iter(lambda: f.readline(MAX_ROW_CHARS + 1), ""), 1):
                where = f"{path} line {line_no}"
                if len(line) > MAX_ROW_CHARS:
                    raise UserError(f"{where} is longer than {MAX_ROW_CHARS:,} characters; {fix}")
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError) as err:  # bad JSON; an int of 5,000 digits; [[[... too deep
                    why = err.msg if isinstance(err, json.JSONDecodeError) else (
                        "nested too deep" if isinstance(err, RecursionError) else str(err)[:100])
                    raise UserError(f"{where}: not valid JSON ({why}); {fix}") from None
                check_row(task, row, where, fix)
                if columns is None:
                    columns, first = list(row), line_no
                elif set(row) != set(columns):  # a row of another file or schema pasted in
                    extra = [c for c in row if c not in columns]
                    missing = [c for c in columns if c not in row]
                    diff = "; ".join(f"{what} {', '.join(map(repr, cs))}" for what, cs in
                                     (("extra", extra), ("missing", missing)) if cs)
                    raise UserError(f"{where}: its columns differ from line {first}'s ({diff}); every row of a "
                                    f"download has the same columns: {fix}")
                if task.KEEP_ROW is None or _kept(task, row, where):
                    rows.append(row)
    except (UnicodeDecodeError, OSError) as err:
        raise UserError(f"cannot read {path} ({err}); {fix}") from None
    if not rows:
        if task.KEEP_ROW is not None:
            raise UserError(f"{path}: {task.path}'s KEEP_ROW keeps none of its rows; check KEEP_ROW, or that the "
                            "file is this task's")
        raise UserError(f"{path} holds no rows; {fix}")
    return rows


def _spec_call(task, field, row, where):
    """The task file's function `field` on a row; any error in it is a UserError naming both."""
    try:
        return getattr(task, field)(row)
    except (Exception, SystemExit) as err:  # the spec's code on a row it does not fit (sys.exit too): name both
        raise UserError(f"{where}: {task.path}'s {field} failed on this row ({type(err).__name__}: {err}); the row "
                        "does not have the layout the spec expects") from None


def _kept(task, row, where):
    """KEEP_ROW(row), checked: lm-eval's process_docs where it filters the rows."""
    keep = _spec_call(task, "KEEP_ROW", row, where)
    if not isinstance(keep, bool):
        raise UserError(f"{where}: {task.path}'s KEEP_ROW gave {type(keep).__name__}; it must give True (score the "
                        "row) or False (leave it out)")
    return keep


# ---- rendering

def render(task, row, where):
    """task.render(row), checked: {"contexts": [str] (one per choice), "choices": [str], "gold": int}."""
    out = _spec_call(task, "render", row, where)
    shape = 'return {"context": str, "choices": [str], "gold": the right choice\'s index}'
    if not isinstance(out, dict) or not {"context", "choices", "gold"} <= set(out):
        got = f"a dict with {', '.join(map(str, out)) or 'no keys'}" if isinstance(out, dict) else type(out).__name__
        raise UserError(f"{where}: {task.path}'s render gave {got}; {shape}")
    choices, gold, context = out["choices"], out["gold"], out["context"]
    if not (isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices)):
        bad = [type(c).__name__ for c in choices if not isinstance(c, str)] if isinstance(choices, list) else []
        got = (type(choices).__name__ if not isinstance(choices, list)
               else f"a list holding {bad[0]}" if bad else "an empty list")
        raise UserError(f"{where}: {task.path}'s render gave choices as {got}; give a non-empty list of strings "
                        "(list(...) of a tuple or an array, str(...) of a number)")
    if task.KIND == "greedy" and len(choices) != 1:
        raise UserError(f"{where}: {task.path} is KIND greedy, so render must give exactly one choice")
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        hint = "" if isinstance(gold, int) and not isinstance(gold, bool) else (
            " (an answer given as text or a letter: its position, e.g. choices.index(answer) or "
            "\"ABCD\".index(letter); a number in a string: int(...))")
        raise UserError(f"{where}: {task.path}'s render gave gold {gold!r}, not an index of its {len(choices)} "
                        f"choices; gold must be the right choice's index, an int from 0 to {len(choices) - 1}{hint}")
    contexts = [context] * len(choices) if isinstance(context, str) else context
    if not (isinstance(contexts, list) and len(contexts) == len(choices) and all(isinstance(c, str) for c in contexts)):
        raise UserError(f"{where}: {task.path}'s render gave a context that is neither a string nor one string per "
                        f"choice; give one string, or a list of {len(choices)} (one per choice, as WinoGrande's)")
    return {"contexts": contexts, "choices": choices, "gold": gold}


def _shown(path):
    """A path as a message shows it: relative to here when under here, else as it is."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def check_fewshot(tasks, k):
    """A UserError naming the tasks that have no few-shot split, when k > 0."""
    without = [t for t in tasks if t.FEWSHOT_SPLIT is None]
    if k > 0 and without:
        names = ", ".join(t.NAME for t in without)
        raise UserError(f"--fewshot {k}: task {names} {'has' if len(without) == 1 else 'have'} no few-shot split "
                        f"(FEWSHOT_SPLIT is None in {', '.join(_shown(t.path) for t in without)}: its "
                        "lm-eval task draws no shots but from the rows it scores, or is 0-shot only); score it with "
                        "--fewshot 0, or leave it out of --tasks")


def fewshot_pool(task, rows, k, data_dir=DATA_DIR):
    """The rows shots are drawn from for --fewshot k: the scored rows themselves when FEWSHOT_SPLIT is HUB_SPLIT,
    else the few-shot file's; [] when k is 0. A task without a few-shot split is a UserError."""
    if k <= 0:
        return []
    check_fewshot([task], k)
    return load_rows(task, data_dir, fewshot=True) if task.fewshot_file() else rows


def fewshot_draws(task, rows, pool, k, seed=FEWSHOT_SEED):
    """[[index into pool] per row of rows]: the k shots of each scored row, drawn as lm-eval 0.4.13's default
    ContextSampler draws them: one random.Random(seed) for the task, drawing for the rows in their order (so --limit N
    gives the first N rows what a full run gives them). With FEWSHOT_EXCLUDE_SELF: k + 1 drawn, every one equal to the
    row removed, the first k kept; fewer than k left (the pool holds copies of the row), k drawn again from the pool
    without them. Without: k drawn. random.sample picks the same positions from range(n) as from any n items."""
    if k <= 0:
        return [[] for _ in rows]
    exclude = task.FEWSHOT_EXCLUDE_SELF
    if task.FEWSHOT_SAMPLER == "first_n":
        return _first_n(task, rows, pool, k)
    need = k + 1 if exclude else k
    if len(pool) < need:
        where = "rows" if task.fewshot_file() else "rows (its few-shot split is the split scored)"
        raise UserError(f"--fewshot {k} draws {need} rows per example, but {task.NAME}'s {task.FEWSHOT_SPLIT} split "
                        f"has {len(pool)} {where}; use a smaller --fewshot")
    rnd = random.Random(seed)
    everything = range(len(pool))
    draws = []
    for i, row in enumerate(rows):
        if not exclude:
            draws.append(rnd.sample(everything, k))
            continue
        kept = [j for j in rnd.sample(everything, k + 1) if pool[j] != row][:k]
        if len(kept) < k:
            others = [j for j in everything if pool[j] != row]
            if len(others) < k:
                raise UserError(f"--fewshot {k}: {task.NAME} row {i + 1} has only {len(others)} other rows in its "
                                f"{task.FEWSHOT_SPLIT} split to draw shots from; use a smaller --fewshot")
            kept = rnd.sample(others, k)
        draws.append(kept)
    return draws


def _first_n(task, rows, pool, k):
    """lm-eval's FirstNSampler: the first k rows of the pool, in order, every copy of the row itself removed first
    when it passes the row as eval_doc (FEWSHOT_EXCLUDE_SELF)."""
    draws = []
    for i, row in enumerate(rows):  # the pool scanned only as far as k shots (a scored split as pool: 10k rows)
        kept = list(itertools.islice((j for j in range(len(pool))
                                      if not (task.FEWSHOT_EXCLUDE_SELF and pool[j] == row)), k))
        if len(kept) < k:
            others = " other" if task.FEWSHOT_EXCLUDE_SELF else ""
            raise UserError(f"--fewshot {k}: {task.NAME} row {i + 1} has only {len(kept)}{others} rows in its "
                            f"{task.FEWSHOT_SPLIT} split to take its shots from; use a smaller --fewshot")
        draws.append(kept)
    return draws


def description(task, row, where):
    """The text put before a row's shots and context: DESCRIPTION, or what it gives for the row."""
    if not callable(task.DESCRIPTION):
        return task.DESCRIPTION
    text = _spec_call(task, "DESCRIPTION", row, where)
    if not isinstance(text, str):
        raise UserError(f"{where}: {task.path}'s DESCRIPTION gave {type(text).__name__}, not a string")
    return text


def _renderer(task, rows, cache, what):
    def get(i):
        if i not in cache:
            cache[i] = render(task, rows[i], f"{task.NAME} {what}row {i + 1}")
        return cache[i]
    return get


def requests(task, rows, index, shots=(), pool=None, rendered=None, pool_rendered=None):
    """Row `index` as what is scored: {"contexts": [str], "continuations": [str], "choices": [str], "gold"}.
    shots: indices into pool (fewshot_draws'), shown before it; rendered, pool_rendered: caches {index: render(...)}
    shared by the calls (pool_rendered is rendered when the pool is the rows themselves)."""
    rendered = {} if rendered is None else rendered
    pool_rendered = {} if pool_rendered is None else pool_rendered
    own = _renderer(task, rows, rendered, "")(index)
    shot_of = _renderer(task, pool, pool_rendered, "few-shot " if pool is not rows else "") if shots else None
    prefix = description(task, rows[index], f"{task.NAME} row {index + 1}")  # lm-eval's, before the shots
    for i in shots:
        shot = shot_of(i)
        prefix += (shot["contexts"][shot["gold"]] + task.FEWSHOT_TARGET_DELIMITER + shot["choices"][shot["gold"]]
                   + task.FEWSHOT_DELIMITER)
    return {"contexts": [prefix + c for c in own["contexts"]],
            "continuations": [task.TARGET_DELIMITER + c for c in own["choices"]],
            "choices": own["choices"], "gold": own["gold"]}


def baseline(task, n_choices):
    """The random baseline of one example."""
    return 1.0 / n_choices if task.RANDOM_BASELINE == "uniform" else float(task.RANDOM_BASELINE)


def row_sha256_lines(rows):
    """The bytes download_evals.py writes for rows (and SHA256 is of): one json.dumps line per row."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")

