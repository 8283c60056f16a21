"""Training speed of train_gpt.py: tokens/s, TFLOP/s, MFU and peak memory of its very step function, and of the
model alone.

    python bench/bench_train.py                              # GPU: --preset gpt2-small, compiled and eager
    python bench/bench_train.py --preset record26 --compile on
    torchrun --nproc_per_node=G bench/bench_train.py ...     # the same on G GPUs (gradient sync included)
    python bench/bench_train.py --device cpu                 # CPU: a tiny config, so CI keeps this script working

The step figure times `train_gpt.make_train_step`'s function, the one train_gpt.py runs: the BOS-aligned loader
reading shards of random documents, every micro-batch's masks, forward and backward, the gradient sync across
ranks, and the Adam/Muon update, `--steps` times after `--warmup` untimed steps (compilation happens there),
between two device synchronisations. The model-alone figure times forward+backward of one fixed micro-batch
(no loader, no sync, no update): what a benchmark without the rest would flatter a run with.

FLOPs (model.training_flops, the count train_gpt.py's log uses too): 6 x tokens x multiplied parameters
(embeddings and value embeddings are look-ups and count 0), plus 12 x head_dim x heads per query-key pair that the
step's document-causal sliding-window masks allow (model.attention_pairs counts them from the batches, so
masked-out work is not credited). Steps run with the end-of-training windows (the largest). MFU = FLOPs per
second per GPU / the GPU's dense bf16 peak (--peak_tflops, else a known GPU's; CPU: n/a).

Beside it: the analytical MFU of gptlab/train/perf_estimate.py for the configuration benchmarked (matmuls,
attention, memory-bound elementwise work, optimizer and gradient communication, each at a stated fraction of the
GPU's peak or bandwidth), with each term's share of the estimated step. --estimate_only prints it without running
anything, on any machine (the model is built on the meta device; --gpu names the GPU, --world_size the ranks):

    python bench/bench_train.py --estimate_only --preset gpt2-small --gpu "NVIDIA H100 80GB HBM3"
"""
import argparse
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from gptlab.core import distributed as dist_utils  # noqa: E402
from gptlab.core.cli import ArgumentParser, non_negative_int, or_auto, positive_int  # noqa: E402
from gptlab.core.distributed import all_reduce_sum  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402
from gptlab.core.files import atomic_write_text  # noqa: E402
from gptlab.dataset.shards import write_shard  # noqa: E402
from gptlab.train import perf_estimate  # noqa: E402
from gptlab.train.batching import micro_batch_candidates, split_batch  # noqa: E402
from gptlab.train.environment import (compiled_graphs, gpu_bf16_peak_tflops, peak_memory,  # noqa: E402
                                      set_allocator_defaults)

ESTIMATE_GPU_DEFAULT = "NVIDIA H100 80GB HBM3"  # H100 SXM, the GPU the targets are set on
CPU_DEFAULT = dict(num_layers=4, model_dim=128, num_heads=4, vocab_size=1024, train_seq_len=256, batch_size=512,
                   device_batch_size=512, window_size=256, num_val_emb=2)


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--preset", default=None, help="a train_gpt.py preset (GPU default: gpt2-small)")
    p.add_argument("--num_layers", type=int)
    p.add_argument("--model_dim", type=int)
    p.add_argument("--num_heads", type=int)
    p.add_argument("--vocab_size", type=int, help="default: 50304 on GPUs (GPT-2's, padded)")
    p.add_argument("--num_val_emb", type=int)
    p.add_argument("--seq_len", type=positive_int, help="tokens per row (multiple of 128)")
    p.add_argument("--batch_size", type=positive_int, help="GLOBAL tokens per optimizer step")
    p.add_argument("--device_batch_size", type=or_auto(positive_int), default=None,
                   help="tokens per micro-batch, or auto (train_gpt's probe)")
    p.add_argument("--window_size", type=int, help="long sliding window in tokens")
    p.add_argument("--doc_len", type=int, default=600, help="mean document length of the random documents")
    p.add_argument("--steps", type=positive_int, help="timed steps (GPU default 10, CPU 3)")
    p.add_argument("--warmup", type=non_negative_int, help="untimed steps first (GPU default 3, CPU 1)")
    p.add_argument("--compile", choices=["both", "on", "off"], default=None, help="default: both on CUDA, off on CPU")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
    p.add_argument("--fp8_head", action=argparse.BooleanOptionalAction, default=None,
                   help="the LM head's matmul in FP8, as train_gpt.py's flag (default: the preset's, else off)")
    p.add_argument("--shard_params", choices=["both", "on", "off"], default="off",
                   help="train_gpt.py's --shard_params (FSDP2; torchrun with 2+ ranks): both compares the memory per "
                   "rank with and without it")
    p.add_argument("--tp", type=positive_int, nargs="+", default=[1],
                   help="train_gpt.py's --tp (torchrun; each value dividing the ranks): several compare the layouts' "
                   "memory per rank and step time, e.g. --tp 1 2")
    p.add_argument("--pp", type=positive_int, nargs="+", default=[1],
                   help="train_gpt.py's --pp (torchrun; 1F1B over its default 2 x pp micro-batches; each tp x pp "
                   "dividing the ranks): several compare the layouts, e.g. --pp 1 2")
    p.add_argument("--pp_microbatches", type=positive_int, default=None,
                   help="train_gpt.py's --pp_microbatches for the --pp layouts above 1 (default: 2 x pp)")
    p.add_argument("--peak_tflops", type=float, default=None, help="peak for MFU (default: known GPU bf16 peak)")
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    p.add_argument("--estimate_only", action="store_true",
                   help="print the analytical estimate for --gpu and --world_size without running (any machine)")
    p.add_argument("--gpu", default=None, help="--estimate_only: the GPU as torch names it (default: this "
                   "machine's, else " + ESTIMATE_GPU_DEFAULT + ")")
    p.add_argument("--world_size", type=positive_int, default=None,
                   help="--estimate_only: ranks (default: torchrun's WORLD_SIZE, else 1)")
    return p


def resolve(args, device, world_size, fp8_head=None, tp=1, pp=1):
    """The benchmark's configuration as train_gpt.py's resolved flags (argparse.Namespace). fp8_head: the
    --estimate_only decision, which no local GPU can check."""
    # heavy (torch, ~1.5 s), here and below: imported after the flags, so --help and a bad flag answer at once
    import model as arch  # torch
    import train_gpt  # torch
    from gptlab.train.config import resolve_config  # torch

    if device.type == "cuda":
        values = dict(train_gpt.build_parser().parse_args([]).__dict__)
        values.update(train_gpt.PRESETS[args.preset or "gpt2-small"])
        values["vocab_size"] = 50304
    else:
        values = dict(train_gpt.build_parser().parse_args([]).__dict__)
        if args.preset:
            values.update(train_gpt.PRESETS[args.preset])
        else:
            values.update(CPU_DEFAULT)
    for key, flag in (("num_layers", "num_layers"), ("model_dim", "model_dim"), ("num_heads", "num_heads"),
                      ("vocab_size", "vocab_size"), ("num_val_emb", "num_val_emb"), ("train_seq_len", "seq_len"),
                      ("batch_size", "batch_size"), ("window_size", "window_size")):
        if getattr(args, flag) is not None:
            values[key] = getattr(args, flag)
    if args.device_batch_size is not None:
        values["device_batch_size"] = args.device_batch_size
    if args.fp8_head is not None:
        values["fp8_head"] = args.fp8_head
    if fp8_head is not None:
        values["fp8_head"] = False
    values.update(val_seq_len=values["train_seq_len"], val_batch_size=None, head_dim=None, compile=None,
                  attention="auto", dtype=args.dtype, train_steps=max(values["train_steps"], 2), grad_acc_steps=None,
                  tp=tp, pp=pp, pp_microbatches=args.pp_microbatches if pp > 1 else None)
    cfg = resolve_config(argparse.Namespace(**values), world_size, device, arch)
    if fp8_head is not None:
        cfg.fp8_head = fp8_head
    return cfg


def write_random_shards(folder, n_tokens, vocab, eot, doc_len, seed=0):
    """Shards of random documents (each starts with eot) for the loader: speed does not depend on the text."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, eot, size=n_tokens, dtype=np.int64)
    tokens[rng.random(n_tokens) < 1.0 / doc_len] = eot
    tokens[0] = eot
    path = os.path.join(folder, "train_000001.bin")
    write_shard(path, tokens)
    return [path]


def build_model_and_optimizers(cfg, device, rank, world_size, ctx=None, shard=False):
    """The model and optimizers as train_gpt.py sets them up (bf16-stored embeddings, the FP8 head; cfg.tp > 1:
    tensor parallelism, as --tp; shard: FSDP2 over ctx's (data-parallel) ranks, as --shard_params). Returns (model,
    optimizers, the gradient sync train_gpt.py would use)."""
    import torch  # heavy: as in resolve

    import model as arch  # torch
    import train_gpt  # torch
    from gptlab.train.config import model_config_of  # torch

    # --estimate_only builds on the meta device: shapes without memory or initialisation work
    with torch.device("meta") if str(device) == "meta" else contextlib.nullcontext():
        model = train_gpt.build_model(arch, model_config_of(cfg, arch.GPTConfig), cfg, device)
    from gptlab.train import parallel  # torch

    layout_flags = argparse.Namespace(tp=getattr(cfg, "tp", 1), pp=getattr(cfg, "pp", 1), shard_params=shard)
    layout = parallel.distribute(model, arch, ctx, layout_flags)
    optimizers = train_gpt.build_optimizers(model, rank, world_size)
    if str(device) == "meta":
        return model, optimizers, None
    return model, optimizers, parallel.gradient_sync(model, optimizers, ctx, layout_flags, layout)


def training_state_bytes(model, optimizers):
    """This rank's parameters, their gradients (as large as the parameters during a step) and optimizer state, in
    bytes, counted from the tensors it holds (its blocks under --shard_params)."""
    from gptlab.train.fsdp import local  # torch

    def nbytes(t):
        return local(t).numel() * t.element_size()

    params = sum(nbytes(p) for p in model.parameters())
    state = sum(nbytes(v) for opt in optimizers for holder in (opt, getattr(opt, "inner", None)) if holder is not None
                for per_param in holder.state.values() for v in per_param.values() if hasattr(v, "element_size"))
    return 2 * params + state


def estimate(cfg, model, optimizers, compiled, world_size, matmul_flops, attention_flops, hw):
    """perf_estimate.estimate_step for this configuration (None without hw)."""
    return perf_estimate.estimate_step(model, optimizers, hw, tokens=cfg.batch_size, micro_batches=cfg.grad_acc_steps,
                                       world_size=world_size, matmul_flops=matmul_flops,
                                       attention_flops=attention_flops,
                                       activation_bytes=2 if cfg.dtype == "bfloat16" else 4, compiled=compiled)


def bench_one(cfg, ctx, compiled, shards, steps, warmup, hw=None, shard=False):
    import torch  # heavy: as in resolve

    import model as arch  # torch
    import train_gpt  # torch
    from gptlab.dataset.loader import BOSAlignedLoader  # torch
    from gptlab.train.tensor_parallel import data_parallel  # torch

    device = ctx.device
    graphs_before = compiled_graphs() if compiled else 0
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model, optimizers, grad_sync = build_model_and_optimizers(cfg, device, ctx.rank, ctx.world_size, ctx, shard)
    dp_ctx = data_parallel(ctx, cfg.tp * cfg.pp)  # the TP ranks and PP stages of a replica read the same rows
    use_flex = cfg.attention == "flex"
    model_fwd = torch.compile(model, dynamic=False) if compiled else model
    amp_dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else None

    def autocast():
        return torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()

    eot = cfg.vocab_size - 1
    if cfg.device_batch_size == "auto":
        cfg.device_batch_size = train_gpt.probe_micro_batch(cfg, dp_ctx, model, model_fwd, optimizers, eot,
                                                            use_flex, autocast)
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len,
                                                                dp_ctx.world_size, cfg.device_batch_size)
    loader = BOSAlignedLoader(shards, cfg.train_seq_len, cfg.batch_size, eot, dp_ctx.rank, dp_ctx.world_size,
                              cfg.grad_acc_steps)
    from gptlab.train.pipeline import Pipeline  # torch

    pipe = Pipeline(model, arch, ctx, cfg, eot, use_flex, autocast) if cfg.pp > 1 else None
    train_step = train_gpt.make_train_step(cfg, model, model_fwd, optimizers, grad_sync, loader, eot, use_flex,
                                           autocast, device, arch, pipe)
    last = cfg.train_steps - 1  # the end-of-training (largest) windows

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t0 = time.perf_counter()
    for _ in range(warmup):
        train_step(last)
    sync()
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sums = [train_step(last)[0] for _ in range(steps)]
    sync()
    step_s = (time.perf_counter() - t0) / steps
    totals = all_reduce_sum(ctx, torch.stack(sums)).tolist()
    if not all(torch.isfinite(torch.tensor(loss)) for loss, _, _ in totals):
        raise RuntimeError("benchmark loss is not finite")
    flops = [arch.training_flops(model, cfg.batch_size, {"long": pl, "short": ps}) for _, pl, ps in totals]
    matmul_flops = sum(f[0] for f in flops) / steps
    attn_flops = sum(f[1] for f in flops) / steps
    per_gpu = ctx.world_size
    est = estimate(cfg, model, optimizers, compiled, ctx.world_size, matmul_flops, attn_flops, hw)

    # the model alone: forward + backward of one fixed micro-batch
    x_np, y_np = loader.next_batch()[0]
    x, y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)
    windows = train_gpt.window_blocks(last, cfg.train_steps, cfg.window_size)
    pairs = {name: int(arch.attention_pairs(x, eot, blocks)) for name, blocks in zip(("long", "short"), windows)}
    model_flops = sum(arch.training_flops(model, x.numel(), pairs))
    masks = model.attention_masks(x, eot, windows, use_flex)
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            t0 = time.perf_counter()
        with autocast():
            loss = model_fwd(x, masks, y)
        loss.backward()
    sync()
    model_s = (time.perf_counter() - t0) / steps
    model.zero_grad(set_to_none=True)
    mem = peak_memory(device)
    per_rank = dist_utils.all_gather_objects(ctx, {"state_gb": training_state_bytes(model, optimizers) / 1e9,
                                                   "peak_gb": mem["allocated_gb"]})
    return {"compiled": compiled, "shard_params": shard, "tp": cfg.tp, "pp": cfg.pp,
            "pp_microbatches": cfg.pp_microbatches if cfg.pp > 1 else None,
            "state_gb_per_rank": [r["state_gb"] for r in per_rank],
            "peak_mem_allocated_gb_per_rank": [r["peak_gb"] for r in per_rank], "step_time_s": step_s, "tokens_per_step": cfg.batch_size,
            "tokens_per_s": cfg.batch_size / step_s, "device_batch_size": cfg.device_batch_size,
            "grad_acc_steps": cfg.grad_acc_steps, "flops_per_step": matmul_flops + attn_flops,
            "matmul_flops": matmul_flops, "attention_flops": attn_flops,
            "achieved_tflops": (matmul_flops + attn_flops) / step_s / per_gpu / 1e12, "warmup_s": warmup_s,
            "model_only": {"tokens": x.numel(), "time_s": model_s, "tokens_per_s": x.numel() / model_s,
                           "achieved_tflops": model_flops / model_s / 1e12},
            "peak_mem_allocated_gb": mem["allocated_gb"], "peak_mem_reserved_gb": mem["reserved_gb"],
            "peak_mem_label": mem["label"], "n_params": sum(p.numel() for p in model.parameters()),
            "analytical": est,
            # probe, training and the model-alone pass share one graph; on CUDA Muon's Newton-Schulz adds one
            # per matrix shape it orthogonalizes (compiled with dynamic=False): more is a recompile to look into
            "compiled_graphs": compiled_graphs() - graphs_before if compiled else 0,
            "expected_graphs": (1 + (len({tuple(p.shape) for g in optimizers[-1].param_groups for p in g["params"]})
                                     if device.type == "cuda" else 0)) if compiled else 0}


def gb_list(values):
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def mfu_text(measured, est, why_not):
    """'38.2% (analytical estimate 40.1%: matmul 54%, ... of the estimated step)', or on CPU
    'n/a (no peak known; analytical estimate n/a: no GPU constants for CPU)'."""
    analytical = "analytical estimate " + perf_estimate.describe(est, why_not)
    if measured is None:
        return f"n/a (no peak known; {analytical})"
    return f"{100 * measured:.1f}% ({analytical})"


def random_rows(rows, seq_len, vocab, eot, doc_len, seed=0):
    """(rows, seq_len) random documents as the loader gives them (write_random_shards' documents, each row starting
    at an <|endoftext|>): the attention pairs of --estimate_only's FLOP count."""
    import torch  # heavy: as in resolve

    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, eot, size=(rows, seq_len), dtype=np.int64)
    tokens[rng.random((rows, seq_len)) < 1.0 / doc_len] = eot
    tokens[:, 0] = eot
    return torch.from_numpy(tokens)


def guess_micro_batch(cfg, world_size, hw, model):
    """--estimate_only with --device_batch_size auto: the largest micro-batch whose activations (the probe's first
    guess, the model module's activation_bytes_per_token) fit 90% of the GPU's memory beside ~16 bytes a
    parameter."""
    free = 0.9 * hw["memory_gib"] * 2**30 - 16 * sum(p.numel() for p in model.parameters())
    per_token = perf_estimate.model_module(model).activation_bytes_per_token(
        model.config, model.padded_vocab, 2 if cfg.dtype == "bfloat16" else 4)
    candidates = micro_batch_candidates(cfg.batch_size // world_size, cfg.train_seq_len)
    return next((t for t in candidates if t * per_token <= free), candidates[-1])


def estimate_only(args):
    """--estimate_only: the analytical estimate for --gpu and --world_size, nothing run (the model on the meta
    device, the attention pairs of one batch of random documents on the CPU)."""
    import torch  # heavy: as in resolve

    import model as arch  # torch
    import train_gpt  # torch

    world_size = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
    gpu = args.gpu or (torch.cuda.get_device_name() if torch.cuda.is_available() else ESTIMATE_GPU_DEFAULT)
    hw = perf_estimate.hardware_constants(gpu, args.peak_tflops)
    if hw is None:
        known = ", ".join(key for key, row in perf_estimate.GPU_CLASSES if row)
        raise UserError(f"--gpu {gpu!r}: no constants for it in gptlab/train/perf_estimate.py (known: {known}); "
                        "name one of those or add a row to GPU_CLASSES")
    requested = args.fp8_head if args.fp8_head is not None else train_gpt.PRESETS.get(args.preset or "gpt2-small",
                                                                                    {}).get("fp8_head", False)
    fp8_head = bool(requested) and hw["fp8_tflops"] is not None  # "auto": where the GPU has FP8
    if requested is True and not fp8_head:
        raise UserError(f"--fp8_head: {gpu} has no FP8 matmuls; pass --no-fp8_head")
    cfg = resolve(args, torch.device("cuda"), world_size, fp8_head=fp8_head)
    meta = torch.device("meta")
    model, optimizers, _ = build_model_and_optimizers(cfg, meta, 0, world_size)
    if cfg.device_batch_size == "auto":
        guess = guess_micro_batch(cfg, world_size, hw, model)
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len, world_size, guess)
    eot = cfg.vocab_size - 1
    rows = random_rows(cfg.batch_size // cfg.train_seq_len, cfg.train_seq_len, cfg.vocab_size, eot, args.doc_len)
    windows = train_gpt.window_blocks(cfg.train_steps - 1, cfg.train_steps, cfg.window_size)  # as bench_one's
    pairs = {name: int(arch.attention_pairs(rows, eot, blocks)) for name, blocks in zip(("long", "short"), windows)}
    matmul_flops, attention_flops = arch.training_flops(model, cfg.batch_size, pairs)
    compile_mode = args.compile or "both"
    shown = {k: getattr(cfg, k) for k in ("num_layers", "model_dim", "num_heads", "head_dim", "vocab_size",
                                           "train_seq_len", "batch_size", "device_batch_size", "grad_acc_steps",
                                           "window_size", "fp8_head")}
    print(f"estimate only (nothing run): {gpu} x{world_size}, dtype {cfg.dtype}, config {json.dumps(shown)}",
          flush=True)
    results = []
    for compiled in {"both": [False, True], "on": [True], "off": [False]}[compile_mode]:
        est = estimate(cfg, model, optimizers, compiled, world_size, matmul_flops, attention_flops, hw)
        results.append({"compiled": compiled, "analytical": est})
        print(f"compiled={compiled}: analytical MFU {perf_estimate.describe(est)}; "
              f"{1000 * est['step_time_s']:.1f} ms per step, {est['tokens_per_s']:,.0f} tokens/s", flush=True)
    report = {"estimate_only": True, "gpu_name": gpu, "world_size": world_size, "dtype": cfg.dtype,
              "hardware": hw, "config": {k: v for k, v in vars(cfg).items() if k != "from_checkpoint"},
              "results": results, "torch": torch.__version__}
    if args.out:
        atomic_write_text(args.out, json.dumps(report, indent=2, default=str) + "\n", overwrite=True)
    return report


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.estimate_only:
        return estimate_only(args)
    import torch  # heavy: as in resolve

    set_allocator_defaults()  # as train_gpt.py: before CUDA starts
    ctx = dist_utils.setup(args.device)
    try:
        device = ctx.device
        cfg = resolve(args, device, ctx.world_size)
        steps = args.steps or (10 if device.type == "cuda" else 3)
        warmup = args.warmup if args.warmup is not None else (3 if device.type == "cuda" else 1)
        compile_mode = args.compile or ("both" if device.type == "cuda" else "off")
        gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
        peak = args.peak_tflops or (gpu_bf16_peak_tflops(gpu_name) if gpu_name else None)
        hw = perf_estimate.hardware_constants(gpu_name, args.peak_tflops)
        why_not = f"no GPU constants for {gpu_name or 'CPU'}"
        shown = {k: getattr(cfg, k) for k in ("num_layers", "model_dim", "num_heads", "head_dim", "vocab_size",
                                               "train_seq_len", "batch_size", "device_batch_size", "window_size")}
        if ctx.is_main:
            print(f"device {device} ({gpu_name or 'CPU'}) x{ctx.world_size}, dtype {cfg.dtype}, config "
                  f"{json.dumps(shown)}", flush=True)
        if args.shard_params != "off" and ctx.world_size == 1:
            raise UserError("--shard_params shards across ranks: run this under torchrun --nproc_per_node=N (N >= 2)")
        with tempfile.TemporaryDirectory() as folder:
            n_tokens = cfg.batch_size * (steps + warmup + 2) + cfg.train_seq_len + 1
            shards = write_random_shards(folder, n_tokens, cfg.vocab_size, cfg.vocab_size - 1, args.doc_len)
            results = []
            modes = {"both": [False, True], "on": [True], "off": [False]}
            for shard, tp, pp, compiled in itertools.product(modes[args.shard_params], args.tp, args.pp,
                                                             modes[compile_mode]):
                run_cfg = (resolve(args, device, ctx.world_size, tp=tp, pp=pp) if tp * pp > 1 else
                           argparse.Namespace(**vars(cfg)))
                try:
                    r = bench_one(run_cfg, ctx, compiled, shards, steps, warmup, hw, shard)
                except torch.cuda.OutOfMemoryError:
                    raise UserError("CUDA out of memory; lower --device_batch_size or --seq_len") from None
                r["mfu"] = r["achieved_tflops"] / peak if peak else None
                r["model_only"]["mfu"] = r["model_only"]["achieved_tflops"] / peak if peak else None
                results.append(r)
                if ctx.is_main:
                    mfu = lambda v: f"{100 * v:.1f}%" if v is not None else "n/a (no peak known)"  # noqa: E731
                    ana = mfu_text(r["mfu"], r["analytical"], why_not)
                    m = r["model_only"]
                    print(f"{'--shard_params ' if shard else ''}{f'--tp {tp} ' if tp > 1 else ''}"
                          f"{f'--pp {pp} ' if pp > 1 else ''}compiled={compiled}: step {r['tokens_per_s']:,.0f} tokens/s ({1000 * r['step_time_s']:.1f} "
                          f"ms for {r['tokens_per_step']:,} tokens = {r['grad_acc_steps']} x "
                          f"{r['device_batch_size']:,} per GPU), {r['achieved_tflops']:.3f} TFLOP/s per GPU, MFU {ana}, "
                          f"attention {100 * r['attention_flops'] / r['flops_per_step']:.1f}% of FLOPs; model alone "
                          f"{m['tokens_per_s']:,.0f} tokens/s, MFU {mfu(m['mfu'])}; peak memory "
                          f"{r['peak_mem_allocated_gb']:.2f} GB allocated / {r['peak_mem_reserved_gb']:.2f} GB "
                          f"reserved ({r['peak_mem_label']}); graphs compiled {r['compiled_graphs']} (expected "
                          f"{r['expected_graphs']}: the model's 1 + Newton-Schulz's 1 per Muon matrix shape on CUDA); per rank: "
                          f"training state {gb_list(r['state_gb_per_rank'])} GB (parameters, gradients, optimizer "
                          f"state), peak memory {gb_list(r['peak_mem_allocated_gb_per_rank'])} GB", flush=True)
            if args.shard_params == "both" and ctx.is_main:
                for compiled in modes[compile_mode]:
                    off, on = (next(r for r in results if r["shard_params"] == s and r["compiled"] == compiled
                                    and r["tp"] == args.tp[0] and r["pp"] == args.pp[0])
                               for s in (False, True))
                    print(f"compiled={compiled}: --shard_params holds {max(on['state_gb_per_rank']):.3f} GB of "
                          f"training state on its largest rank, {max(on['state_gb_per_rank']) / max(off['state_gb_per_rank']):.2f}x"
                          f" the unsharded {max(off['state_gb_per_rank']):.3f} GB; peak memory "
                          f"{max(on['peak_mem_allocated_gb_per_rank']) / max(off['peak_mem_allocated_gb_per_rank']):.2f}x"
                          + (" (CPU: process max RSS, which never falls, so the second figure includes the first's)"
                             if device.type != "cuda" else ""), flush=True)
        report = {"device": str(device), "gpu_name": gpu_name, "world_size": ctx.world_size, "dtype": cfg.dtype,
                  "peak_tflops": peak, "hardware": hw,
                  "config": {k: v for k, v in vars(cfg).items() if k != "from_checkpoint"},
                  "results": results, "torch": torch.__version__}
        if args.out and ctx.is_main:
            atomic_write_text(args.out, json.dumps(report, indent=2, default=str) + "\n", overwrite=True)
        return report
    finally:
        dist_utils.cleanup(ctx)


if __name__ == "__main__":
    run_cli(main)
