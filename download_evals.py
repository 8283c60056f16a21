"""Download the benchmark tasks' rows from the Hugging Face Hub into data/evals/<task>.jsonl (for evaluate.py).

    python download_evals.py --tasks core                      # every task of the core set
    python download_evals.py --tasks arc_easy,piqa
    HF_ENDPOINT=https://hf-mirror.example python download_evals.py --tasks all     # from a Hub mirror
    HF_HUB_OFFLINE=1 python download_evals.py --tasks core    # from the HF cache only

Each task file (gptlab/evals/tasks/) names the dataset, its revision, the split's parquet files and the sha256 of
the rows; a download whose rows fail it is refused by the task's name and nothing is written. A task whose verified
file is already there is skipped. HellaSwag in llm.c's layout (for train_gpt.py) stays download_hellaswag.py's.
"""
from gptlab.core.cli import ArgumentParser, HelpFormatter, float_in
from gptlab.core.errors import UserError, run_cli
from gptlab.evals.task_spec import DATA_DIR

MAX_TIMEOUT_S = 86400


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--tasks", default="core", help="core, all, or task names separated by commas")
    p.add_argument("--data_dir", default=DATA_DIR, help="where the <task>.jsonl files go")
    p.add_argument("--tasks_dir", default=None, help="a folder of your own task files, besides gptlab/evals/tasks/")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a file that fails its checksum (or one whose task pins none)")
    p.add_argument("--timeout", type=float_in(0, MAX_TIMEOUT_S, low_open=True), default=10.0,
                   help="network timeout in seconds")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gptlab.data.evals_download import DownloadFailed, fetch_task
    from gptlab.evals.task_spec import resolve_tasks

    tasks = resolve_tasks(args.tasks, args.tasks_dir)
    failed = []
    for task in tasks:
        try:
            status, out, rows, source = fetch_task(task, args.data_dir, args.overwrite, args.timeout)
        except DownloadFailed as err:  # the other tasks still come; this one is named at the end
            if len(tasks) == 1:
                raise
            print(f"failed: {err}", flush=True)
            failed.append(task.NAME)
            continue
        if status == "present":
            print(f"{out} is already there and verified (sha256 {task.SHA256[:16]}...); nothing to do", flush=True)
        else:
            check = f"sha256 {task.SHA256[:16]}... verified" if task.SHA256 else "no checksum pinned"
            print(f"wrote {out}: {rows:,} rows from {source} ({check})", flush=True)
    if failed:
        raise UserError(f"{len(failed)} of {len(tasks)} tasks could not be downloaded: {', '.join(failed)} (each "
                        "said why above); nothing was written for them")
    return 0


if __name__ == "__main__":
    run_cli(main)
