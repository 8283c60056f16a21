"""A CPU run sets torch's threads per local rank and records them with the machine's load (issue 39: torch's
default threads on a loaded 2-core machine made runs ~4x slower, and the thread count was recorded nowhere)."""
import os

import pytest

from conftest import SHARED_DATA, run_script
from helpers.tiny_runs import only_run_dir, run_json, tiny_args

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


def test_a_cpu_run_shares_the_cores_between_its_local_ranks_and_records_threads_and_load(tiny, tmp_path):
    cores = len(os.sched_getaffinity(0))
    envs = {"shared": {"OMP_NUM_THREADS": None, "LOCAL_WORLD_SIZE": "2"},  # torchrun's count of this node's ranks
            "omp": {"OMP_NUM_THREADS": "3"}}  # the user's choice wins
    procs = [run_script(["train_gpt.py", *tiny_args(tiny, tmp_path / name, train_steps=2, val_loss_every=0)],
                        env_extra=env) for name, env in envs.items()]
    assert all(p.returncode == 0 for p in procs), [p.stderr[-2000:] for p in procs]
    shared = run_json(only_run_dir(tmp_path / "shared"), "config.json")
    assert shared["cpu_threads"] == max(1, cores // 2) and shared["cpu_cores"] == cores
    assert "2" in shared["cpu_threads_source"]
    omp = run_json(only_run_dir(tmp_path / "omp"), "config.json")
    assert omp["cpu_threads"] == 3 and omp["cpu_threads_source"] == "OMP_NUM_THREADS"
    for name in envs:
        run_dir = only_run_dir(tmp_path / name)
        start, end = run_json(run_dir, "config.json")["load_avg_start"], run_json(run_dir, "results.json")["load_avg_end"]
        assert len(start) == len(end) == 3 and all(x >= 0 for x in start + end)
