"""Adam sharded across ranks (train_gpt.ShardedAdam over gptlab.train.comm.FlatShards) is torch's Adam: its
parameters and state_dict equal, bit for bit, those of torch.optim.Adam given the same rank-summed gradients (2
ranks x 2 micro-batches of real backward passes through GradientSync; 3 ranks with gradients whose sums are exact
in any order), each rank keeps only its slice of the state, and a whole-parameter state (a checkpoint from any
world size) resumes into it exactly."""
import json
import os

import pytest

from conftest import REPO, free_port, run_script


@pytest.mark.parametrize("world_size, mode", [(2, "backward"), (3, "synthetic")])
def test_sharded_adam_equals_torch_adam_and_resumes_from_its_state(tmp_path, world_size, mode):
    run_script(["torchrun", f"--nproc_per_node={world_size}", "--master_port", str(free_port()),
                os.path.join(REPO, "tests", "helpers", "sharded_adam_ranks.py"), str(tmp_path), mode], check=True)
    for rank in range(world_size):
        with open(tmp_path / f"rank{rank}.json") as f:
            v = json.load(f)
        assert v["sharded_class"] == "ShardedAdam"
        assert v["params_equal"] and v["state_equal"], v
        assert v["state_steps"] == [3.0]
        assert v["resumed_params_equal"] and v["resumed_state_equal"], v
        # each rank holds a 1/world_size slice of every group's flat (rounded up per flat), not the whole state
        assert v["adam_slice_elements"] * world_size - v["adam_elements"] in range(0, 4 * world_size)
