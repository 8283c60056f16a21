"""Sweeps under faults (issue 24, items 4, 17, 23, 24): grid values that clean up to one run name, a malformed sweep
record, two identical sweeps at once, and a sweep killed outright. The training command is a stand-in script
(tests write it here) so that each case takes seconds: what is tested is the sweep around it."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO
from gptlab.core.errors import UserError
from gptlab.train import sweep_grid as sw

# The stand-in for train_gpt.py, by the word in EXPERIMENTS_DIR/mode: sleep (write its pid, then sleep), ok (write a
# finished run folder and say so), silent_ok (exit 0 without a run folder).
STAND_IN = textwrap.dedent("""
    import json, os, sys, time
    args = sys.argv[1:]
    flag = lambda name: args[args.index(name) + 1]
    exp = flag("--experiments_dir")
    mode = open(os.path.join(exp, "mode")).read()
    if mode == "sleep":
        with open(os.path.join(exp, "child.pid"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    elif mode == "ok":
        run = os.path.join(exp, "20260101_000000_" + flag("--model_name"))
        os.makedirs(run, exist_ok=True)
        with open(os.path.join(run, "results.json"), "w") as f:
            json.dump({"status": "finished", "model_name": flag("--model_name"), "seed": int(flag("--seed"))}, f)
        print("run folder: " + run, flush=True)
""")


@pytest.fixture
def stand_in(tmp_path):
    path = tmp_path / "stand_in.py"
    path.write_text(STAND_IN)
    return str(path)


def _sweep(exp, mode):
    os.makedirs(exp, exist_ok=True)
    with open(os.path.join(exp, "mode"), "w") as f:
        f.write(mode)
    return sw.plan_sweep("Sw", [("lr_scale", ["1", "2"])], [0], [])


def test_grid_values_that_clean_up_to_one_name_are_refused_naming_both():
    with pytest.raises(UserError) as err:
        sw.plan_sweep("Sw", [("tokenizer", ["a/b.pkl", "a-b.pkl"]), ("lr_scale", ["1"])], [0], [])
    message = str(err.value)
    assert "\n" not in message and "'a/b.pkl'" in message and "'a-b.pkl'" in message
    assert "Sw_tokenizera-b.pkl_lr_scale1" in message


def test_a_point_is_finished_only_in_its_own_folder(tmp_path, stand_in):
    exp = str(tmp_path / "e")
    sweep = sw.run_sweep(_sweep(exp, "ok"), stand_in, exp)
    assert [p.status for p in sweep.points] == ["finished", "finished"]
    path = sw.sweep_record_path(exp, "Sw")
    with open(path) as f:
        record = json.load(f)
    # the record says the first point failed, and points it at the second point's (finished) folder
    record["points"][0].update(status="failed", run_dir=record["points"][1]["run_dir"])
    with open(path, "w") as f:
        json.dump(record, f)
    again = _sweep(exp, "silent_ok")  # exits 0 without a run folder of its own
    sw.load_previous(again, path)
    assert again.points[0].status == "failed"
    sw.run_sweep(again, stand_in, exp)
    assert again.points[0].status == "failed" and again.points[1].status == "finished"
    # a "finished" point whose folder holds another point's run is run again
    record["points"][0].update(status="finished")
    with open(path, "w") as f:
        json.dump(record, f)
    third = _sweep(exp, "silent_ok")
    sw.load_previous(third, path)
    assert third.points[0].status == "pending" and third.points[1].status == "finished"


@pytest.mark.parametrize("content", [
    "[" * 100_000 + "]" * 100_000, "[]", '{"format": "gptlab-sweep", "grid": 5}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale"]]}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": [], "points": [1]}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": [], '
    '"points": [{"seed": 0}]}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": [], '
    '"points": [{"model_name": "Sw_lr_scale1", "seed": 0, "status": "finished", "run_dir": 7}]}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": [], '
    '"points": [{"model_name": "Sw_lr_scale1", "seed": 0, "status": "failed", "error": ["x"]}]}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": "--x"}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": [], '
    '"nproc_per_node": "1"}',
    '{"format": "gptlab-sweep", "grid": [["lr_scale", ["1", "2"]]], "train_flags": [], '
    '"points": [{"model_name": "Sw_lr_scale1", "seed": 0, "status": "bogus"}]}',
], ids=lambda content: content[:40])  # short ids: the test's id goes into the environment of the runs
def test_a_malformed_record_is_one_error_naming_it_and_the_way_out(tmp_path, stand_in, content):
    exp = str(tmp_path)
    path = sw.sweep_record_path(exp, "Sw")
    with open(path, "w") as f:
        f.write(content)
    for dry_run in (True, False):
        with pytest.raises(UserError) as err:
            sw.run_sweep(_sweep(exp, "ok"), stand_in, exp, dry_run=dry_run)
        message = str(err.value)
        assert path in message and "is not a readable sweep record" in message and "--overwrite" in message
        assert "\n" not in message
    sweep = sw.run_sweep(_sweep(exp, "ok"), stand_in, exp, overwrite=True)
    assert [p.status for p in sweep.points] == ["finished", "finished"]


DRIVER = textwrap.dedent("""
    import sys
    from gptlab.train import sweep_grid as sw
    if sys.argv[3] == "watcher":
        sw._libc_prctl = lambda: None  # as off Linux
    sw.run_sweep(sw.plan_sweep("Sw", [("lr_scale", ["1", "2"])], [0], []), sys.argv[1], sys.argv[2])
""")


def _start_driver(stand_in, exp, how):
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, stand_in, exp, how], cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    pid_file = os.path.join(exp, "child.pid")
    deadline = time.time() + 60
    while not (os.path.exists(pid_file) and open(pid_file).read()):
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "the stand-in never started"
        time.sleep(0.1)
    return proc, int(open(pid_file).read())


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is gone too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["prctl", "watcher"])
def test_kill_9_of_the_sweep_ends_its_training_child(tmp_path, stand_in, how):
    exp = str(tmp_path / "e")
    _sweep(exp, "sleep")
    proc, child = _start_driver(stand_in, exp, how)
    try:
        assert _alive(child)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 15
        while _alive(child) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the training child outlived the killed sweep"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_second_identical_sweep_is_refused_while_the_first_runs(tmp_path, stand_in):
    exp = str(tmp_path / "e")
    _sweep(exp, "sleep")
    proc, child = _start_driver(stand_in, exp, "prctl")
    try:
        with pytest.raises(UserError, match=f"sweep Sw .* is being written by pid {proc.pid} "):
            sw.run_sweep(_sweep(exp, "sleep"), stand_in, exp)
        sw.run_sweep(_sweep(exp, "sleep"), stand_in, exp, dry_run=True)  # a dry run only reads
    finally:
        proc.kill()
        proc.wait()
    deadline = time.time() + 15
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    sweep = sw.run_sweep(_sweep(exp, "ok"), stand_in, exp, overwrite=True)  # the lock ended with its holder
    assert [p.status for p in sweep.points] == ["finished", "finished"]
