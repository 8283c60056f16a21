"""Run under torchrun (gloo): gptlab.train.comm.WholeMatrices, the whole-matrix step of Muon under --shard_params,
against the same function applied to whole matrices in one process. Writes rank R's verdicts to OUT/rank{R}.json.

    torchrun --nproc_per_node=3 tests/helpers/whole_matrices_ranks.py OUT

Every rank builds the same random matrices (one seed), keeps its row blocks as torch.chunk cuts them (the layout
FSDP2 gives a parameter; ranks past the last chunk hold none), and asks for fn(whole) back in row blocks; fn is
not elementwise (it mixes every row), so a block assembled in the wrong order or from the wrong matrix shows.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from gptlab.train.comm import WholeMatrices  # noqa: E402

# (shape, how many, group): rows that do not divide by 3 ranks, a shape whose last rank gets no rows (2 rows), a
# count that leaves ranks idle in the last round, and one shape in two groups (kept apart)
SHAPES = [((7, 5), 4, 0), ((2, 3), 2, 0), ((9, 4), 1, 0), ((7, 5), 2, 1)]


def fn(whole, g):  # (n, rows, cols) → (n, rows, cols), every output row depends on every input row
    return whole @ whole.mT @ whole + (g + 1) * whole.sum(dim=1, keepdim=True)


def main():
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    groups = [dict(params=[]), dict(params=[])]
    for shape, n, g in SHAPES:
        groups[g]["params"] += [torch.randn(shape, dtype=torch.float64) for _ in range(n)]
    whole = WholeMatrices(groups, rank, world)
    blocks = {}
    for group in groups:
        for p in group["params"]:
            chunks = p.chunk(world, dim=0)
            blocks[p] = chunks[rank] if rank < len(chunks) else p[:0]
    calls = []

    def recording(stack, g):
        calls.append([list(stack.shape), g])
        return fn(stack, g)

    got = whole.map_owned(blocks, recording)
    ok = []
    for g, group in enumerate(groups):
        for p in group["params"]:
            want = fn(p.unsqueeze(0), g)[0].chunk(world, dim=0)
            want = want[rank] if rank < len(want) else p[:0]
            ok.append(got[p].shape == want.shape and torch.allclose(got[p], want, rtol=1e-12, atol=1e-12))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"all_equal": all(ok), "n": len(ok), "calls": calls}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
