"""train_gpt.py with a mutant Muon under --tp: Newton–Schulz on each rank's block of a matrix instead of the whole
matrix (tests/e2e/test_tensor_parallel.py must see its curve leave the 1-rank one)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from gptlab.core.errors import run_cli  # noqa: E402
from gptlab.train import tensor_parallel  # noqa: E402


def map_blocks(self, blocks, fn):
    out = {}
    for (_, g), params in self.groups:
        out.update(zip(params, fn(torch.stack([blocks[p] for p in params]), g)))
    return out


if __name__ == "__main__":
    tensor_parallel.WholeMatricesTP.map_owned = map_blocks
    import train_gpt

    run_cli(train_gpt.main)
