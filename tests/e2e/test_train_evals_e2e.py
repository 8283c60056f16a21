"""train_gpt.py --evals (issue 38): the benchmark suite scored inside a training run. The figures a run records at a
step equal evaluate.py's on the checkpoint it saved at that step (an independent path: a fresh process loading the
checkpoint); a resumed run scores the same figures at the same steps; a resume at the last step on 2 gloo ranks
scores what 1 rank scored; a task file changed mid-run stops the run with one error line; a task with no
downloaded rows is refused before training, naming download_evals.py."""
import json
import os
import sys

import pytest

from conftest import SHARED_DATA, free_port, run_script, run_scripts
from helpers.eval_tasks import data_dir_with
from helpers.tiny_runs import only_run_dir, run_acting, run_json, run_main_expecting, stopped_by_changed_file, tiny_args
from gptlab.train import records

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")

TASKS = ["arc_easy", "boolq", "winogrande", "copa"]
LIMIT = 5
FIGURES = ("acc", "acc_norm", "centred", "gold_bpb")


def evals_args(tiny, exp_dir, data, **overrides):
    # window_size 128: one block, so the windows of every step are the final ones evaluate.py uses
    flags = dict(train_steps=4, val_loss_every=0, evals=",".join(TASKS), evals_every=2, evals_limit=LIMIT,
                 evals_data_dir=data, window_size=128, checkpoint_every=2)
    flags.update(overrides)
    return tiny_args(tiny, exp_dir, **flags)


@pytest.fixture(scope="module")
def straight(tiny, tmp_path_factory):
    """A 4-step run scoring the suite at steps 2 and 4, with checkpoints there."""
    folder = tmp_path_factory.mktemp("train_evals")
    data = data_dir_with(folder / "data", TASKS, limit=LIMIT + 3)  # more rows than scored: --evals_limit counts
    run_script(["train_gpt.py"] + evals_args(tiny, folder / "exps", data), check=True, timeout=600)
    return folder, data, only_run_dir(folder / "exps")


def evals_rows(run_dir):
    """{step: {column: value}} of the metrics.csv rows with suite figures."""
    rows = records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
    return {r["step"]: {k: v for k, v in r.items() if k.startswith("evals_")} for r in rows
            if r.get("evals_core") is not None}


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def test_in_run_figures_equal_evaluate_py_on_the_checkpoint_of_that_step(straight):
    folder, data, run_dir = straight
    rows = evals_rows(run_dir)
    assert sorted(rows) == [2, 4]
    outs = {step: folder / f"eval_{step}" for step in (2, 4)}
    procs = run_scripts([["evaluate.py", os.path.join(run_dir, "checkpoints", f"step_{step:06d}.pt"), "--tasks",
                          ",".join(TASKS), "--limit", str(LIMIT), "--data_dir", data, "--out", str(out), "--quiet"]
                         for step, out in outs.items()], timeout=600)
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-2000:]
    results = run_json(run_dir, records.RESULTS_FILE)
    assert results["status"] == "finished"
    for step, out in outs.items():
        summary = json.loads((out / "summary.json").read_text())
        row = rows[step]
        assert close(row["evals_core"], summary["core"]) and close(row["evals_gold_bpb"], summary["gold_bpb"])
        for name in TASKS:
            theirs = summary["per_task"][name]
            assert theirs["n"] == LIMIT
            for f in FIGURES:  # metrics.csv keeps 8 significant digits
                assert close(row[f"evals_{name}_{f}"], theirs[f]), (step, name, f, row[f"evals_{name}_{f}"], theirs[f])
    final, theirs = results["evals"], json.loads((outs[4] / "summary.json").read_text())
    assert final["tasks"] == sorted(TASKS) and final["limit"] == LIMIT
    for key in ("core", "gold_bpb"):
        assert close(final[key], theirs[key], 1e-9) and all(
            close(x, y, 1e-9) for x, y in zip(final[key + "_ci95"], theirs[key + "_ci95"]))
    for name in TASKS:
        for f in FIGURES:
            assert close(final["per_task"][name][f], theirs["per_task"][name][f], 1e-9), (name, f)
            assert all(close(x, y, 1e-9) for x, y in zip(final["per_task"][name][f + "_ci95"],
                                                         theirs["per_task"][name][f + "_ci95"]))


def test_the_last_evaluation_keeps_its_examples_so_two_runs_pair_example_by_example(straight, tmp_path):
    """RUN/evals/in_run_step_<N>: evaluate.py's layout, per example the log-probabilities evaluate.py computes on the
    final checkpoint; `compare_experiments.py --evals RUN OTHER` takes the run folder itself."""
    folder, data, run_dir = straight
    examples = os.path.join(run_dir, "evals", "in_run_step_000004")
    assert sorted(os.listdir(examples)) == sorted([f"{t}.jsonl" for t in TASKS] + ["summary.json"])
    summary = json.loads(open(os.path.join(examples, "summary.json")).read())
    assert summary["in_run"] is True and summary["step"] == 4 and summary["fewshot"] == 0
    assert summary["dtype"] == "float32" and summary["core"] == run_json(run_dir, records.RESULTS_FILE)["evals"]["core"]
    out = tmp_path / "eval_4"
    run_script(["evaluate.py", os.path.join(run_dir, "checkpoints", "step_000004.pt"), "--tasks", ",".join(TASKS),
                "--limit", str(LIMIT), "--data_dir", data, "--out", str(out), "--quiet"], check=True, timeout=600)
    for name in TASKS:
        ours = [json.loads(line) for line in open(os.path.join(examples, f"{name}.jsonl"))]
        theirs = [json.loads(line) for line in open(out / f"{name}.jsonl")]
        assert len(ours) == len(theirs) == LIMIT
        for a, b in zip(ours, theirs):
            assert a["gold"] == b["gold"] and a["bytes"] == b["bytes"] and a["pred"] == b["pred"]
            assert all(close(x, y, 1e-9) for x, y in zip(a["logprob"], b["logprob"])), name
    proc = run_script(["compare_experiments.py", "--evals", run_dir, str(out)], check=True, timeout=300)
    assert all(name in proc.stdout for name in TASKS)


def test_a_resumed_run_scores_the_same_figures_at_the_same_steps_and_2_ranks_score_what_1_does(straight):
    folder, data, run_dir = straight
    ckpts = os.path.join(run_dir, "checkpoints")
    # from step 2: it redoes step 2's suite (as val and HellaSwag) and scores step 4's; from step 4 (the last) on
    # 2 ranks: only the final evaluations, on the weights 1 rank scored
    run_scripts([["train_gpt.py", "--resume", os.path.join(ckpts, "step_000002.pt"), "--experiments_dir",
                  str(folder / "resumed")],
                 ["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py", "--resume",
                  os.path.join(ckpts, "step_000004.pt"), "--experiments_dir", str(folder / "ranks2")]],
                check=True, timeout=600)
    want = evals_rows(run_dir)
    resumed = evals_rows(only_run_dir(folder / "resumed"))
    assert sorted(resumed) == [2, 4]
    assert resumed[2] == want[2]  # the same weights: the same figures
    for column, value in want[4].items():  # two more steps, resumed: equal to round-off
        assert close(resumed[4][column], value, 1e-5), column
    two = only_run_dir(folder / "ranks2")
    assert evals_rows(two) == {4: want[4]}
    a, b = run_json(run_dir, records.RESULTS_FILE), run_json(two, records.RESULTS_FILE)
    assert b["world_size"] == 2 and a["evals"] == b["evals"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")
@pytest.mark.parametrize("change, what", [("replace:{path}:{other}", "bytes"), ("remove:{path}", "it is gone")])
def test_a_task_file_changed_mid_run_stops_it_with_one_error(straight, tiny, tmp_path, change, what):
    _, data, _ = straight
    mine = data_dir_with(tmp_path / "data", TASKS, limit=LIMIT)
    path, other = os.path.join(mine, "boolq.jsonl"), os.path.join(data, "boolq.jsonl")  # the other: 3 more rows
    argv = evals_args(tiny, tmp_path / "exps", mine, checkpoint_every=0)
    proc = run_acting(argv, "train_step:1", change.format(path=path, other=other))  # before the first suite
    run_dir = stopped_by_changed_file(proc, path, what, tmp_path / "exps")
    assert evals_rows(run_dir) == {}  # no figure from the changed file


def test_a_task_without_downloaded_rows_is_refused_before_training(tiny, tmp_path):
    data = data_dir_with(tmp_path / "data", ["arc_easy"], limit=3)
    message = run_main_expecting(tiny, tmp_path, ["copa,piqa", "python download_evals.py --tasks copa,piqa",
                                                  f"--data_dir {data}"],
                                 evals="arc_easy,copa,piqa", evals_data_dir=data)
    assert "arc_easy" not in message  # its rows are there


def test_an_unknown_task_is_refused_before_training(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["unknown task 'arc_hard'"], evals="arc_hard")
