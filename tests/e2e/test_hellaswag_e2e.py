"""The HellaSwag evaluator on 2 ranks (torchrun, gloo) gives the same totals as on 1. The evaluator against a reference
scorer: tests/unit/test_hellaswag.py."""
import json
import os

from conftest import HELLASWAG_VAL, REPO, free_port, run_script

HELPERS = os.path.join(REPO, "tests", "helpers")


def test_two_ranks_give_the_same_totals_as_one(tmp_path):
    limit = 21  # odd: the ranks get 11 and 10 examples
    script = os.path.join(HELPERS, "hellaswag_ranks.py")
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_script([script, HELLASWAG_VAL, str(limit), str(one)], check=True, timeout=300)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), script, HELLASWAG_VAL,
                str(limit), str(two)], check=True, timeout=300)
    single = json.loads((one / "rank0.json").read_text())
    ranks = [json.loads((two / f"rank{r}.json").read_text()) for r in range(2)]
    assert single["world_size"] == 1 and ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    keys = ["n", "acc", "acc_ci95", "acc_norm", "acc_norm_ci95", "acc_correct", "acc_norm_correct"]
    for result in ranks:
        assert {k: result[k] for k in keys} == {k: single[k] for k in keys}
    assert single["n"] == limit
