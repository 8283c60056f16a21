"""Faults: a full disk, an output folder nobody can write in, and two writers of one output. Every case must end
with one `error:` line and status 2, before any training where it can be known then, and leave no file behind
(issue 15, items 1, 6 and 7)."""
import errno
import json
import os
import pathlib
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import FINEWEB_150, HELLASWAG_VAL, REPO, _drop_root_file_access, free_port, run_script
from helpers.tiny_data import save_tiny_tokenizer

from gptlab.core.errors import UserError
from gptlab.core.files import exclusive_lock

PAGE = 4096


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_one_clear_error(proc, *phrases):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def files_in(folder):
    return sorted(p.name for p in pathlib.Path(folder).iterdir())


def train_tokenizer_args(out, name="t", samples=20_000, vocab=300):
    # --engine python: nothing to compile (a compiler writing its cache would meet the same limits)
    return ["train_tokenizer.py", "--name", name, "--input", FINEWEB_150, "--samples", str(samples), "--vocabsize",
            str(vocab), "--workers", "1", "--device", "cpu", "--engine", "python", "--out", str(out)]


class LittleRoom:
    """An output folder with `room` bytes left. Where mounting is allowed, a 1 MiB tmpfs filled up to `room`
    (a real ENOSPC); otherwise a plain folder and RLIMIT_FSIZE = room in the child (EFBIG once a file grows past
    it, with SIGXFSZ ignored so the write fails instead of killing the process)."""

    def __init__(self, kind, folder):
        self.kind, self.folder, self.limit = kind, folder, None

    def leave(self, room):
        if self.kind == "fsize":
            self.limit = room
            return
        filler = self.folder / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * PAGE):
                pass
        except OSError as err:
            assert err.errno == errno.ENOSPC
        finally:
            os.close(fd)
        os.truncate(filler, max(0, filler.stat().st_size - room))

    def run(self, args):
        def limit():
            if self.limit is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, self.limit))
            if os.geteuid() == 0:
                _drop_root_file_access()

        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
        return subprocess.run([sys.executable] + [str(a) for a in args], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=300, preexec_fn=limit)

    def leftovers(self):
        return [name for name in files_in(self.folder) if name != "filler"]


@pytest.fixture(params=["tmpfs", "fsize"])
def little_room(request, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    if request.param == "fsize":
        yield LittleRoom("fsize", folder)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (the fsize variant covers a full disk)")
    try:
        yield LittleRoom("tmpfs", folder)
    finally:
        subprocess.run(["umount", str(folder)], check=True)


# ---- a full disk

def test_tokenizer_on_a_disk_that_fills_up_while_saving(little_room):
    """Room for the checks and the small files, not for the tokenizer (~80 kB): training runs, the save fails
    with one clear error, and neither the tokenizer, its .merges.txt nor a temporary file is left."""
    little_room.leave(12 * PAGE)
    proc = little_room.run(train_tokenizer_args(little_room.folder))
    line = assert_one_clear_error(proc, "could not write the tokenizer", "nothing half-written", "free some space")
    assert "No space left on device" in line or "File too large" in line
    assert "merges (python, cpu)" in proc.stderr  # it failed at the save, after training
    assert little_room.leftovers() == []


def test_tokenizer_on_a_full_disk_fails_before_training(little_room):
    little_room.leave(0)
    start = time.time()
    proc = little_room.run(train_tokenizer_args(little_room.folder))
    assert_one_clear_error(proc, f"cannot write in {little_room.folder}", "free some space")
    assert "pre-tokenize" not in proc.stderr and time.time() - start < 30
    assert little_room.leftovers() == []


def test_hellaswag_on_a_disk_that_fills_up(little_room):
    """The 12 MB file does not fit in what is left (1 MiB at most): one clear error, no file, no temporary."""
    little_room.leave(64 * PAGE)
    proc = little_room.run(["download_hellaswag.py", "--source", HELLASWAG_VAL, "--out",
                            little_room.folder / "hs.jsonl", "--quiet"])
    assert_one_clear_error(proc, f"could not write {little_room.folder / 'hs.jsonl'}", "nothing half-written",
                           "free some space")
    assert little_room.leftovers() == []


# ---- an output nobody can write in (root included: os.access says yes to root in /sys)

@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    texts = [json.loads(line)["text"] for line in open(FINEWEB_150)][:10]
    return save_tiny_tokenizer(str(tmp_path_factory.mktemp("tok") / "faulttok_v276_n10.pkl"), texts, n_merges=20)


def read_only_folder(tmp_path):
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)  # run_script's children run without root's override of file permissions
    return folder


@pytest.mark.parametrize("script, make_args, where", [
    ("train_tokenizer.py", lambda tmp, tok: train_tokenizer_args("/sys")[1:], "/sys"),
    ("train_tokenizer.py", lambda tmp, tok: train_tokenizer_args("/proc/nope")[1:], "/proc"),
    ("train_tokenizer.py", lambda tmp, tok: train_tokenizer_args(read_only_folder(tmp) / "toks")[1:], "READONLY"),
    ("download_fineweb.py", lambda tmp, tok: ["--tokenizer", tok, "--input", FINEWEB_150, "--out", "/sys"], "/sys"),
    ("download_fineweb.py", lambda tmp, tok: ["--tokenizer", tok, "--input", FINEWEB_150, "--out",
                                              read_only_folder(tmp)], "READONLY"),
    ("download_hellaswag.py", lambda tmp, tok: ["--source", HELLASWAG_VAL, "--out", "/sys/x.jsonl"], "/sys"),
    ("download_hellaswag.py", lambda tmp, tok: ["--source", HELLASWAG_VAL, "--out",
                                                read_only_folder(tmp) / "hs" / "x.jsonl"], "READONLY"),
])
def test_an_unwritable_output_fails_before_any_work(tmp_path, tokenizer_path, script, make_args, where):
    """/sys and /proc as they are (as root, with every capability: os.access says yes there), and a read-only
    folder as any user sees it (run_script drops root's override of file permissions)."""
    args = [str(a) for a in make_args(tmp_path, tokenizer_path)]
    start = time.time()
    if where == "READONLY":
        where = str(tmp_path / "read_only")
        proc = run_script([script] + args)
    else:
        proc = subprocess.run([sys.executable, script] + args, cwd=REPO, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1"))
    assert_one_clear_error(proc, f"cannot write in {where}", "choose another output path")
    assert "pre-tokenize" not in proc.stderr and "shards →" not in proc.stderr and time.time() - start < 30
    if (tmp_path / "read_only").exists():
        assert files_in(tmp_path / "read_only") == []


# ---- two writers of one output

HOLDER = """
import sys, time
from gptlab.core.files import exclusive_lock

def child(started):
    started.set()
    time.sleep(60)

with exclusive_lock(sys.argv[1], "the test's output"):
    if len(sys.argv) > 2:  # a forked child that outlives this holder (as a pre-tokenization worker could)
        import multiprocessing as mp
        started = mp.get_context("fork").Event()
        mp.get_context("fork").Process(target=child, args=(started,), daemon=False).start()
        started.wait()
    print("locked", flush=True)
    time.sleep(60)
"""


def start_holder(lock_path, *extra):
    """A process holding the lock at lock_path (until killed); returns it once it holds it."""
    env = dict(os.environ, PYTHONPATH=REPO)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_path), *extra], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_tokenizer_writer_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "toks"
    run_script(train_tokenizer_args(out), check=True)
    pkl = out / "t_v300_n20000.pkl"
    before = pkl.read_bytes()
    holder = start_holder(out / ".t_v300_n20000.pkl.lock")  # the lock file beside the .pkl (issue 15)
    try:
        start = time.time()
        proc = run_script(train_tokenizer_args(out) + ["--overwrite"])
        assert time.time() - start < 30
        assert_one_clear_error(proc, f"tokenizer {pkl} is being written by pid {holder.pid} on "
                               f"{socket.gethostname()} (`", "since ", "wait for it to finish or stop it")
        assert "pre-tokenize" not in proc.stderr
        assert pkl.read_bytes() == before
        # a killed holder leaves no stale lock: the next writer goes ahead
        holder.kill()
        holder.wait()
        run_script(train_tokenizer_args(out) + ["--overwrite"], check=True)
        assert files_in(out) == [".code", "t_v300_n20000.merges.txt", "t_v300_n20000.pkl"]  # (.code: its trainer source) no lock file
    finally:
        holder.kill()
        holder.wait()


def test_every_rank_stops_with_the_holders_name(tmp_path):
    out = tmp_path / "toks"
    holder = start_holder(out / ".t_v300_n20000.pkl.lock")
    try:
        proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port())]
                          + train_tokenizer_args(out), timeout=240)
    finally:
        holder.kill()
        holder.wait()
    lines = error_lines(proc.stderr)
    assert len(lines) == 2 and all(f"being written by pid {holder.pid}" in line for line in lines), proc.stderr
    # torchrun stops the other rank once one has exited, so only the first exit is sure to be status 2
    assert "exitcode  : 2 " in proc.stderr.split("Root Cause")[1], proc.stderr[-3000:]
    assert "[rank0]" not in proc.stderr and "[rank1]" not in proc.stderr  # no rank's traceback
    assert files_in(out) == [".t_v300_n20000.pkl.lock"]


def test_a_lock_ends_with_its_holder_even_when_a_forked_child_lives_on(tmp_path):
    lock_path = tmp_path / "out" / ".x.lock"
    holder = start_holder(lock_path, "fork a child")
    children = pathlib.Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()
    assert len(children) == 1
    try:
        with pytest.raises(UserError, match=f"the test's output is being written by pid {holder.pid} "):
            with exclusive_lock(str(lock_path), "the test's output"):
                pass
        holder.kill()
        holder.wait()
        os.kill(int(children[0]), 0)  # the child is still alive...
        with exclusive_lock(str(lock_path), "the test's output"):  # ...and the lock is free
            assert json.loads(lock_path.read_text())["pid"] == os.getpid()
        assert not lock_path.exists()  # removed on a normal release
    finally:
        holder.kill()
        os.killpg(holder.pid, signal.SIGKILL)  # the forked child is in the holder's session
        holder.wait()
