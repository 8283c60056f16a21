"""Run under torchrun (gloo, 2 ranks): a tiny ARCH model (gpt2, llama, model: model.py) laid out by --tp 2's
plan (tensor_parallel.parallelize: the module's tp_plan, sequence parallelism included) against the same model
whole, in float64 (the gradients of the parameters the plan names partial summed over the TP ranks, as
TPGradients does). Writes rank R's findings to OUT/rank{R}.json: the positions each block's input holds on this
rank, and the largest relative difference of the summed loss and of each weight's gradient (gathered whole) from
the whole model's.

    torchrun --nproc_per_node=2 tests/helpers/sequence_parallel_ranks.py ARCH OUT
"""
import copy
import importlib
import json
import os
import sys

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from gptlab.core.distributed import DistContext  # noqa: E402
from gptlab.train import tensor_parallel  # noqa: E402

EOT, B = 0, 2
T = {"gpt2": 16, "llama": 16, "model": 128}  # (model.py: rows of whole 128-token attention blocks)
CONFIGS = {"gpt2": dict(vocab_size=100, num_layers=2, num_heads=2, model_dim=32, max_seq_len=16),
           "llama": dict(vocab_size=100, num_layers=2, num_heads=2, num_kv_heads=2, model_dim=32, multiple_of=32,
                         max_seq_len=16),
           "model": dict(vocab_size=100, num_layers=2, num_heads=2, model_dim=32, max_seq_len=128, window_size=128)}


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def main():
    arch, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    ctx = DistContext(rank=dist.get_rank(), local_rank=dist.get_rank(), world_size=dist.get_world_size(),
                      device=torch.device("cpu"), backend="gloo")
    module = importlib.import_module(arch)
    torch.manual_seed(0)  # the same weights and batch on every rank
    whole = module.GPT(module.GPTConfig(**CONFIGS[arch])).double()
    if arch == "model":  # its head and output projections start at zero: every other gradient would be zero
        with torch.no_grad():
            for p in whole.parameters():
                p.add_(torch.randn_like(p) * 0.1)
    idx = torch.randint(1, 100, (B, T[arch]))
    idx[:, 5] = EOT  # a second document in every row
    targets = torch.randint(0, 100, (B, T[arch]))
    split = copy.deepcopy(whole)
    _, partial = tensor_parallel.parallelize(split, module, ctx, 2)
    positions = []
    for block in split.blocks:
        block.register_forward_pre_hook(lambda _, args: positions.append(args[0].size(1)))
    losses = []
    for model in (whole, split):
        loss = model(idx, model.attention_masks(idx, EOT, model.final_windows()), targets)
        loss.backward()
        losses.append(loss.detach())
    for name in partial:
        dist.all_reduce(split.get_parameter(name).grad)
    grads = {}
    for (name, p), q in zip(whole.named_parameters(), split.parameters()):
        g = q.grad.full_tensor() if hasattr(q.grad, "full_tensor") else q.grad
        grads[name] = rel(g, p.grad)
    with open(os.path.join(out, f"rank{ctx.rank}.json"), "w") as f:
        json.dump({"block_input_positions": positions, "loss": rel(losses[1], losses[0]), "grads": grads}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
