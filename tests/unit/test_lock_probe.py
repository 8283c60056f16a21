"""lock_holder and exclusive_lock when a holder begins or ends while another process looks (the race that made a
second download_fineweb.py rank refuse a first rank that had just finished)."""
import fcntl
import json
import os
import threading
import time

import pytest

from gptlab.core.errors import UserError
from gptlab.core.files import exclusive_lock, lock_holder

HOLDER = {"pid": 4242, "host": "h", "command": "download_fineweb.py", "since": "now", "rank": 0, "world_size": 2}


def _hold(path):
    """Take the lock as another holder would: flock(2) on a second open of the file (flock locks belong to the
    open file, so this one conflicts with the code's own open in this process)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _later(seconds, action):
    t = threading.Timer(seconds, action)
    t.start()
    return t


def test_a_holder_that_ends_while_its_details_are_awaited_is_no_holder(tmp_path):
    path = str(tmp_path / "x.lock")
    fd = _hold(path)  # held, details not yet written

    def end():  # as exclusive_lock ends: remove the file while held, then release
        os.remove(path)
        os.close(fd)
    t = _later(0.2, end)
    assert lock_holder(path) is None
    t.join()


def test_details_written_after_the_lock_is_taken_are_read(tmp_path):
    path = str(tmp_path / "x.lock")
    fd = _hold(path)
    t = _later(0.2, lambda: os.pwrite(fd, json.dumps(HOLDER).encode(), 0))
    try:
        assert lock_holder(path) == HOLDER
    finally:
        t.join()
        os.close(fd)


def test_a_holder_that_never_writes_its_details_is_held_with_none_known(tmp_path):
    path = str(tmp_path / "x.lock")
    fd = _hold(path)
    try:
        start = time.monotonic()
        assert lock_holder(path, wait_s=0.3) == {}
        assert time.monotonic() - start >= 0.3
    finally:
        os.close(fd)


def test_a_file_left_by_a_killed_holder_is_no_holder(tmp_path):
    path = tmp_path / "x.lock"
    path.write_text(json.dumps(HOLDER))  # the details stay; the OS dropped the lock
    assert lock_holder(str(path)) is None
    assert lock_holder(str(tmp_path / "missing.lock")) is None


def test_exclusive_lock_takes_a_lock_whose_holder_ends_as_it_looks(tmp_path):
    path = str(tmp_path / "x.lock")
    fd = _hold(path)

    def end():
        os.remove(path)
        os.close(fd)
    t = _later(0.4, end)  # after exclusive_lock's own 0.2 s wait, while it looks at the holder
    with exclusive_lock(path, "the output") as held:
        assert held == path
        assert json.loads(open(path).read())["pid"] == os.getpid()
    t.join()


def test_exclusive_lock_refuses_a_live_holder_by_name(tmp_path):
    path = str(tmp_path / "x.lock")
    fd = _hold(path)
    os.pwrite(fd, json.dumps(HOLDER).encode(), 0)
    try:
        with pytest.raises(UserError, match=r"the output is being written by pid 4242 on h"):
            with exclusive_lock(path, "the output"):
                pass
    finally:
        os.close(fd)
