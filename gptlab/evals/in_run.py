"""The benchmark suite inside a training run (train_gpt.py --evals): everything that can be refused is refused
before the first step, and every evaluation scores the same examples from the same files.

    evals = RunEvals("core", limit=200, data_dir="data/evals", encoding=tok.encoding)   # at start
    figures = evals.score(logits_fn, device=..., block=..., window=..., padded_vocab=..., ctx=ctx)

At start the task files are resolved, each task's rows read and checked, fingerprinted (FilePrints), rendered and
encoded; a missing file is refused naming download_evals.py. Before each evaluation the fingerprints are checked, so
a file replaced or modified mid-run stops the run with one error line. Scoring is gptlab.evals.suite.score_tasks,
the scorer evaluate.py uses: data-parallel over ranks with the same figures on 1 and N ranks.
"""
import os

from gptlab.core.errors import UserError
from gptlab.evals import suite as suite_mod
from gptlab.evals import task_spec
from gptlab.evals.file_prints import FilePrints

TASK_FIGURES = ("acc", "acc_norm", "centred", "gold_bpb")  # per task, in metrics.csv as evals_<task>_<figure>
SUITE_FIGURES = ("core", "gold_bpb")  # over the tasks, as evals_core and evals_gold_bpb


def metrics_columns(task_names):
    """The metrics.csv columns of a suite: evals_core, evals_gold_bpb, then evals_<task>_<figure> per task."""
    return [f"evals_{f}" for f in SUITE_FIGURES] + [f"evals_{name}_{f}" for name in task_names for f in TASK_FIGURES]


def metrics_row(figures):
    """The metrics.csv cells of one evaluation (figures: RunEvals.score's)."""
    row = {f"evals_{f}": figures[f] for f in SUITE_FIGURES}
    for name, task in figures["per_task"].items():
        row.update({f"evals_{name}_{f}": task[f] for f in TASK_FIGURES})
    return row


class RunEvals:
    """One run's suite: tasks, their files' fingerprints, and their requests, encoded once at start."""

    def __init__(self, spec, *, limit=None, data_dir=task_spec.DATA_DIR, tasks_dir=None, encoding=None):
        self.tasks = task_spec.resolve_tasks(spec, tasks_dir)
        self.limit, self.data_dir = limit, data_dir
        paths = [task.data_path(data_dir) for task in self.tasks]
        missing = [task.NAME for task, path in zip(self.tasks, paths) if not os.path.exists(path)]
        if missing:
            names = ",".join(missing)
            raise UserError(f"--evals: no downloaded rows for {names} in {data_dir}; download them first: python "
                            f"download_evals.py --tasks {names}" + (f" --data_dir {data_dir}"
                                                                     if data_dir != task_spec.DATA_DIR else "")
                            + " (or leave them out of --evals)")
        self.paths = dict(zip([t.NAME for t in self.tasks], paths))
        self.prints = FilePrints(paths)  # before reading: what is scored all run long is what was checked now
        self.prepared = {task.NAME: suite_mod.task_requests(task, 0, limit, data_dir)[1] for task in self.tasks}
        self.check_files()
        self.encoded = suite_mod.encode_requests(encoding, self.tasks, self.prepared) if encoding else None
        self.encoding = encoding

    def names(self):
        return [task.NAME for task in self.tasks]

    def check_files(self):
        for path in self.paths.values():
            self.prints.check(path)

    def score(self, logits_fn, *, device, block=1, window=None, padded_vocab=None, ctx=None, progress=False):
        """{"per_task": {task: its summary}, "core", "core_ci95", "gold_bpb", "gold_bpb_ci95", "tasks", "limit",
        "sequences", "seconds", "records": {task: [per-example record]}} of the model behind logits_fn (the same on
        every rank)."""
        self.check_files()
        records, summaries, suite = suite_mod.score_tasks(
            logits_fn, self.encoding, self.tasks, limit=self.limit, data_dir=self.data_dir, device=device,
            block=block, window=window, padded_vocab=padded_vocab, ctx=ctx, progress=progress,
            prepared=self.prepared, encoded=self.encoded)
        return {**suite, "per_task": summaries, "records": records}


def final_eval_dir(run_dir, step):
    """Where a run's last --evals evaluation writes its per-example files (evaluate.py's layout, so that
    `compare_experiments.py --evals RUN_A RUN_B` pairs two runs example by example): RUN/evals/in_run_step_<N>."""
    return os.path.join(run_dir, "evals", f"in_run_step_{step:06d}")


def write_final(run_dir, step, figures, meta):
    """The per-example files and summary.json of the run's last evaluation (rank 0; replaced by a resume that
    scores the last step again)."""
    summary = {k: v for k, v in figures.items() if k not in ("per_task", "records")}
    suite_mod.write_results(final_eval_dir(run_dir, step), figures["records"], figures["per_task"],
                            {**summary, "fewshot": 0}, {**meta, "step": step, "in_run": True}, overwrite=True)

