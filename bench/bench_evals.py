"""Benchmark: evaluate.py against lm-eval-harness (`lm_eval --model hf`) on the same model, tasks and examples, as
whole processes on this machine, in one run: the wall-time ratio and the largest per-example log-likelihood
difference.

    python bench/bench_evals.py experiments/RUN/checkpoints/step_000120.pt --limit 50
    python bench/bench_evals.py CKPT --tasks arc_easy,piqa --limit 200 --batch_sizes auto 1 8 32

The checkpoint is exported once with export_hf.py (not timed). Ours: `python evaluate.py CKPT --tasks ... --limit N`.
lm-eval: `lm_eval --model hf --model_args pretrained=HF,trust_remote_code=True,add_bos_token=True,max_length=2048,
dtype=float32 --device cpu --tasks ... --limit N --batch_size B --log_samples`, once per --batch_sizes value (the
fastest is the figure), its tasks lm-eval's own task files (same rendering) pointed at our data/evals files: a task
file per task that includes lm-eval's and sets `dataset_path: json` with `data_files` (HF_DATASETS_OFFLINE=1, no
network). add_bos_token=True because our sequences start with <|endoftext|> (docs/evals.md). Each process is timed
from its start to its exit, imports and model loading included, as a user waits for it; its CPU time (user +
system) is printed beside, a steadier figure when other jobs share the cores. Figures: docs/evals.md.
"""
import contextlib
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser, HelpFormatter, non_negative_int, path, positive_int  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402


def build_parser():
    from gptlab.evals.task_spec import DATA_DIR

    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("checkpoint", help="a train_gpt.py checkpoint (.pt)")
    p.add_argument("--tasks", default=None,
                   help="tasks separated by commas (default: every task lm-eval defines whose rows are downloaded)")
    p.add_argument("--limit", type=positive_int, default=50, help="the first N examples of each task")
    p.add_argument("--batch_sizes", nargs="+", default=["auto", "1", "8", "32"],
                   help="lm-eval's --batch_size values to try (the fastest counts)")
    p.add_argument("--data_dir", type=path, default=DATA_DIR, help="where download_evals.py wrote the tasks' rows")
    p.add_argument("--tasks_dir", type=path, default=None,
                   help="a folder of your own task files (as evaluate.py's): those with LM_EVAL are timed too")
    p.add_argument("--work_dir", default=None, help="folder for the export and the outputs (default: a temporary one)")
    p.add_argument("--referee", type=non_negative_int, default=3,
                   help="the examples (those furthest apart) whose continuations are scored again in float64, each "
                        "sequence alone, to tell whose float32 rounding a difference is (0: none)")
    return p


def timed(args, env=None):
    """(wall seconds, CPU seconds, CompletedProcess) of a whole process; a failure is a UserError with its last
    lines. CPU seconds (user + system, the process and the children it waited for) move less than the wall time
    when other jobs share the cores."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise UserError(f"{' '.join(map(str, args[:3]))} ... failed (exit {proc.returncode}):\n{tail}")
    return seconds, cpu, proc


def lm_eval_file(task):
    """The lm-eval task file a task names (LM_EVAL), under the installed lm_eval's tasks folder."""
    import lm_eval

    return os.path.join(os.path.dirname(lm_eval.__file__), "tasks", task.LM_EVAL)


def lm_eval_version():
    from importlib.metadata import version

    return version("lm_eval")


def lm_eval_task_files(folder, tasks, data_dir):
    """One lm-eval task file per task: lm-eval's own, reading our downloaded file of the split we score."""
    import yaml

    os.makedirs(folder, exist_ok=True)
    names = {}
    for task in tasks:
        split = task.HUB_SPLIT
        cfg = {"include": lm_eval_file(task), "task": f"gptlab_{task.NAME}",
               "tag": [], "dataset_path": "json", "dataset_name": None,
               "dataset_kwargs": {"data_files": {split: os.path.abspath(task.data_path(data_dir))}},
               "training_split": None, "validation_split": None, "test_split": None, "fewshot_split": None,
               f"{split}_split": split, **(task.LM_EVAL_OVERRIDES or {})}
        with open(os.path.join(folder, f"gptlab_{task.NAME}.yaml"), "w") as f:
            yaml.safe_dump(cfg, f, sort_keys=False)
        names[task.NAME] = cfg["task"]
    return names


def lm_eval_logprobs(out_dir, lm_task):
    """{doc_id: [log-likelihood per choice]} from lm-eval's --log_samples file of one task."""
    found = [os.path.join(d, n) for d, _, files in os.walk(out_dir) for n in files
             if n.startswith(f"samples_{lm_task}_") and n.endswith(".jsonl")]
    if len(found) != 1:
        raise UserError(f"expected one lm-eval samples file for {lm_task} under {out_dir}, found {len(found)}")
    out = {}
    with open(found[0], encoding="utf-8") as f:
        for line in f:
            sample = json.loads(line)
            out[sample["doc_id"]] = [float(r[0][0]) for r in sample["resps"]]
    return out


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gptlab.evals.task_spec import load_task, resolve_tasks, task_names

    if importlib.util.find_spec("lm_eval") is None:
        raise UserError("lm-eval is not installed, and the bench times it; pip install lm_eval accelerate")

    if args.tasks:
        tasks = resolve_tasks(args.tasks, args.tasks_dir)
    else:
        tasks = [t for t in (load_task(n, args.tasks_dir) for n in task_names(args.tasks_dir))
                 if t.LM_EVAL and os.path.isfile(t.data_path(args.data_dir))]
    unknown = [t.NAME for t in tasks if not t.LM_EVAL]
    if unknown or not tasks:
        raise UserError(f"no lm-eval task to compare with for {', '.join(unknown) or 'any task'}: a task is timed "
                        f"when its file names lm-eval's (LM_EVAL) and its rows are in {args.data_dir} (python "
                        "download_evals.py)")
    missing = [t.LM_EVAL for t in tasks if not os.path.isfile(lm_eval_file(t))]
    if missing:
        raise UserError(f"lm-eval {lm_eval_version()} has no task file {', '.join(missing)} under its tasks folder; "
                        "fix LM_EVAL in the task's file (a path under lm_eval/tasks/)")
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_evals_")
    py = sys.executable
    hf = os.path.join(work, "hf")
    if not os.path.isfile(os.path.join(hf, "config.json")):
        timed([py, "export_hf.py", args.checkpoint, hf])
    lm_tasks = lm_eval_task_files(os.path.join(work, "lm_eval_tasks"), tasks, args.data_dir)
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    names = ",".join(t.NAME for t in tasks)
    print(f"model: {args.checkpoint} (exported to {hf}); tasks: {names}; the first {args.limit} examples of each; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")

    ours_dir = os.path.join(work, "ours")
    ours_s, ours_cpu, _ = timed([py, "evaluate.py", args.checkpoint, "--tasks", names, "--limit", str(args.limit),
                                 "--data_dir", args.data_dir, "--out", ours_dir, "--overwrite", "--quiet", "--device",
                                 "cpu"] + (["--tasks_dir", args.tasks_dir] if args.tasks_dir else []), env)
    print(f"ours (python evaluate.py):            {ours_s:8.1f} s  ({ours_cpu:.1f} s of CPU)")
    model_args = f"pretrained={hf},trust_remote_code=True,add_bos_token=True,max_length=2048,dtype=float32"
    best = None
    for batch_size in args.batch_sizes:
        out = tempfile.mkdtemp(prefix=f"lm_eval_bs{batch_size}_", dir=work)  # a fresh one: --work_dir may be reused
        seconds, cpu, _ = timed(["lm_eval", "--model", "hf", "--model_args", model_args, "--device", "cpu",
                                 "--include_path", os.path.join(work, "lm_eval_tasks"),
                                 "--tasks", ",".join(lm_tasks.values()), "--limit", str(args.limit),
                                 "--batch_size", batch_size, "--log_samples", "--output_path", out], env)
        print(f"lm-eval --batch_size {batch_size:<5}              {seconds:8.1f} s  ({cpu:.1f} s of CPU)")
        if best is None or seconds < best[0]:
            best = (seconds, batch_size, out, cpu)
    print(f"ratio ours / lm-eval (its best, --batch_size {best[1]}): {ours_s / best[0]:.3f}")
    print(f"ratio of CPU time, ours / the same lm-eval run: {ours_cpu / best[3]:.3f} (load average "
          f"{os.getloadavg()[0]:.1f} at the end)")
    furthest = compare(tasks, lm_tasks, ours_dir, best[2])
    referee(args.checkpoint, tasks, [f for f in furthest[:args.referee] if f[0] > 0], args.data_dir)
    return 0


def compare(tasks, lm_tasks, ours_dir, lm_dir):
    """Print, per task and overall, the largest |our log-likelihood - lm-eval's| over every continuation, and how
    many acc and acc_norm predictions differ. Returns [(difference, task name, example index, ours, lm-eval's)] of
    every example, the largest difference first."""
    worst, examples, preds_differ, norm_differ, apart, over = (0.0, None), 0, 0, 0, [], []
    for task in tasks:
        theirs = lm_eval_logprobs(lm_dir, lm_tasks[task.NAME])
        with open(os.path.join(ours_dir, f"{task.NAME}.jsonl"), encoding="utf-8") as f:
            ours = [json.loads(line) for line in f]
        if sorted(theirs) != list(range(len(ours))):
            raise UserError(f"{task.NAME}: lm-eval scored {len(theirs)} examples, we {len(ours)}")
        task_worst = 0.0
        for rec in ours:
            lls = theirs[rec["index"]]
            if len(lls) != len(rec["logprob"]):
                raise UserError(f"{task.NAME} example {rec['index']}: {len(lls)} continuations in lm-eval, "
                                f"{len(rec['logprob'])} in ours")
            diff, value = max((abs(a - b), a) for a, b in zip(lls, rec["logprob"]))
            over += [(a - b, a) for a, b in zip(lls, rec["logprob"]) if abs(a - b) > 1e-4]
            task_worst = max(task_worst, diff)
            apart.append((diff, task.NAME, rec["index"], rec["logprob"], lls))
            if diff > worst[0]:
                worst = (diff, f"{task.NAME} example {rec['index']}", value)
            pred = max(range(len(lls)), key=lambda k: (lls[k], -k))
            preds_differ += pred != rec["pred"] and task.KIND != "greedy"
            # lm-eval's acc_norm: argmax of log-likelihood / the choice's length in characters (first on ties)
            pred_norm = max(range(len(lls)), key=lambda k: (lls[k] / max(rec["chars"][k], 1), -k))
            norm_differ += pred_norm != rec["pred_norm"] and task.KIND != "greedy"
            examples += 1
        print(f"  {task.NAME:<16} {len(ours):>5} examples, largest |log-likelihood difference| {task_worst:.2e}")
    print(f"largest per-example log-likelihood difference: {worst[0]:.2e} nats ({worst[1]}) over {examples} "
          f"examples; acc predictions that differ: {preds_differ}, acc_norm: {norm_differ}")
    if over:  # how many of lm-eval's float32 steps each such difference spans
        steps = max(abs(d) / float(np.spacing(np.float32(abs(v)))) for d, v in over)
        print(f"  {len(over)} continuation{'s' if len(over) > 1 else ''} differ{'' if len(over) > 1 else 's'} by "
              f"more than 1e-4, none by more than {steps:.2f} steps of float32 at lm-eval's figure")
    if worst[1] is not None:  # lm-eval sums a continuation's log-probabilities in float32
        print(f"  (lm-eval's figure there, {worst[2]:.4f}, is a float32 sum: float32 numbers that large lie "
              f"{float(np.spacing(np.float32(abs(worst[2])))):.2e} apart)")
    return sorted(apart, key=lambda a: -a[0])


@contextlib.contextmanager
def float64_throughout():
    """Within: Tensor.float() leaves a float64 tensor as it is. A model's code casts to float32 where float32 is the
    most it needs (model.py's rotary q/k, its head's logits); a model in float64 then stays float64 end to end."""
    import torch

    to_float = torch.Tensor.float

    def keep_float64(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else to_float(self, *args, **kwargs)

    torch.Tensor.float = keep_float64
    try:
        yield
    finally:
        torch.Tensor.float = to_float


def float64_logprobs(model, encoding, eot, request):
    """Each continuation's log-likelihood (nats) of one request, its sequence alone through the model (already in
    float64; float64_throughout): one forward per continuation, no rows, no shared context."""
    import torch

    from gptlab.evals import score
    from gptlab.evals.suite import checked_encoder

    encode = checked_encoder(encoding, lambda: "a referee row")
    out = []
    for context, continuation in zip(request["contexts"], request["continuations"]):
        tokens, start = score.build_sequences(encode, eot, [(context, continuation)])[0]
        with float64_throughout():
            logits = model.predict(torch.tensor([tokens]), eot)[0]
        if logits.dtype != torch.float64:
            raise UserError(f"the model's predict gives {logits.dtype} logits in float64: the referee needs float64 "
                            "throughout; run with --referee 0")
        logp = torch.log_softmax(logits[:, :encoding.n_vocab], dim=-1)
        picked = logp[torch.arange(start - 1, len(tokens) - 1), torch.tensor(tokens[start:])]
        out.append(float(picked.sum()))
    return out


def referee(checkpoint, tasks, furthest, data_dir):
    """Score the examples furthest apart again in float64 (our model; each sequence alone) and print how far each
    side's float32 figure is from that: which side's rounding the difference is."""
    if not furthest:
        return
    import torch

    from gptlab.checkpoint import checkpointing
    from gptlab.checkpoint.model_source import load_model
    from gptlab.evals.suite import task_requests

    model, _, ckpt = load_model(checkpoint, "cpu")
    model.double()
    tok = checkpointing.checkpoint_tokenizer(ckpt, checkpoint)
    by_name = {t.NAME: t for t in tasks}
    with torch.no_grad():
        for diff, name, index, ours, theirs in furthest:
            exact = float64_logprobs(model, tok.encoding, tok.eot, task_requests(by_name[name], 0, index + 1,
                                                                                 data_dir)[1][index])
            print(f"  float64 ({name} example {index}, difference {diff:.2e}): ours within "
                  f"{max(abs(a - b) for a, b in zip(ours, exact)):.2e} of it, lm-eval within "
                  f"{max(abs(a - b) for a, b in zip(theirs, exact)):.2e}")


if __name__ == "__main__":
    run_cli(main)
