"""Preemption at every point of a run's end loses nothing (issue 37, item 3): SIGTERM during the last step, the
final validation, after the final checkpoint, during the final HellaSwag or while results.json is written leaves
a run recorded as interrupted with the figures computed before the signal and a checkpoint of the last step; its
recorded resume command runs only the missing evaluations and finishes the run with the figures of the
uninterrupted run (docs/faults.md, 'SIGTERM (preemption) and Ctrl-C' and 'Checkpoints and resume')."""
import os
import sys

import pytest

from conftest import HELLASWAG_VAL, SHARED_DATA, free_port, run_script
from helpers.tiny_runs import only_run_dir, run_acting, run_json, run_recorded_command, tiny_args
from gptlab.train import records

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")]

STEPS = 4
FLAGS = dict(train_steps=STEPS, val_loss_every=0, hellaswag_limit=10, hellaswag_path=HELLASWAG_VAL)
FINAL = ("final_val_loss", "final_val_bpb", "hellaswag")


def results_of(run_dir):
    return run_json(run_dir, records.RESULTS_FILE)


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    """results.json of the uninterrupted run on 1 or 2 ranks (made when first asked for)."""
    made = {}

    def results(ranks):
        if ranks not in made:
            exp_dir = tmp_path_factory.mktemp("straight")
            launch = ["train_gpt.py"] if ranks == 1 else ["torchrun", f"--nproc_per_node={ranks}", "--master_port",
                                                          free_port(), "train_gpt.py"]
            run_script(launch + tiny_args(tiny, exp_dir, save_model=True, **FLAGS), check=True)
            made[ranks] = results_of(only_run_dir(exp_dir))
        return made[ranks]

    return results


@pytest.mark.parametrize("at, save_model, computed, ranks", [
    ("train_step:4", False, (), 1),  # the last step: it stops after it with a checkpoint, as any step
    ("evaluate_val:1", True, (), 1),
    ("save_checkpoint:1:after", True, (), 1),  # the final checkpoint is complete
    ("evaluate_hellaswag_in_run:1", True, ("final_val_loss", "final_val_bpb"), 1),
    ("write_results:1", True, FINAL, 1),
    ("evaluate_hellaswag_in_run:1", True, ("final_val_loss", "final_val_bpb"), 2),  # both ranks, as torchrun sends
])
def test_a_sigterm_at_the_end_of_a_run_is_finished_by_its_resume_command(tiny, tmp_path, straight, at, save_model,
                                                                         computed, ranks):
    stopped = run_acting(tiny_args(tiny, tmp_path, save_model=save_model, **FLAGS), at, "TERM", ranks,
                         GPTLAB_TEST_RANK="all")
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    assert ranks > 1 or (stopped.returncode == 143 and "Traceback" not in stopped.stderr), stopped.stderr[-3000:]
    first = only_run_dir(tmp_path)
    results = results_of(first)
    ckpt = os.path.join(first, records.CHECKPOINT_DIR, f"step_{STEPS:06d}.pt")
    assert (results["status"], results["steps"], results["checkpoint"]) == ("interrupted", STEPS, ckpt)
    assert {key: results[key] for key in FINAL if key in results} == {key: straight(ranks)[key] for key in computed}

    resumed = run_recorded_command(results["resume_command"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = sorted(os.path.join(tmp_path, d) for d in os.listdir(tmp_path))[1]
    finished = results_of(second)
    assert finished["status"] == "finished" and finished["steps"] == STEPS
    assert {key: finished[key] for key in FINAL} == {key: straight(ranks)[key] for key in FINAL}
    assert finished["checkpoint"] == ckpt  # the run's final checkpoint is the one it resumed from
    rows = records.read_metrics(os.path.join(second, records.METRICS_FILE))
    assert [r["step"] for r in rows if r["train_loss"] is not None] == []  # nothing trained again
