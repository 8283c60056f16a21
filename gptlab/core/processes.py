"""A child process that ends with its parent, even when the parent is killed outright (kill -9, the OOM killer):
Linux's prctl(PR_SET_PDEATHSIG). Used by the tokenizer's pre-tokenizer workers and by sweep.py's training runs."""
import ctypes
import functools
import os
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def libc_prctl():
    """libc's prctl, or None off Linux (or where it cannot be found). Looked up once: call it in the parent before
    forking, so that a child between fork and exec only calls it (no library loading there)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent_pid, sig):
    """Ask the kernel to send this process `sig` when its parent dies (where prctl exists), and send it at once if
    the parent `parent_pid` is already gone (it died before the request took effect, so the signal would never
    come). Safe between fork and exec once libc_prctl() has been called in the parent."""
    prctl = libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
