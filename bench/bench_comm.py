"""Our hand-written gradient communication against torch's own, on the same model, data and optimizer mathematics.

    python bench/bench_comm.py                      # 2 gloo ranks on this CPU (relaunches itself under torchrun)
    python bench/bench_comm.py --nproc 4 --model_dim 384 --num_layers 6 --steps 8
    python bench/bench_comm.py --estimate_only      # the analytical figures for NCCL (no process group)

Three layouts of one optimizer step (train_gpt.py's modded recipe: Muon for the hidden matrices, Adam for
embeddings, head and scalars), each `--steps` times after `--warmup` untimed steps, on each rank:
  ours      GradientSync (bucketed all-reduce / reduce-scatter started by post-accumulate-grad hooks), Muon's
            matrices dealt out one per rank (MatrixOwners: reduce-scatter, Newton-Schulz at the owner, all-gather)
            and Adam sharded ZeRO-1 style (ShardedAdam: reduce-scatter, a slice each, all-gather): train_gpt.py's
            default on several ranks
  torch     DistributedDataParallel (all-reduce of every gradient in its buckets) + ZeroRedundancyOptimizer for
            Adam (its state sharded, the updated parameters broadcast) + Muon on every rank for every matrix (DDP
            has no owner: each rank orthogonalises all of them)
  fsdp2     torch's FSDP2 (fully_shard: parameters, gradients and state sharded by rows) + our WholeMatrices for
            Muon (all-to-all of whole matrices to owners): train_gpt.py --shard_params
Printed per layout: the median step time, the bytes each rank sent per step (measured: /proc/self/io's wchar,
which counts the gloo sockets' writes; the benchmark writes no files while timed), and the largest difference of
its losses from `ours` (the same mathematics: round-off only).

The analytical part (--estimate_only, and printed after the measurement): for GPT-2 small's modded shape on 8
H100s with NCCL, bytes per rank and Newton-Schulz FLOPs per rank of each layout, and the seconds they cost at the
link bandwidth and matmul rate of gptlab/core/gpus.py's table (gptlab/train/perf_estimate.py's constants).
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

LAYOUTS = ("ours", "torch", "fsdp2")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="gloo ranks (default 2)")
    p.add_argument("--model_dim", type=int, default=256)
    p.add_argument("--num_layers", type=int, default=4)
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--vocab_size", type=int, default=8192)
    p.add_argument("--seq_len", type=int, default=256, help="tokens per rank per step")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--estimate_only", action="store_true")
    p.add_argument("--gpu", default="NVIDIA H100 80GB HBM3", help="the GPU of the analytical figures")
    p.add_argument("--estimate_world_size", type=int, default=8)
    return p.parse_args(argv)


def wchar():
    """Bytes this process has written through write/send system calls (Linux)."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])


def build(args, seed=0):
    import torch
    import model as arch

    torch.manual_seed(seed)
    return arch.GPT(arch.GPTConfig(vocab_size=args.vocab_size, num_layers=args.num_layers, num_heads=args.num_heads,
                                   model_dim=args.model_dim))


def make_step(layout, args, ctx):
    """(model, step(x, y) → loss float) for one layout on this rank."""
    import torch
    import train_gpt
    from gptlab.train import fsdp
    from gptlab.train.comm import GradientSync

    model = build(args)
    windows = model.final_windows()
    if layout == "ours":
        optimizers = train_gpt.build_optimizers(model, ctx.rank, ctx.world_size)
        sync = GradientSync(model, optimizers, ctx.world_size)
        forward = model
    elif layout == "fsdp2":
        fsdp.shard_model(model, ctx)
        optimizers = train_gpt.build_optimizers(model, ctx.rank, ctx.world_size)
        sync = fsdp.ShardedGradients(model, optimizers)
        forward = model
    else:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel

        single = train_gpt.build_optimizers(model, 0, 1)  # the same groups and settings, unsharded
        adam, muon = single
        zero = ZeroRedundancyOptimizer(adam.param_groups[0]["params"], optimizer_class=torch.optim.Adam,
                                       lr=adam.param_groups[0]["lr"], betas=(0.8, 0.95), eps=1e-10)
        for g in adam.param_groups[1:]:
            zero.add_param_group(dict(params=g["params"], lr=g["lr"]))
        optimizers = [zero, muon]
        forward = DistributedDataParallel(model, find_unused_parameters=False, broadcast_buffers=False)
        sync = None

    def step(x, y):
        masks = model.attention_masks(x, 0, windows, False)
        if sync is not None:
            sync.armed = True
        loss = forward(x, masks, y) / x.numel()
        # DDP averages gradients over ranks, GradientSync and FSDP2 here sum them: the same gradients for all three
        (loss * (ctx.world_size if sync is None else 1)).backward()
        if sync is not None:
            sync.finish()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
        return loss.detach()

    return model, step


def measure(layout, args, ctx):
    import torch
    import torch.distributed as dist

    model, step = make_step(layout, args, ctx)
    g = torch.Generator().manual_seed(1234 + ctx.rank)
    batches = [torch.randint(1, args.vocab_size, (2, args.seq_len + 1), generator=g)
               for _ in range(args.warmup + args.steps)]
    losses, times, sent = [], [], []
    for i, batch in enumerate(batches):
        x, y = batch[:, :-1].reshape(1, -1).contiguous(), batch[:, 1:].reshape(1, -1).contiguous()
        dist.barrier()
        w0, t0 = wchar(), time.perf_counter()
        loss = step(x, y)
        t1, w1 = time.perf_counter(), wchar()
        dist.barrier()
        if i >= args.warmup:
            times.append(t1 - t0)
            sent.append(w1 - w0)
        total = loss.clone()
        dist.all_reduce(total)
        losses.append(total.item() / ctx.world_size)
    return {"step_s": statistics.median(times), "sent_bytes": statistics.median(sent), "losses": losses,
            "params": sum(p.numel() for p in model.parameters())}


def estimate(args):
    """{layout: (bytes per rank, Newton-Schulz FLOPs per rank, Adam state bytes per rank)} for GPT-2 small's modded
    shape at args.estimate_world_size ranks, and the hardware row."""
    import torch
    import model as arch
    import train_gpt
    from gptlab.train import perf_estimate

    with torch.device("meta"):
        model = arch.GPT(arch.GPTConfig(vocab_size=50257, num_layers=12, num_heads=6, model_dim=768))
    n = args.estimate_world_size
    adam, muon = train_gpt.build_optimizers(model, 0, 1)
    muon_params = [p for g in muon.param_groups for p in g["params"]]
    adam_params = [p for g in adam.param_groups for p in g["params"]]
    elt = 4  # float32 gradients and parameters
    all_bytes = sum(p.numel() for p in muon_params + adam_params) * elt
    adam_bytes = sum(p.numel() for p in adam_params) * elt
    ns_one = sum(perf_estimate.newton_schulz_flops(p.shape, 5) for p in muon_params)
    ns_ours, _ = perf_estimate.optimizer_work([adam, muon], n)
    ns_ours_flops = ns_ours
    ours = perf_estimate.communication_bytes([adam, muon], n)
    ring = 2 * (n - 1) / n  # an all-reduce sends 2 (n-1)/n of the buffer per rank; a broadcast of a 1/n share (n-1)/n
    return {
        "ours": (ours, ns_ours_flops, 2 * adam_bytes / n),
        "torch": (ring * all_bytes + (n - 1) / n * adam_bytes, ns_one, 2 * adam_bytes / n),
        "fsdp2": (ring * all_bytes + 2 * (n - 1) / n * sum(p.numel() for p in muon_params) * elt, ns_ours_flops,
                  2 * adam_bytes / n),
    }, perf_estimate.hardware_constants(args.gpu), n


def print_estimate(args):
    rows, hw, n = estimate(args)
    print(f"analytical, GPT-2 small's modded shape (12 x 768, vocab 50,257), {n} ranks, {args.gpu}, float32 "
          "gradients:")
    print(f"{'layout':7s} {'sent/rank/step':>15s} {'NS GFLOP/rank':>14s} {'Adam state/rank':>16s}"
          f" {'comm s':>8s} {'NS s':>8s}")
    for layout, (sent, ns, state) in rows.items():
        comm_s = sent / (hw["link_efficiency"] * hw["link_bytes_s"])
        ns_s = ns / (hw["matmul_efficiency"] * hw["bf16_tflops"] * 1e12)
        print(f"{layout:7s} {sent / 1e6:12.1f} MB {ns / 1e9:14.1f} {state / 1e6:13.1f} MB {comm_s * 1e3:6.2f}ms "
              f"{ns_s * 1e3:6.2f}ms")
    print("  fsdp2: FSDP2's all-gather of every parameter in forward and backward and reduce-scatter of the "
          "gradients (3 (n-1)/n of them) is counted as an all-reduce plus Muon's whole-matrix all-to-alls; "
          "its gain is memory, not traffic")


def worker(args):
    import torch
    from gptlab.core import distributed as dist_utils

    torch.set_num_threads(1)
    ctx = dist_utils.setup("cpu")
    try:
        results = {layout: measure(layout, args, ctx) for layout in args.layouts.split(",")}
        if ctx.is_main:
            base = results.get("ours")
            print(f"{ctx.world_size} gloo ranks on this CPU, modded model {args.num_layers} x {args.model_dim} "
                  f"({results[next(iter(results))]['params']:,} parameters), {args.seq_len * 2} tokens per rank per "
                  f"step, median of {args.steps} steps after {args.warmup}; load average {os.getloadavg()[0]:.1f}")
            print(f"{'layout':7s} {'step':>9s} {'sent/rank/step':>15s} {'max |loss - ours|':>18s}")
            for layout, r in results.items():
                diff = (max(abs(a - b) for a, b in zip(r["losses"], base["losses"])) if base else float("nan"))
                print(f"{layout:7s} {r['step_s'] * 1e3:7.1f}ms {r['sent_bytes'] / 1e6:12.2f} MB {diff:18.2e}")
            print()
            print_estimate(args)
    finally:
        dist_utils.cleanup(ctx)


def main(argv=None):
    args = parse_args(argv)
    if args.estimate_only:
        print_estimate(args)
        return
    if "RANK" in os.environ:
        worker(args)
        return
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:])]
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(subprocess.call(command, env={**os.environ, "OMP_NUM_THREADS": "1"}))


if __name__ == "__main__":
    main()
