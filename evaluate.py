"""Score a checkpoint on benchmark tasks (ARC, BoolQ, PIQA, WinoGrande, OpenBookQA, Social IQa, CommonsenseQA,
COPA, LAMBADA, HellaSwag, and any task file you add), rendered as lm-eval-harness renders them.

    python download_evals.py --tasks core                          # once: the tasks' rows into data/evals/
    python evaluate.py experiments/RUN/checkpoints/step_000120.pt --tasks core
    python evaluate.py experiments/RUN --tasks arc_easy,piqa --fewshot 5 --limit 200 --out evals/run_5shot
    torchrun --nproc_per_node=2 evaluate.py CKPT --tasks all        # data-parallel: the same figures

Writes OUT/<task>.jsonl (per example: each continuation's summed log-probability, its length in tokens, bytes and
characters, the gold index, the predictions) and OUT/summary.json (per task acc, acc_norm, centred accuracy and
gold-answer bits per byte with 95% intervals; over the tasks: core, the mean centred accuracy, and the mean
gold-answer bpb). OUT defaults to RUN/evals/<checkpoint name> (or <checkpoint>_evals beside a lone checkpoint).
Metrics and the task files: docs/evals.md.
"""
import os

from gptlab.core.cli import (MAX_THREADS, ArgumentParser, HelpFormatter, chosen_threads, non_negative_int, path,
                             positive_int, threads_flag)
from gptlab.core.errors import UserError, run_cli
from gptlab.evals.task_spec import DATA_DIR
from gptlab.train.records import latest_checkpoint as resolve_checkpoint  # (a run folder: its latest)


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("checkpoint", metavar="CHECKPOINT_OR_RUN", type=path,
                   help="a checkpoint (.pt, or a --shard_params folder), or a run folder (its latest checkpoint)")
    p.add_argument("--tasks", default="core", help="core, all, or task names separated by commas")
    p.add_argument("--fewshot", type=non_negative_int, default=0,
                   help="examples shown before each one, drawn from the task's few-shot split as lm-eval draws them "
                   "(docs/evals.md)")
    p.add_argument("--limit", type=positive_int, default=None, help="the first N examples of each task (default: all)")
    p.add_argument("--out", type=path, default=None, help="folder to write (default: RUN/evals/<checkpoint name>)")
    p.add_argument("--data_dir", type=path, default=DATA_DIR, help="where download_evals.py wrote the tasks' rows")
    p.add_argument("--tasks_dir", type=path, default=None,
                   help="a folder of your own task files, besides gptlab/evals/tasks/ (docs/evals.md)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                   help="the model's matrix products (auto: bfloat16 autocast on CUDA, as training and --evals run "
                        "them; float32 elsewhere, as lm-eval's figures in docs/evals.md)")
    p.add_argument("--threads", type=threads_flag, default="auto",
                   help=f"CPU threads torch uses, 1 to {MAX_THREADS} (auto: $OMP_NUM_THREADS when set, else 1: on "
                   "shared or busy cores a second thread that the first waits for costs far more than it gives; "
                   "docs/evals.md)")
    p.add_argument("--trust_model_code", action="store_true",
                   help="run the model code of a checkpoint trained on another machine (read it first)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def scoring_dtype(choice, device_type):
    """--dtype → "float32" or "bfloat16": auto is bfloat16 on CUDA (as training ran the model), float32 elsewhere."""
    if choice != "auto":
        return choice
    return "bfloat16" if device_type == "cuda" else "float32"


def default_out(checkpoint):
    stem = os.path.basename(os.path.normpath(checkpoint)).removesuffix(".pt")
    folder = os.path.dirname(os.path.normpath(checkpoint))
    if os.path.basename(folder) == "checkpoints":
        return os.path.join(os.path.dirname(folder), "evals", stem)
    return os.path.normpath(checkpoint).removesuffix(".pt") + "_evals"


def main(argv=None):
    try:
        return evaluate(argv)
    except UserError as err:  # under torchrun every rank meets the same bad input: rank 0 says it once
        err.quiet = err.quiet or os.environ.get("RANK", "0") != "0"
        raise


def evaluate(argv=None):
    args = build_parser().parse_args(argv)
    from gptlab.core.files import check_output_dir
    from gptlab.evals.task_spec import check_fewshot, resolve_tasks

    tasks = resolve_tasks(args.tasks, args.tasks_dir)  # before the model loads: a bad task name answers at once
    check_fewshot(tasks, args.fewshot)
    checkpoint = resolve_checkpoint(args.checkpoint)
    out = args.out or default_out(checkpoint)
    # what this command reads: --overwrite of a folder holding any of them would delete it (the run folder, data/)
    inputs = [checkpoint, args.data_dir] + ([args.tasks_dir] if args.tasks_dir else [])
    check_output_dir(out, args.overwrite, inputs)
    from gptlab.evals.suite import fewshot_sources, task_requests

    # every file read and rendered before the model loads: a bad row (or missing few-shot rows) answers at once
    prepared = {task.NAME: task_requests(task, args.fewshot, args.limit, args.data_dir)[1] for task in tasks}
    sources = fewshot_sources(tasks, args.fewshot, args.data_dir)

    import torch  # from here on

    from gptlab.core import distributed
    from gptlab.evals.score import model_geometry
    from gptlab.evals.suite import score_tasks, write_results
    from gptlab.checkpoint import checkpointing
    from gptlab.checkpoint.model_source import load_model, logits_fn

    threads = chosen_threads(args.threads, os.environ)
    if threads is not None:
        torch.set_num_threads(threads)
    ctx = distributed.setup(args.device)
    try:
        model, _, ckpt = load_model(checkpoint, ctx.device, args.trust_model_code)
        tok = checkpointing.checkpoint_tokenizer(ckpt, checkpoint)
        check_output_dir(out, args.overwrite, inputs + [tok.path])  # (the tokenizer's file: known only now)
        block, window = model_geometry(model)
        dtype = scoring_dtype(args.dtype, ctx.device.type)
        autocast = torch.bfloat16 if dtype == "bfloat16" else None
        records, summaries, suite = score_tasks(
            logits_fn(model, tok.eot, tok.encoding.n_vocab, autocast_dtype=autocast), tok.encoding, tasks,
            fewshot=args.fewshot,
            limit=args.limit, data_dir=args.data_dir, device=ctx.device, block=block, window=window,
            padded_vocab=getattr(model, "padded_vocab", None), ctx=ctx, progress=not args.quiet, prepared=prepared)
        if ctx.is_main:
            meta = {"checkpoint": checkpoint, "step": ckpt.get("step"), "tokenizer": tok.name,
                    "ranks": ctx.world_size, "device": ctx.device.type, "dtype": dtype, "fewshot_source": sources}
            write_results(out, records, summaries, suite, meta, args.overwrite, inputs + [tok.path])
            print_summary(summaries, suite, out, dtype)
        distributed.barrier(ctx)
    finally:
        distributed.cleanup(ctx)
    return 0


def interval(pair):
    return "[n/a]" if None in pair else f"[{pair[0]:.4f}, {pair[1]:.4f}]"


def print_summary(summaries, suite, out, dtype):
    width = max([16] + [len(name) + 1 for name in summaries])  # a long task name (mmlu_...) keeps the columns
    print(f"{'task':<{width}}{'n':>6}  {'acc [95% CI]':<24}{'acc_norm':>9}  {'centred':>8}  gold bpb [95% CI]")
    for name, s in summaries.items():
        print(f"{name:<{width}}{s['n']:>6}  {s['acc']:.4f} {interval(s['acc_ci95']):<17}{s['acc_norm']:>9.4f}  "
              f"{s['centred']:>8.4f}  {s['gold_bpb']:.4f} {interval(s['gold_bpb_ci95'])}")
    print(f"core (mean centred accuracy over {len(summaries)} tasks) {suite['core']:.4f} "
          f"{interval(suite['core_ci95'])}; mean gold-answer bpb {suite['gold_bpb']:.4f} "
          f"{interval(suite['gold_bpb_ci95'])}")
    print(f"{suite['sequences']:,} continuations scored in {suite['seconds']:.1f}s ({dtype}); wrote "
          f"{out}/summary.json and one <task>.jsonl per task")


if __name__ == "__main__":
    run_cli(main)
