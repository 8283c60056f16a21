"""Shared test fixtures: paths to the real data beside the checkout, and helpers to run the top-level scripts."""
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

# A test run started in the background by a non-interactive shell (`cmd &`) inherits SIGINT ignored, and so would
# every script it starts: the Ctrl-C tests would wait for exits that never come. A handler (unlike SIG_IGN) is
# reset to the default in each child at exec, so the scripts get Python's own Ctrl-C handling again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ../shared/data beside the checkout; GPTLAB_SHARED_DATA points elsewhere (a device machine gets only the repo)
SHARED_DATA = os.environ.get("GPTLAB_SHARED_DATA") or os.path.join(os.path.dirname(REPO), "shared", "data")
SAMPLE_DATA = os.path.join(REPO, "data", "sample")
FINEWEB_150 = os.path.join(SHARED_DATA, "fineweb_edu_150docs.jsonl")
HELLASWAG_VAL = os.path.join(SHARED_DATA, "hellaswag_val.jsonl")
TINY_SHAKESPEARE = os.path.join(SHARED_DATA, "tinyshakespeare.txt")
# this session's own store of trained model sources (gptlab.checkpoint.model_source), inherited by every subprocess
os.environ["GPTLAB_HOME"] = tempfile.mkdtemp(prefix="gptlab-test-home-")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n different free ports (for launches side by side): each socket is held until all are bound."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# loaded here, not in the forked child: run_scripts forks from threads, and a dlopen or an import there could block
_LIBC = ctypes.CDLL(None, use_errno=True)


def _drop_root_file_access():
    """preexec_fn: give up the two capabilities that let root read any file (CAP_DAC_OVERRIDE = 1,
    CAP_DAC_READ_SEARCH = 2) from the bounding set, so the child sees file permissions as any user does."""
    for cap in (1, 2):
        if _LIBC.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def unreadable_file(path, text="some text " * 100):
    """Write path, make it unreadable (chmod 0) and return it; skips the test where that cannot be arranged."""
    path.write_text(text)
    path.chmod(0)
    probe = subprocess.run([sys.executable, "-c", f"open({str(path)!r}).read()"], capture_output=True,
                           preexec_fn=_drop_root_file_access if os.geteuid() == 0 else None)
    if probe.returncode == 0:
        pytest.skip("cannot make a file unreadable here (root without a way to drop its file capabilities)")
    return path


def script_env(env_extra=None):
    """The environment of a script run by a test: this one, unbuffered, one thread, the repository importable;
    env_extra's values set (str() of each), its None values unset."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    env.pop("COLUMNS", None)  # the caller's terminal width does not change what a script prints into a pipe
    for name, value in (env_extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def run_script(args, cwd=REPO, timeout=600, check=False, env_extra=None):
    """Run `python <args>` (or a torchrun line when args[0] == 'torchrun'; str() of each) and return the
    CompletedProcess; env_extra as script_env takes it. As root, the child runs without root's read-any-file
    capabilities, so permission errors are real."""
    env = script_env(env_extra)
    args = [str(a) for a in args]
    if args[0] == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run"] + args[1:]
    else:
        cmd = [sys.executable] + args
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_drop_root_file_access if os.geteuid() == 0 else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_scripts(commands, **kwargs):
    """run_script(args, **kwargs) for each argument list in commands, two at a time (CI has 2 cores; each script
    here runs on one thread); their CompletedProcesses, in the order of commands."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda args: run_script(args, **kwargs), commands))


def interrupt_while_reading(args, fifo, head=b"", timeout=60):
    """Ctrl-C at a known point: start `python <args>` in its own session, wait until it opens the named pipe
    `fifo` (created here) for reading, feed it `head` and keep it open, so the script waits for more, then send
    SIGINT to its process group as a terminal's Ctrl-C does. Returns (returncode, stdout, stderr)."""
    os.mkfifo(fifo)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable] + [str(a) for a in args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + timeout
    fd = None
    while fd is None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # fails with ENXIO until a reader has it open
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                out, err = proc.communicate()
                raise AssertionError(f"the script never opened {fifo}:\n{out[-2000:]}\n{err[-2000:]}") from None
            time.sleep(0.02)
    try:
        os.write(fd, head)
        time.sleep(0.5)  # it reads what there is and waits for more
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        os.close(fd)
    return proc.returncode, out, err


@pytest.fixture
def repo_root():
    return REPO


@pytest.fixture
def one_torch_thread():
    """Small forward passes (a token at a time, a short row) on one thread: fastest for them, and a busy machine
    cannot stall a second thread that the first one waits for."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny BPE tokenizer (512 merges-free bytes + 256 merges + <|endoftext|>) and shards from real text."""
    from helpers.tiny_data import make_dataset

    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared/data beside the checkout")
    return make_dataset(str(tmp_path_factory.mktemp("tiny")), n_merges=256)
