"""Eval speed on one machine: evaluate.py's wall time for a whole HellaSwag (10,042 examples) and the core suite on
a GPT-2-small-shaped model (12 layers, dim 768, 124M parameters; random weights: the time does not depend on them),
plus the same scoring in-process under other numeric settings, to show what each would buy and cost.

    python bench/bench_eval_speed.py --tokenizer TOK.pkl --data_dir data/evals
    python bench/bench_eval_speed.py --tokenizer TOK.pkl --data_dir D --lambada_from docs.jsonl   # no LAMBADA rows

Whole processes (`python evaluate.py CKPT --tasks hellaswag`, then `--tasks core`) are timed from start to exit,
imports and model loading included, as a user waits; summary.json's `seconds` (the scoring alone) is shown beside.
The variants score the first --variant_limit HellaSwag examples in this process: float32 with the whole logits of
every forward (the scorer before it asked the model for the scored positions alone), float32 (evaluate.py --dtype
float32), with TF32 matmuls, bfloat16 autocast with the whole logits, bfloat16 (evaluate.py's default on CUDA), and
bfloat16 in rows of 256 and 1024 tokens; each with its largest per-example log-probability difference from the
first and how many acc_norm predictions it changes. --profile N adds a torch.profiler table of the default.

--lambada_from: where data_dir has no lambada.jsonl, 5,153 passages (LAMBADA's size) are cut from a JSONL of
documents ({"text": ...}), each ~70 words: the same shape of work as LAMBADA, not its rows (timing only).
Writes OUT/bench_eval_speed.json and prints a table.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser, HelpFormatter, positive_int  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402

LAMBADA_ROWS = 5153  # EleutherAI/lambada_openai's test split


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--tokenizer", required=True, help="tokenizer pickle (GPT-2's 50,257 ids for GPT-2-like work)")
    p.add_argument("--data_dir", required=True, help="download_evals.py's folder of task rows")
    p.add_argument("--lambada_from", default=None, help="JSONL of documents to cut LAMBADA-shaped passages from")
    p.add_argument("--num_layers", type=positive_int, default=12)
    p.add_argument("--model_dim", type=positive_int, default=768)
    p.add_argument("--num_heads", type=positive_int, default=6)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--limit", type=positive_int, default=None, help="evaluate.py --limit (default: whole tasks)")
    p.add_argument("--variant_limit", type=positive_int, default=2000, help="HellaSwag examples per variant")
    p.add_argument("--profile", type=positive_int, default=None,
                   help="also profile the default setting on the first N HellaSwag examples (torch.profiler table)")
    p.add_argument("--skip", nargs="*", default=[], choices=["hellaswag", "core", "variants"])
    p.add_argument("--out", default=os.path.join(REPO, "bench", "out", "eval_speed"), help="work folder and report")
    return p


def lambada_passages(path, n=LAMBADA_ROWS, words=70):
    """n passages of `words` words cut in turn from the documents (wrapping around), LAMBADA's `text` layout."""
    docs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                w = json.loads(line)["text"].split()
                docs += [w[i:i + words] for i in range(0, len(w) - words + 1, words)]
    if not docs:
        raise UserError(f"--lambada_from {path} has no document of {words} words or more")
    return [{"text": " ".join(docs[i % len(docs)])} for i in range(n)]


def save_random_model(path, tokenizer, num_layers, model_dim, num_heads):
    """A checkpoint of today's model.py with random weights (every part moves the logits), as train_gpt.py saves."""
    import dataclasses

    import torch

    from gptlab.tokenizer.format import open_tokenizer
    from gptlab.checkpoint import checkpointing
    from gptlab.checkpoint import model_source as ms

    tok = open_tokenizer(tokenizer)
    module = ms.import_file(ms.MODEL_FILE, ms.MODULE_NAME)
    config = module.GPTConfig(vocab_size=tok.encoding.n_vocab, num_layers=num_layers, num_heads=num_heads,
                              model_dim=model_dim)
    torch.manual_seed(0)
    model = module.GPT(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * 0.02)
    n_params = sum(p.numel() for p in model.parameters())
    checkpointing.save_checkpoint(path, model_state=model.state_dict(), model_config=dataclasses.asdict(config),
                                  step=0, args={"tokenizer": tokenizer},
                                  tokenizer={"name": tok.name, "ranks_sha256": tok.ranks_sha256},
                                  model_source=ms.current_source())
    return n_params


def timed_evaluate(ckpt, tasks, args, out):
    cmd = [sys.executable, os.path.join(REPO, "evaluate.py"), ckpt, "--tasks", tasks, "--data_dir", args.data_dir,
           "--out", out, "--device", args.device, "--quiet", "--overwrite"]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    print(proc.stdout, end="")
    if proc.returncode != 0:
        raise UserError(f"evaluate.py --tasks {tasks} failed (exit {proc.returncode}):\n" +
                        "\n".join(proc.stderr.strip().splitlines()[-8:]))
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return {"tasks": tasks, "wall_s": round(wall, 2), "scoring_s": summary["seconds"],
            "examples": sum(t["n"] for t in summary["per_task"].values()),
            "continuations": summary["sequences"]}


def variants(ckpt, args):
    """In-process scoring of the first --variant_limit HellaSwag examples under each setting."""
    import torch

    from gptlab.evals import score, task_spec
    from gptlab.evals.suite import score_tasks
    from gptlab.checkpoint import checkpointing
    from gptlab.checkpoint.model_source import load_model, logits_fn

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    model, _, ckpt_dict = load_model(ckpt, device, False)
    tok = checkpointing.checkpoint_tokenizer(ckpt_dict, ckpt)
    block, window = score.model_geometry(model)
    tasks = task_spec.resolve_tasks("hellaswag")
    base_fn = logits_fn(model, tok.eot, tok.encoding.n_vocab)
    bf16_fn = logits_fn(model, tok.eot, tok.encoding.n_vocab, autocast_dtype=torch.bfloat16)

    def whole(fn):  # without .at: the whole (B, T, vocab) logits of every forward, as before positions existed
        return lambda tokens: fn(tokens)

    def run(fn, limit=None, row_len=None):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        records, _, _ = score_tasks(fn, tok.encoding, tasks, limit=limit or args.variant_limit, data_dir=args.data_dir,
                                    device=device, block=block, window=window, row_len=row_len,
                                    padded_vocab=getattr(model, "padded_vocab", None))
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, records["hellaswag"]

    @contextlib.contextmanager
    def tf32():
        old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

    run(base_fn, limit=50)  # warm-up: kernels, allocator
    results, reference = [], None
    none = contextlib.nullcontext
    for name, fn, row_len, ctx in (("float32, whole logits", whole(base_fn), None, none),
                                   ("float32 (--dtype float32)", base_fn, None, none),
                                   ("tf32 matmuls", base_fn, None, tf32),
                                   ("bfloat16, whole logits", whole(bf16_fn), None, none),
                                   ("bfloat16 (--dtype auto)", bf16_fn, None, none),
                                   ("bfloat16, rows of 256", bf16_fn, 256, none),
                                   ("bfloat16, rows of 1024", bf16_fn, 1024, none)):
        with ctx():
            seconds, recs = run(fn, row_len=row_len)
        if reference is None:
            reference = recs
        diff = max(abs(a - b) for r, q in zip(reference, recs) for a, b in zip(r["logprob"], q["logprob"]))
        changed = sum(r["pred_norm"] != q["pred_norm"] for r, q in zip(reference, recs))
        results.append({"variant": name, "seconds": round(seconds, 3), "examples": len(recs),
                        "max_abs_logprob_diff": diff, "acc_norm_predictions_changed": changed})
        print(f"  {name:<28} {seconds:7.2f}s  {len(recs)} examples  max |d logprob| {diff:.2e}  "
              f"changed predictions {changed}", flush=True)
    if args.profile:  # where the default's time goes, by kernel / operator
        from torch.profiler import ProfilerActivity, profile
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            seconds, _ = run(bf16_fn if device.type == "cuda" else base_fn, limit=args.profile)
        key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
        print(f"profile of the default, the first {args.profile} examples ({seconds:.2f}s under the profiler):")
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))
    return results


def main(argv=None):
    args = build_parser().parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    import torch

    report = {"torch": torch.__version__, "cuda": torch.version.cuda,
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}
    data_dir = args.data_dir
    if not os.path.exists(os.path.join(data_dir, "lambada.jsonl")) and "core" not in args.skip:
        if not args.lambada_from:
            raise UserError(f"{data_dir} has no lambada.jsonl; run download_evals.py --tasks lambada, or give "
                            "--lambada_from DOCS.jsonl for LAMBADA-shaped passages (timing only)")
        data_dir = tempfile.mkdtemp(prefix="eval_speed_data_", dir=args.out)
        for name in os.listdir(args.data_dir):
            shutil.copyfile(os.path.join(args.data_dir, name), os.path.join(data_dir, name))
        with open(os.path.join(data_dir, "lambada.jsonl"), "w", encoding="utf-8") as f:
            for row in lambada_passages(args.lambada_from):
                f.write(json.dumps(row) + "\n")
        report["lambada"] = f"{LAMBADA_ROWS} passages cut from {args.lambada_from} (timing only)"
        args.data_dir = data_dir
    ckpt = os.path.join(args.out, "random_124m.pt")
    if os.path.exists(ckpt):  # this benchmark's own work file
        os.remove(ckpt)
    report["parameters"] = save_random_model(ckpt, args.tokenizer, args.num_layers, args.model_dim, args.num_heads)
    print(f"model: {args.num_layers} layers, dim {args.model_dim}, {report['parameters']:,} parameters "
          f"(random weights); device {report['device']}; torch {report['torch']}", flush=True)
    report["runs"] = []
    for tasks in ("hellaswag", "core"):
        if tasks not in args.skip:
            r = timed_evaluate(ckpt, tasks, args, os.path.join(args.out, f"evals_{tasks}"))
            report["runs"].append(r)
            print(f"evaluate.py --tasks {tasks}: {r['examples']:,} examples, {r['continuations']:,} continuations: "
                  f"{r['wall_s']:.1f}s whole process, {r['scoring_s']:.1f}s scoring", flush=True)
    if "variants" not in args.skip:
        print(f"in-process variants, the first {args.variant_limit} HellaSwag examples:", flush=True)
        report["variants"] = variants(ckpt, args)
    with open(os.path.join(args.out, "bench_eval_speed.json"), "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    run_cli(main)
