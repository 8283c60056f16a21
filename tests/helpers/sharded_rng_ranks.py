"""Run under torchrun (gloo): a sharded checkpoint (--shard_params) keeps every rank's own random generators, and a
resume gives each rank back the ones it saved. Writes rank R's draws to OUT/rank{R}.json.

    torchrun --nproc_per_node=2 tests/helpers/sharded_rng_ranks.py OUT

Each rank seeds its generators differently (as ranks that drew different numbers of random values would be), saves
a sharded checkpoint, and records the draws those generators give next; then draws more (moving them on), resumes
from the folder the way train_gpt.py does (gptlab.train.run.restore_training_state), and draws again: the draws
after the resume must be the recorded ones, rank by rank.
"""
import json
import os
import random
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import model as arch  # noqa: E402
import train_gpt  # noqa: E402
from gptlab.core import distributed as dist_utils  # noqa: E402
from gptlab.checkpoint import checkpointing, sharded_checkpoint  # noqa: E402
from gptlab.train import fsdp  # noqa: E402
from gptlab.train.run import restore_training_state  # noqa: E402


class Loader:  # the data position is not what this checks
    def load_state_dict(self, state, new_data=False):
        return None


def draws():
    return {"torch": torch.rand(4).tolist(), "python": [random.random() for _ in range(4)]}


def main():
    out = sys.argv[1]
    ctx = dist_utils.setup("cpu")
    torch.manual_seed(0)
    config = dict(vocab_size=128, num_layers=2, num_heads=2, head_dim=8, model_dim=16, num_val_emb=1,
                  window_size=128, max_seq_len=128)
    model = arch.GPT(arch.GPTConfig(**config))
    fsdp.shard_model(model, ctx)
    optimizers = train_gpt.build_optimizers(model, ctx.rank, ctx.world_size)
    torch.manual_seed(1000 + ctx.rank)
    random.seed(2000 + ctx.rank)
    saved = checkpointing.rng_states()
    expected = draws()  # what the saved generators give next
    path = os.path.join(out, "step_000001")
    sharded_checkpoint.save(path, ctx, model, optimizers, model_config=config, step=1, args={}, tokenizer={},
                            dataloader_state={}, rng_states=saved)
    draws()  # move the generators on, as the rest of a run would
    ckpt = checkpointing.load_checkpoint(path, load_weights=False)
    restore_training_state(ckpt, model, optimizers, Loader(), ctx)
    with open(os.path.join(out, f"rank{ctx.rank}.json"), "w") as f:
        json.dump({"expected": expected, "after_resume": draws()}, f)
    dist_utils.cleanup(ctx)


if __name__ == "__main__":
    main()
