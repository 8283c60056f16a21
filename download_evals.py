"""Download the benchmark tasks' rows from the Hugging Face Hub into data/evals/<task>.jsonl (for evaluate.py), and
each task's few-shot split (the rows evaluate.py --fewshot K draws shots from) into data/evals/<task>.fewshot.jsonl.

    python download_evals.py --tasks core                      # every task of the core set
    python download_evals.py --tasks arc_easy,piqa
    HF_ENDPOINT=https://hf-mirror.example python download_evals.py --tasks all     # from a Hub mirror
    HF_HUB_OFFLINE=1 python download_evals.py --tasks core    # from the HF cache only

Each task file (gptlab/evals/tasks/) names the dataset, its revision, the split's parquet files and the sha256 of
the rows; a download whose rows fail it is refused by the task's name and nothing is written. A verified file already
there is skipped, and so is one that no checksum pins (--overwrite fetches it again). The few-shot splits pin no
checksum (REVISION only): the sha256 printed is the one to put in FEWSHOT_SHA256. HellaSwag in llm.c's layout (for
train_gpt.py) stays download_hellaswag.py's.
"""
from gptlab.core.cli import ArgumentParser, HelpFormatter, float_in, path
from gptlab.core.errors import UserError, run_cli
from gptlab.evals.task_spec import DATA_DIR

MAX_TIMEOUT_S = 86400


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--tasks", default="core", help="core, all, or task names separated by commas")
    p.add_argument("--data_dir", type=path, default=DATA_DIR, help="where the <task>.jsonl files go")
    p.add_argument("--tasks_dir", type=path, default=None,
                   help="a folder of your own task files, besides gptlab/evals/tasks/")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a file that fails its checksum (or one whose task pins none)")
    p.add_argument("--no_fewshot", action="store_true",
                   help="only the scored splits, not the few-shot splits (enough for evaluate.py --fewshot 0)")
    p.add_argument("--timeout", type=float_in(0, MAX_TIMEOUT_S, low_open=True), default=10.0,
                   help="network timeout in seconds")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gptlab.dataset.evals_download import DownloadFailed, fetch_task
    from gptlab.evals.task_spec import check_row, resolve_tasks

    tasks = resolve_tasks(args.tasks, args.tasks_dir)
    failed, failed_fewshot = [], []
    for task in tasks:
        parts = [False] + ([True] if task.fewshot_file() and not args.no_fewshot else [])
        for fewshot in parts:
            try:
                status, out, rows, source, sha = fetch_task(task, args.data_dir, check_row, args.overwrite,
                                                            args.timeout, fewshot)
            except DownloadFailed as err:  # the other tasks still come; this one is named at the end
                if len(tasks) == 1 and not fewshot:
                    raise
                print(f"failed: {err}", flush=True)
                (failed_fewshot if fewshot else failed).append(task.NAME)
                break
            print(report(task, fewshot, status, out, rows, source, sha), flush=True)
    problems = []
    if failed:
        problems.append(f"{len(failed)} of {len(tasks)} tasks could not be downloaded: {', '.join(failed)} (each "
                        "said why above); nothing was written for them")
    if failed_fewshot:
        problems.append(f"the few-shot rows of {', '.join(failed_fewshot)} could not be downloaded (said why above; "
                        "their scored rows were written, enough for --fewshot 0): download again, or pass "
                        "--no_fewshot")
    if problems:
        raise UserError("; ".join(problems))
    return 0


def report(task, fewshot, status, out, rows, source, sha):
    """The line printed for one file written or kept."""
    pinned = task.FEWSHOT_SHA256 if fewshot else task.SHA256
    what = f" (the few-shot split, {task.FEWSHOT_SPLIT})" if fewshot else ""
    if status == "present":
        if pinned:
            return f"{out}{what} is already there and verified (sha256 {pinned[:16]}...); nothing to do"
        return f"{out}{what} is already there; no checksum pins it, so it is kept as it is (--overwrite fetches it again)"
    if pinned:
        check = f"sha256 {pinned[:16]}... verified"
    else:
        field = "FEWSHOT_SHA256" if fewshot else "SHA256"
        check = f"no checksum pinned: REVISION {task.REVISION} only; sha256 {sha} (set {field} to pin it)"
    return f"wrote {out}{what}: {rows:,} rows from {source} ({check})"


if __name__ == "__main__":
    run_cli(main)
