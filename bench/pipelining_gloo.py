"""The minimal pipelining reproduction of docs/training.md (pytorch #132644: can gloo run a schedule?): two ranks,
four Linear layers in two stages, four micro-batches, GPipe or 1F1B; the last stage prints the pipelined loss and
the unpipelined one.

    torchrun --nproc_per_node=2 bench/pipelining_gloo.py 1f1b      # or gpipe
"""
import sys

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


def main(schedule):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    with torch.no_grad():
        reference = layers(x).sub(y).pow(2).sum()
    stage = PipelineStage(layers[:2] if rank == 0 else layers[2:], rank, 2, torch.device("cpu"))
    sched = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](
        stage, n_microbatches=4, loss_fn=lambda out, target: out.sub(target).pow(2).sum())
    losses = []
    if rank == 0:
        sched.step(x)
    else:
        sched.step(target=y, losses=losses)
        print(f"{schedule}: pipelined loss {float(sum(l.detach() for l in losses)):.6f}, "
              f"unpipelined {float(reference):.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "1f1b")
