"""Benchmark rows from the Hugging Face Hub into data/evals/<task>.jsonl, one task at a time, and each task's few-shot
split (FEWSHOT_SPLIT, FEWSHOT_FILES: the rows --fewshot draws shots from) into data/evals/<task>.fewshot.jsonl.

Each task file (gptlab/evals/tasks/) names its dataset (HUB_REPO at REVISION), the split's parquet files (HUB_FILES,
a glob) and, for the built-ins, the sha256 of the rows as written here: one `json.dumps(row, ensure_ascii=False)`
line per parquet row, the dataset's own columns in its own order. The files come through huggingface_hub, so
HF_ENDPOINT (a mirror, with or without a path), HF_HUB_OFFLINE (the HF cache only), HF_HOME and the proxy variables
count as for any Hub download. The lines stream into a temporary file beside the target that takes its name only
once the checksum holds: a damaged, truncated or changed download is refused by the task's name, and a failure
midway leaves nothing. The few-shot split goes the same way, checked against FEWSHOT_SHA256 where a task pins one
(none of the built-ins does: their train rows were never at hand to take one from; REVISION pins them).
"""
import fnmatch
import hashlib
import json
import os
import sys

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write, check_folder_creatable, write_fix
from gptlab.core.progress import is_terminal
from gptlab.dataset.hellaswag_file import sha256_file
from gptlab.text.sources import cached_snapshot, describe_error, hub_logs_held, hub_unreachable, proxy_hint

DATA_DIR = os.path.join("data", "evals")  # where each task's rows go: data/evals/<task>.jsonl

DEFAULT_TIMEOUT_S = 10.0


def hub_error_fix(err, task):
    """What to do about a failed Hub request: wait, when the Hub is failing or rate-limiting (5xx, 429); check the
    task's repository and revision on another answer (404: no such repo, revision or file); else (no answer, a
    connection dropped midway) try again, through a proxy or mirror where one is needed."""
    from huggingface_hub import constants

    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(status, int) and (status >= 500 or status == 429):
        return f"the Hub answered HTTP {status}: try again later"
    if isinstance(status, int) and status >= 400:
        return f"the Hub answered HTTP {status}: check HUB_REPO and REVISION in {task.path}"
    return f"try again; {proxy_hint([constants.ENDPOINT])}"


class DownloadFailed(UserError):
    """A task's rows could not be fetched or failed their check (nothing was written)."""


class Part:
    """What one download writes: a task's scored split (fewshot False) or its few-shot split."""

    def __init__(self, task, fewshot=False):
        self.task, self.fewshot = task, fewshot
        self.pattern, self.sha256 = (task.FEWSHOT_FILES, task.FEWSHOT_SHA256) if fewshot else (task.HUB_FILES,
                                                                                              task.SHA256)
        self.files_field, self.sha_field = ("FEWSHOT_FILES", "FEWSHOT_SHA256") if fewshot else ("HUB_FILES", "SHA256")
        self.name = f"task {task.NAME}" + (f" (few-shot split {task.FEWSHOT_SPLIT})" if fewshot else "")

    def out(self, data_dir):
        return self.task.fewshot_path(data_dir) if self.fewshot else self.task.data_path(data_dir)


def _repo_files(part, timeout_s, offline):
    """(local paths of the part's parquet files, their repo paths): from the Hub into the HF cache, or offline from
    the cache alone."""
    task, name = part.task, part.name
    where = f"{task.HUB_REPO}@{task.REVISION}"
    if offline:
        folder = cached_snapshot(task.HUB_REPO, task.REVISION)
        paths = []
        for root, _, names in os.walk(folder) if folder else ():
            paths += [os.path.relpath(os.path.join(root, n), folder).replace(os.sep, "/") for n in names]
        files = sorted(p for p in paths if fnmatch.fnmatch(p, part.pattern))
        if not files:
            from huggingface_hub import constants
            raise DownloadFailed(f"{name}: {where} ({part.pattern}) is not in the HF cache "
                                 f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set; run once online, or unset "
                                 "HF_HUB_OFFLINE")
        return [os.path.join(folder, f) for f in files], files
    from huggingface_hub import HfApi, constants, hf_hub_download  # heavy (~0.3 s): only when downloading
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    problem = hub_unreachable(task.HUB_REPO, timeout_s, revision=task.REVISION)
    if problem:
        raise DownloadFailed(f"{name}: {problem}; {proxy_hint([constants.ENDPOINT])}; offline: "
                             "HF_HUB_OFFLINE=1 once the HF cache holds the files")
    try:
        with hub_logs_held():  # a 500 or 429 is retried, each retry logged: the failure is said once, below
            listed = HfApi().list_repo_files(task.HUB_REPO, repo_type="dataset", revision=task.REVISION)
    except Exception as err:  # no such repo or revision, an error page: the Hub's errors, all of them
        raise DownloadFailed(f"{name}: listing {where} via {constants.ENDPOINT} failed "
                             f"({describe_error(err)}); {hub_error_fix(err, task)}") from None
    files = sorted(p for p in listed if fnmatch.fnmatch(p, part.pattern))
    if not files:
        raise DownloadFailed(f"{name}: {where} has no file matching {part.files_field} {part.pattern!r} "
                             f"({len(listed)} files listed); fix {part.files_field} in {task.path}")
    quiet = not is_terminal(sys.stderr) and not are_progress_bars_disabled()
    if quiet:  # huggingface_hub's bar redraws with \r: fine on a terminal, not in a log
        disable_progress_bars()
    try:
        with hub_logs_held():
            local = [hf_hub_download(task.HUB_REPO, f, repo_type="dataset", revision=task.REVISION,
                                     etag_timeout=timeout_s) for f in files]
    except Exception as err:
        raise DownloadFailed(f"{name}: downloading {files[0]} of {where} failed ({describe_error(err)}); "
                             f"nothing was written; {hub_error_fix(err, task)}") from None
    finally:
        if quiet:
            enable_progress_bars()
    return local, files


def _lines(part, local, names, check_row):
    """The rows of the parquet files as JSON lines (bytes), each checked by check_row(task, row, where, fix) as
    evaluate.py will check it (the task's COLUMNS and their types), so a file it would refuse is never written."""
    import pyarrow.parquet as pq  # in requirements.txt; only for reading the download

    task = part.task
    fix = (f"it is not the dataset {task.path} describes; nothing was written; check HUB_REPO, {part.files_field} "
           f"and REVISION there, or its COLUMNS")
    first = None  # (file, its columns): every row written must have the same (evaluate.py checks it)
    for path, name in zip(local, names):
        try:
            table = pq.ParquetFile(path)
            missing = [c for c in task.COLUMNS if c not in table.schema_arrow.names]
            if missing:
                raise DownloadFailed(f"{part.name}: {name} of {task.HUB_REPO} has no column "
                                     f"{', '.join(missing)} (its columns: {', '.join(table.schema_arrow.names)}); "
                                     f"{fix}")
            first = first or (name, table.schema_arrow.names)
            if set(table.schema_arrow.names) != set(first[1]):
                raise DownloadFailed(f"{part.name}: {name} of {task.HUB_REPO} has the columns "
                                     f"{', '.join(table.schema_arrow.names)}, {first[0]} has {', '.join(first[1])}: "
                                     f"not one split; {fix}")
            index = 0
            for batch in table.iter_batches(batch_size=1024):
                for row in batch.to_pylist():
                    index += 1
                    where = f"{part.name}: {name} of {task.HUB_REPO} row {index}"
                    check_row(task, row, where, fix)
                    try:
                        line = json.dumps(row, ensure_ascii=False)
                    except (TypeError, ValueError) as err:  # bytes, a date: no JSON for them
                        raise DownloadFailed(f"{where} holds a value JSON cannot write ({describe_error(err)}); "
                                             f"{fix}") from None
                    yield (line + "\n").encode("utf-8")
        except DownloadFailed:
            raise
        except UserError as err:  # check_row's: a row evaluate.py would refuse
            raise DownloadFailed(str(err)) from None
        except Exception as err:  # pyarrow on a damaged or truncated file: whatever it raises
            raise DownloadFailed(f"{part.name}: {name} of {task.HUB_REPO} is damaged or truncated "
                                 f"({describe_error(err)}); nothing was written; download again (a damaged copy in "
                                 "the HF cache: delete it there)") from None


def fetch_task(task, data_dir, check_row, overwrite=False, timeout_s=DEFAULT_TIMEOUT_S, fewshot=False):
    """Write data_dir/<task>.jsonl (fewshot: data_dir/<task>.fewshot.jsonl, its few-shot split) from the Hub; returns
    (status, path, rows, source, sha256): status "present" (verified, or there and nothing pins it: kept), or
    "written". check_row: the evaluations' row check (gptlab.evals.task_spec.check_row, passed in: the evals stage
    reads the data stage, not the other way)."""
    part = Part(task, fewshot)
    out = part.out(data_dir)
    if os.path.isfile(out):
        if part.sha256 is None and not overwrite:  # nothing can verify it: kept as it is, fetched again on request
            return "present", out, None, None, None
        if part.sha256 and sha256_file(out) == part.sha256:
            return "present", out, None, None, part.sha256
        if not overwrite:
            raise UserError(f"{out} fails its checksum; pass --overwrite to download it again")
    elif os.path.exists(out):
        raise UserError(f"{out} exists and is not a file; move it, or choose another --data_dir")
    check_folder_creatable(os.path.dirname(os.path.abspath(out)))
    from huggingface_hub import constants  # reads HF_ENDPOINT, HF_HUB_OFFLINE, HF_HOME when imported

    offline = bool(constants.HF_HUB_OFFLINE)
    local, names = _repo_files(part, timeout_s, offline)
    digest, rows = hashlib.sha256(), 0
    try:
        with atomic_write(out, "wb", overwrite=True) as f:
            for line in _lines(part, local, names, check_row):
                digest.update(line)
                f.write(line)
                rows += 1
            if part.sha256 and digest.hexdigest() != part.sha256:
                raise DownloadFailed(
                    f"{part.name}: the {rows} rows of {task.HUB_REPO}@{task.REVISION} ({', '.join(names)}) have "
                    f"sha256 {digest.hexdigest()[:16]}..., expected {part.sha256[:16]}... ({part.sha_field} in "
                    f"{task.path}); nothing was written. The download is damaged or truncated, or the dataset "
                    "changed: download again, or pin REVISION to the commit the checksum was taken from")
    except OSError as err:
        raise UserError(f"could not write {out} ({err.strerror or err}); nothing half-written was left; "
                        f"{write_fix(err)}") from None
    source = f"hf://datasets/{task.HUB_REPO}@{task.REVISION}/{names[0]}" + (
        f" (+{len(names) - 1} more)" if len(names) > 1 else "")
    source += " (the HF cache; offline)" if offline else f" via {constants.ENDPOINT}"
    return "written", out, rows, source, digest.hexdigest()
