"""Run under torchrun (gloo): train_gpt.ShardedAdam against torch's own Adam (the reference implementation) fed
the same rank-summed gradients, then a resume of the reference's state into a fresh sharded optimizer. Writes rank
R's verdicts to OUT/rank{R}.json.

    torchrun --nproc_per_node=N tests/helpers/sharded_adam_ranks.py OUT backward    # 2 ranks
    torchrun --nproc_per_node=N tests/helpers/sharded_adam_ranks.py OUT synthetic   # any number

backward: real backward passes, 2 micro-batches per rank, GradientSync (Adam's gradients reduce-scattered vs
all-reduced). Only 2 ranks: a sum of two floats is the same in either order, of three it depends on the order, and
a reduce-scatter and an all-reduce may add in different orders. synthetic: gradients of multiples of 1/64 below
4, whose sums are exact in any order, and the optimizer's own collectives only.
"""
import copy
import json
import os
import sys

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import model as arch  # noqa: E402
import train_gpt  # noqa: E402
from gptlab.train.comm import GradientSync  # noqa: E402

ADAM = dict(betas=(0.8, 0.95), eps=1e-10, foreach=True)  # build_optimizers' settings on a CPU
MICRO = 2  # micro-batches per rank


def build(rank, world_size, sharded):
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=200, num_layers=2, num_heads=2, model_dim=32, num_val_emb=1))
    optimizers = train_gpt.build_optimizers(model, rank, world_size)
    if not sharded:  # the same groups under torch's Adam: its gradients all-reduced by GradientSync
        optimizers[0] = torch.optim.Adam([dict(g) for g in optimizers[0].param_groups], **ADAM)
    return model, optimizers, GradientSync(model, optimizers, world_size)


def train(model, optimizers, sync, rank, world_size, steps, seed):
    rows = world_size * MICRO
    gen = torch.Generator().manual_seed(seed)
    windows = arch.window_pair(1)
    for step in range(steps):
        batch = torch.randint(0, 199, (rows, 129), generator=gen)
        batch[:, 0] = 199
        for micro in range(MICRO):
            row = slice(rank * MICRO + micro, rank * MICRO + micro + 1)
            x, y = batch[row, :-1], batch[row, 1:]
            sync.armed = micro == MICRO - 1
            (model(x, model.attention_masks(x, 199, windows), y) / batch.numel()).backward()
        sync.finish()
        for group in optimizers[0].param_groups:  # a schedule changes the outer groups' lr
            group["lr"] = group["initial_lr"] * (1 - 0.2 * step)
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)


def synthetic_steps(model, optimizer, rank, world_size, steps, seed, sharded):
    for step in range(steps):
        for i, p in enumerate(model.parameters()):
            p.grad = None
            if any(p is q for g in optimizer.param_groups for q in g["params"]):
                gen = torch.Generator().manual_seed(seed * 1000 + step * 100 + i * world_size + rank)
                p.grad = torch.randint(-256, 256, p.shape, generator=gen).float() / 64
                if not sharded:
                    dist.all_reduce(p.grad)
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] * (1 - 0.2 * step)
        optimizer.step()


def state_of(optimizers):
    for opt in optimizers:
        if hasattr(opt, "gather_state"):
            opt.gather_state()
    return copy.deepcopy(optimizers[0].state_dict())  # a checkpoint's copy: loading it must not alias this run's


def same_state(a, b):
    return (a["param_groups"] == b["param_groups"] and sorted(a["state"]) == sorted(b["state"]) and
            all(torch.equal(a["state"][i][k], b["state"][i][k]) for i in b["state"] for k in b["state"][i]))


def main(out, mode):
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    runs = {}
    for sharded in (True, False):
        model, optimizers, sync = build(rank, world_size, sharded)
        if mode == "backward":
            train(model, optimizers, sync, rank, world_size, 3, seed=1)
        else:
            optimizers = optimizers[:1]
            synthetic_steps(model, optimizers[0], rank, world_size, 3, 1, sharded)
        runs[sharded] = (model, optimizers, sync, state_of(optimizers))
    (m_s, o_s, sync_s, state_s), (m_r, o_r, sync_r, state_r) = runs[True], runs[False]
    verdict = {"sharded_class": type(o_s[0]).__name__,
               "params_equal": all(torch.equal(a, b) for a, b in zip(m_s.parameters(), m_r.parameters())),
               "state_equal": same_state(state_s, state_r),
               "state_steps": sorted({float(s["step"]) for s in state_s["state"].values()})}
    # resume: the reference's whole-parameter state into a fresh sharded optimizer, then 2 more steps each
    m_new, o_new, sync_new = build(rank, world_size, True)
    m_new.load_state_dict(copy.deepcopy(m_r.state_dict()))
    o_new[0].load_state_dict(state_r)
    if mode == "backward":
        o_new[1].load_state_dict(copy.deepcopy(o_r[1].state_dict()))  # Muon: gathered by state_of
        train(m_new, o_new, sync_new, rank, world_size, 2, seed=2)
        train(m_r, o_r, sync_r, rank, world_size, 2, seed=2)
    else:
        synthetic_steps(m_new, o_new[0], rank, world_size, 2, 2, True)
        synthetic_steps(m_r, o_r[0], rank, world_size, 2, 2, False)
    verdict["resumed_params_equal"] = all(torch.equal(a, b) for a, b in zip(m_new.parameters(), m_r.parameters()))
    verdict["resumed_state_equal"] = same_state(state_of(o_new[:1]), state_of(o_r[:1]))
    verdict["adam_slice_elements"] = sum(s.numel() for s in o_s[0].flat_shards.slices)
    verdict["adam_elements"] = sum(p.numel() for g in o_s[0].param_groups for p in g["params"])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(verdict, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
