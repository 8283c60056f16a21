"""Stopping train_gpt.py cleanly (issue 24): SIGTERM (a preempted machine; torchrun forwards it) and Ctrl-C stop
after a step every rank agrees on, with a checkpoint, a run recorded as interrupted and exit 143 / 130, and
--resume continues bit for bit; a signal inside torch.save waits for the checkpoint; a process killed while
writing one leaves nothing; ranks started with different flags or data all stop at once with one error line; a
full disk outside checkpoints is one error line and a failed run."""
import glob
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, SHARED_DATA, free_port, free_ports, run_script, run_scripts
from helpers.tiny_runs import only_run_dir, tiny_args
from gptlab.checkpoint import checkpointing
from gptlab.train import records

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and process groups")]


def train_losses(run_dir):
    return {r["step"]: r["train_loss"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r["train_loss"] is not None}


def val_losses(run_dir):
    return {r["step"]: r["val_loss"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r["val_loss"] is not None}


def results_of(run_dir):
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        return json.load(f)


def start(cmd, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO, **(env_extra or {}))
    env.pop("PYTHONUNBUFFERED", None)  # stdout into a pipe is block-buffered: a stop must still flush it
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for_steps(exp_dir, steps, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        dirs = glob.glob(os.path.join(str(exp_dir), "*_tiny"))
        if dirs and os.path.exists(os.path.join(dirs[0], records.METRICS_FILE)):
            if len(train_losses(dirs[0]) if open(os.path.join(dirs[0], records.METRICS_FILE)).read().endswith("\n")
                   else {}) >= steps:
                return
        time.sleep(0.1)
    raise AssertionError("the run did not reach its steps in time")


def assert_group_gone(pgid):
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    raise AssertionError("processes of the run outlived it")


def test_sigterm_to_a_two_rank_run_checkpoints_the_agreed_step_and_resumes_bit_for_bit(tiny, tmp_path):
    steps = 40
    flags = dict(train_steps=steps, val_loss_every=0, log_every=1)  # no --checkpoint_every: the stop writes one
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    proc = start(torchrun + ["--master_port", str(free_port()), "train_gpt.py"]
                 + tiny_args(tiny, tmp_path / "stopped", **flags))
    wait_for_steps(tmp_path / "stopped", 3, proc)
    proc.send_signal(signal.SIGTERM)  # to torchrun alone, as a scheduler does; it forwards it to both workers
    out, err = proc.communicate(timeout=120)
    assert_group_gone(proc.pid)
    run_dir = only_run_dir(tmp_path / "stopped")
    results = results_of(run_dir)
    stopped_at = results["steps"]
    assert results["status"] == "interrupted" and results["signal"] == "SIGTERM", (results, err[-3000:])
    assert 3 <= stopped_at < steps
    ckpt = os.path.join(run_dir, records.CHECKPOINT_DIR, f"step_{stopped_at:06d}.pt")
    assert results["checkpoint"] == ckpt and os.path.isfile(ckpt)
    # tiny_args chose --device_batch_size 512: the command repeats it (auto would sum the gradient in another order)
    assert results["resume_command"] == (f"torchrun --nproc_per_node=2 train_gpt.py --resume {ckpt} "
                                         "--device_batch_size 512")
    assert sorted(train_losses(run_dir)) == list(range(1, stopped_at + 1))  # every step done is recorded
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    assert f"SIGTERM received: stopping after step {stopped_at} with a checkpoint" in log
    assert f"run interrupted (SIGTERM) after step {stopped_at}; resume with --resume {ckpt}" in log
    assert f"step {stopped_at}/{steps} train_loss" in out  # rank 0's buffered stdout was flushed
    # torchrun prints a traceback of its own (its SignalException); the workers print none
    assert err.count("Traceback") <= 1 and "interrupted (SIGTERM)" in err, err[-3000:]

    ports = free_ports(2)  # the resumed run and the straight one, side by side
    run_scripts([["torchrun", "--nproc_per_node=2", "--master_port", str(ports[0]), "train_gpt.py", "--resume",
                  ckpt, "--experiments_dir", str(tmp_path / "resumed"), "--log_every", "1"],
                 ["torchrun", "--nproc_per_node=2", "--master_port", str(ports[1]), "train_gpt.py"]
                 + tiny_args(tiny, tmp_path / "straight", **flags)], check=True)
    straight, resumed = only_run_dir(tmp_path / "straight"), only_run_dir(tmp_path / "resumed")
    a, b = train_losses(straight), train_losses(resumed)
    assert sorted(b) == list(range(stopped_at + 1, steps + 1))
    assert {s: a[s] for s in b} == b  # bit for bit (as written in metrics.csv)
    assert {s: train_losses(run_dir)[s] for s in range(1, stopped_at + 1)} == {s: a[s] for s in range(1, stopped_at + 1)}
    assert val_losses(straight)[steps] == val_losses(resumed)[steps]


def test_ctrl_c_stops_one_process_after_its_step_with_a_checkpoint_exit_130(tiny, tmp_path):
    proc = start([sys.executable, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=5000, val_loss_every=0,
                                                               log_every=1))
    wait_for_steps(tmp_path, 2, proc)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and err.rstrip().endswith("interrupted"), err[-2000:]
    run_dir = only_run_dir(tmp_path)
    results = results_of(run_dir)
    assert results["status"] == "interrupted" and results["signal"] == "SIGINT"
    assert results["checkpoint"].endswith(f"step_{results['steps']:06d}.pt")
    ckpt = checkpointing.load_checkpoint(results["checkpoint"])
    assert ckpt["step"] == results["steps"] == max(train_losses(run_dir))
    assert f"step {results['steps']}/5000 train_loss" in out


def test_sigterm_to_one_process_exits_143_and_names_the_resume_command(tiny, tmp_path):
    proc = start([sys.executable, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=5000, val_loss_every=0,
                                                               log_every=0))
    wait_for_steps(tmp_path, 1, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err and "interrupted (SIGTERM)" in err
    results = results_of(only_run_dir(tmp_path))
    assert results["status"] == "interrupted" and results["signal"] == "SIGTERM"
    assert results["resume_command"] == f"python train_gpt.py --resume {results['checkpoint']} --device_batch_size 512"
    assert os.path.isfile(results["checkpoint"])


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_signal_inside_torch_save_waits_for_the_checkpoint_then_ends_interrupted(tiny, tmp_path, sig):
    """The final checkpoint (after the last step, when a signal stops at once) is being written when the signal
    comes: it completes, then the run ends as interrupted (this used to be `RuntimeError: unexpected pos`)."""
    proc = run_script(["tests/helpers/signal_in_save_train.py"] + tiny_args(tiny, tmp_path, train_steps=3,
                                                                           val_loss_every=0, save_model=True),
                      env_extra={"GPTLAB_TEST_SAVE_SIGNAL": sig})
    assert proc.returncode == 128 + getattr(signal, "SIG" + sig), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    run_dir = only_run_dir(tmp_path)
    results = results_of(run_dir)
    assert results["status"] == "interrupted" and results["checkpoint"].endswith("step_000003.pt")
    assert checkpointing.load_checkpoint(results["checkpoint"])["step"] == 3
    assert os.listdir(os.path.join(run_dir, records.CHECKPOINT_DIR)) == ["step_000003.pt"]


def test_a_signal_inside_a_periodic_checkpoint_stops_after_that_step(tiny, tmp_path):
    proc = run_script(["tests/helpers/signal_in_save_train.py"] + tiny_args(tiny, tmp_path, train_steps=20,
                                                                           val_loss_every=0, checkpoint_every=2),
                      env_extra={"GPTLAB_TEST_SAVE_SIGNAL": "TERM"})
    assert proc.returncode == 143, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    results = results_of(run_dir)
    assert (results["status"], results["steps"]) == ("interrupted", 2)
    assert os.listdir(os.path.join(run_dir, records.CHECKPOINT_DIR)) == ["step_000002.pt"]


def test_a_process_killed_while_writing_a_checkpoint_leaves_no_file(tiny, tmp_path):
    proc = run_script(["tests/helpers/signal_in_save_train.py"] + tiny_args(tiny, tmp_path, train_steps=4,
                                                                           val_loss_every=0, checkpoint_every=2),
                      env_extra={"GPTLAB_TEST_SAVE_SIGNAL": "KILL"})
    assert proc.returncode == -signal.SIGKILL
    assert os.listdir(os.path.join(only_run_dir(tmp_path), records.CHECKPOINT_DIR)) == []  # no .tmp.PID left


@pytest.mark.parametrize("flag, rank0, rank1, shown", [
    ("--lr_scale", "1.0", "2.0", "--lr_scale (rank 0: 1.0, rank 1: 2.0)"),
    ("--val_steps", "2", "3", "--val_steps (rank 0: 2, rank 1: 3)"),
    ("--train_files", None, None, "--train_files (the shards' names, sizes and checksums) (rank 0: '"),
])
def test_ranks_started_with_different_flags_or_data_all_stop_with_one_error(tiny, tmp_path, flag, rank0, rank1,
                                                                            shown):
    if flag == "--train_files":  # rank 1 trains on a subset of the shards (node-local data that differs)
        rank1 = sorted(glob.glob(tiny["train"]))[0]
    started = time.monotonic()
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                       "tests/helpers/rank_argv_train.py"] + tiny_args(tiny, tmp_path / "exps", train_steps=5,
                                                                       val_loss_every=0),
                      timeout=300, env_extra={"GPTLAB_TEST_RANK": "1",
                                              "GPTLAB_TEST_RANK_ARGS": json.dumps({flag: rank1})})
    assert proc.returncode != 0 and time.monotonic() - started < 120
    errors = [line for line in proc.stderr.splitlines() if "error:" in line and "ranks disagree" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert f"error: ranks disagree on {shown}" in errors[0], errors[0]
    assert errors[0].endswith("start every rank with the same flags and data")
    assert proc.stderr.count("Traceback") <= 1 and "ChildFailedError" in proc.stderr  # torchrun's own, no rank's
    assert not glob.glob(str(tmp_path / "exps" / "*"))  # no run folder, no training


def test_a_full_disk_for_the_code_backup_is_one_error_and_a_failed_run(tiny, tmp_path):
    """Files may not grow past 20 kB (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail as on a full disk): config.json
    and results.json fit, the code backup's model.py does not."""
    launcher = ("import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")
    # model.py recorded in GPTLAB_HOME beforehand (an earlier run on this machine does it), so the first write
    # that fails is the run folder's, whatever tests ran before this one
    from gptlab.checkpoint import model_source
    model_source.record_trained_source(model_source.current_source(model_source.arch_file("modded")))
    proc = run_script(["-c", launcher, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=4, val_loss_every=0))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert re.match(r"error: could not write (in )?\S+: File too large; free space", line), line
    results = results_of(only_run_dir(tmp_path))
    assert results["status"] == "failed" and "could not write" in results["error"]
