"""Run evaluate_hellaswag on every rank (python or torchrun) and write each rank's result to OUT_DIR/rank{r}.json.

    python tests/helpers/hellaswag_ranks.py HELLASWAG_JSONL LIMIT OUT_DIR
"""
import json
import os
import sys

import torch

from gptlab.core.distributed import cleanup, setup
from gptlab.evals.hellaswag import evaluate_hellaswag
from hellaswag_tiny import TinyCausalLM, make_tokenizer  # this script's folder is sys.path[0]


def main(argv=None):
    data_path, limit, out_dir = argv if argv is not None else sys.argv[1:]
    torch.set_num_threads(1)
    ctx = setup(device="cpu", timeout_s=120)
    try:
        encoding = make_tokenizer(os.path.join(out_dir, f"tok_rank{ctx.rank}.pkl"))
        model = TinyCausalLM(encoding.n_vocab)
        result = evaluate_hellaswag(model, encoding, data_path, ctx=ctx, limit=int(limit), batch_size=4,
                                    progress=False)
        result["world_size"] = ctx.world_size
        with open(os.path.join(out_dir, f"rank{ctx.rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        cleanup(ctx)


if __name__ == "__main__":
    main()
