"""Training-step speed of train_gpt.py's model: tokens/s, MFU and peak memory, compiled and not.

    python bench/bench_train.py                       # GPU: GPT-2 small (12L/768), compiled and eager
    python bench/bench_train.py --device cpu          # CPU: a tiny config, so CI keeps this script working
    torchrun is not needed: one device, one process (multiply tokens/s by the GPU count for a DDP estimate).

One measured step = `--grad_acc_steps` forward + backward passes of `--device_batch_size` tokens each, then the
Adam/Muon update, exactly as in train_gpt.py (same model, masks, optimizers, autocast), after `--warmup` untimed
steps. The optimizer's share is timed on its own too: Muon's Newton–Schulz costs the same however many tokens
a step has, so a step of one small micro-batch understates what a real run (many micro-batches per update)
reaches; the GPU default is 8 micro-batches of 16,384 tokens (131,072 tokens per update).

FLOPs per step (train_gpt.training_flops, the count train_gpt.py's log uses too):
    matmul FLOPs  = 6 x tokens x N_matmul, N_matmul = parameters that are multiplied (q/k/v, attention output,
                    MLP and lm_head weights; embeddings and value embeddings are look-ups and count 0)
    attention     = 3 x 4 x head_dim x num_heads x sum over layers of P_layer
                    (forward QK^T and AV are 2 x head_dim multiply-adds per allowed query-key pair each; the
                    backward costs twice the forward), where P_layer is the number of query-key pairs the
                    layer's document-causal sliding-window mask actually allows in the benchmark batch
                    (train_gpt.attention_pairs counts them exactly, so masked-out work is not credited).
    MFU = FLOPs per step / step time / peak. Peak: --peak_tflops, else a known GPU's dense bf16 peak (H100 SXM
    989 TFLOP/s, ...), else n/a (CPU: n/a unless --peak_tflops is given).
"""
import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from gptlab.errors import UserError, run_cli  # noqa: E402
from gptlab.experiment import gpu_bf16_peak_tflops  # noqa: E402

GPU_DEFAULT = dict(num_layers=12, model_dim=768, num_heads=12, vocab_size=50304, seq_len=1024, device_batch_size=16384,
                   window_size=1792, steps=10, warmup=3, grad_acc_steps=8)
CPU_DEFAULT = dict(num_layers=4, model_dim=128, num_heads=4, vocab_size=1024, seq_len=256, device_batch_size=512,
                   window_size=256, steps=3, warmup=1, grad_acc_steps=1)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--num_layers", type=int)
    p.add_argument("--model_dim", type=int)
    p.add_argument("--num_heads", type=int)
    p.add_argument("--vocab_size", type=int)
    p.add_argument("--num_val_emb", type=int, default=2)
    p.add_argument("--seq_len", type=int, help="tokens per row (multiple of 128)")
    p.add_argument("--device_batch_size", type=int, help="tokens per micro-batch (multiple of seq_len)")
    p.add_argument("--grad_acc_steps", type=int, help="micro-batches per optimizer step (GPU default 8, CPU 1)")
    p.add_argument("--window_size", type=int, help="long sliding window in tokens (the end-of-training size)")
    p.add_argument("--doc_len", type=int, default=600, help="mean document length of the synthetic batch")
    p.add_argument("--steps", type=int, help="timed steps")
    p.add_argument("--warmup", type=int, help="untimed steps first (compilation happens here)")
    p.add_argument("--compile", choices=["both", "on", "off"], default=None, help="default: both on CUDA, off on CPU")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
    p.add_argument("--peak_tflops", type=float, default=None, help="peak for MFU (default: known GPU bf16 peak)")
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    return p


def synthetic_batch(rows, seq_len, vocab, eot, doc_len, gen):
    import torch

    x = torch.randint(0, vocab, (rows, seq_len + 1), generator=gen)
    x[x == eot] = 0
    starts = torch.rand(rows, seq_len + 1, generator=gen) < 1.0 / doc_len  # documents of mean length doc_len
    starts[:, 0] = True
    x[starts] = eot
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def bench_one(cfg, device, compiled, amp_dtype):
    import contextlib

    import torch

    import train_gpt

    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    head_dim = cfg["model_dim"] // cfg["num_heads"]
    model = train_gpt.GPT(vocab_size=cfg["vocab_size"], num_layers=cfg["num_layers"], num_heads=cfg["num_heads"],
                          head_dim=head_dim, model_dim=cfg["model_dim"], num_val_emb=cfg["num_val_emb"],
                          max_seq_len=cfg["seq_len"]).to(device)
    optimizers = train_gpt.build_optimizers(model)
    use_flex = device.type == "cuda"
    model_fwd = torch.compile(model, dynamic=False) if compiled else model
    train_gpt.use_compiled_flex_attention(use_flex and not compiled)
    eot = cfg["vocab_size"] - 1
    rows = cfg["device_batch_size"] // cfg["seq_len"]
    x, y = synthetic_batch(rows, cfg["seq_len"], cfg["vocab_size"], eot, cfg["doc_len"],
                           torch.Generator().manual_seed(0))
    x, y = x.to(device), y.to(device)
    windows = train_gpt.window_blocks(1, 1, cfg["window_size"])  # the final (largest) windows
    pairs = {name: int(train_gpt.attention_pairs(x, eot, blocks)) for name, blocks in zip(("long", "short"), windows)}
    matmul_flops, attn_flops = train_gpt.training_flops(model, x.numel(), pairs)
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext

    tokens_per_step = x.numel() * cfg["grad_acc_steps"]

    def step(update=True):
        for _ in range(cfg["grad_acc_steps"]):
            masks = train_gpt.build_attention_masks(x, eot, *windows, use_flex)
            with autocast():
                loss = model_fwd(x, masks, y) / tokens_per_step
            loss.backward()
        if update:
            for opt in optimizers:
                opt.step()
            model.zero_grad(set_to_none=True)
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t0 = time.perf_counter()
    for _ in range(cfg["warmup"]):
        step()
    sync()
    warmup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        loss = step()
    sync()
    step_s = (time.perf_counter() - t0) / cfg["steps"]
    if not torch.isfinite(loss):
        raise RuntimeError("benchmark loss is not finite")
    step(update=False)  # gradients for the optimizer-only timing (the update itself does not depend on them)
    with torch.no_grad():
        sync()
        t0 = time.perf_counter()
        for _ in range(cfg["steps"]):
            for opt in optimizers:
                opt.step()
        sync()
    optimizer_s = (time.perf_counter() - t0) / cfg["steps"]
    model.zero_grad(set_to_none=True)
    matmul_flops *= cfg["grad_acc_steps"]
    attn_flops *= cfg["grad_acc_steps"]
    from gptlab.experiment import peak_memory
    mem = peak_memory(device)
    return {"compiled": compiled, "step_time_s": step_s, "optimizer_time_s": optimizer_s,
            "tokens_per_step": tokens_per_step, "tokens_per_s": tokens_per_step / step_s,
            "flops_per_step": matmul_flops + attn_flops, "matmul_flops": matmul_flops, "attention_flops": attn_flops,
            "achieved_tflops": (matmul_flops + attn_flops) / step_s / 1e12, "warmup_s": warmup_s,
            "peak_mem_allocated_gb": mem["allocated_gb"], "peak_mem_reserved_gb": mem["reserved_gb"],
            "peak_mem_label": mem["label"], "n_params": sum(p.numel() for p in model.parameters())}


def main(argv=None):
    import torch

    from gptlab.distributed import resolve_device

    args = build_parser().parse_args(argv)
    device = resolve_device(args.device)
    cfg = dict(GPU_DEFAULT if device.type == "cuda" else CPU_DEFAULT)
    cfg["num_val_emb"] = args.num_val_emb
    cfg["doc_len"] = args.doc_len
    for key in ("num_layers", "model_dim", "num_heads", "vocab_size", "seq_len", "device_batch_size", "window_size",
                "steps", "warmup", "grad_acc_steps"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg["model_dim"] % cfg["num_heads"] or (cfg["model_dim"] // cfg["num_heads"]) % 4:
        raise UserError(f"--model_dim {cfg['model_dim']} / --num_heads {cfg['num_heads']} must give a head_dim that "
                        "is a multiple of 4")
    for key in ("seq_len", "window_size"):
        if cfg[key] % 128:
            raise UserError(f"--{key} {cfg[key]} must be a multiple of 128")
    if cfg["device_batch_size"] % cfg["seq_len"]:
        raise UserError(f"--device_batch_size {cfg['device_batch_size']} must be a multiple of "
                        f"--seq_len {cfg['seq_len']}")
    if cfg["steps"] < 1 or cfg["warmup"] < 0 or cfg["grad_acc_steps"] < 1:
        raise UserError("--steps and --grad_acc_steps must be >= 1 and --warmup >= 0")
    compile_mode = args.compile or ("both" if device.type == "cuda" else "off")
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    amp_dtype = torch.bfloat16 if dtype == "bfloat16" else None
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    peak = args.peak_tflops or (gpu_bf16_peak_tflops(gpu_name) if gpu_name else None)
    print(f"device {device} ({gpu_name or 'CPU'}), dtype {dtype}, config {json.dumps(cfg)}", flush=True)
    results = []
    for compiled in {"both": [False, True], "on": [True], "off": [False]}[compile_mode]:
        try:
            r = bench_one(cfg, device, compiled, amp_dtype)
        except torch.cuda.OutOfMemoryError:
            raise UserError("CUDA out of memory; lower --device_batch_size or --seq_len") from None
        r["mfu"] = r["achieved_tflops"] / peak if peak else None
        results.append(r)
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a (no peak known; pass --peak_tflops)"
        print(f"compiled={compiled}: {r['tokens_per_s']:,.0f} tokens/s, step {1000 * r['step_time_s']:.1f} ms "
              f"({r['tokens_per_step']:,} tokens; optimizer {1000 * r['optimizer_time_s']:.1f} ms of it), "
              f"{r['achieved_tflops']:.3f} TFLOP/s achieved (attention "
              f"{100 * r['attention_flops'] / r['flops_per_step']:.1f}% of FLOPs), MFU {mfu}, peak memory {r['peak_mem_allocated_gb']:.2f} GB allocated / "
              f"{r['peak_mem_reserved_gb']:.2f} GB reserved ({r['peak_mem_label']})", flush=True)
    report = {"device": str(device), "gpu_name": gpu_name, "dtype": dtype, "peak_tflops": peak, "config": cfg,
              "results": results, "torch": torch.__version__}
    if args.out:
        from gptlab.fileio import atomic_write_text
        atomic_write_text(args.out, json.dumps(report, indent=2) + "\n", overwrite=True)
    return report


if __name__ == "__main__":
    run_cli(main)
