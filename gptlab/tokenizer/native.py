"""The C merge loop (merge_loop.c): compiled on first use with the system C compiler, loaded with ctypes.

It implements exactly `trainer.train_merges_python` (tests compare the two on every corpus) and is the default
CPU engine when a compiler is available; otherwise `available()` is False and the Python loop runs instead.
The shared library is cached per source hash in $GPTLAB_CACHE (default ~/.cache/gptlab).
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

from gptlab.core.errors import UserError
from gptlab.tokenizer.merges import _out_of_pairs, finish_result

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "merge_loop.c")
_lib = None
_error = None
_PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32)


def _cache_dir():
    default = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "gptlab")
    return os.environ.get("GPTLAB_CACHE", default)


def _build():
    with open(_SOURCE, "rb") as f:
        source = f.read()
    digest = hashlib.sha256(source + sys.version.encode()).hexdigest()[:16]
    path = os.path.join(_cache_dir(), f"bpe_merge_loop_{digest}.so")
    if not os.path.exists(path):
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            raise OSError("no C compiler (cc, gcc or clang) found")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
        os.close(fd)
        try:
            proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", tmp, _SOURCE],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise OSError(f"{compiler} failed: {proc.stderr.strip()[:500]}")
            os.replace(tmp, path)  # atomic: concurrent ranks may build at the same time
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    lib = ctypes.CDLL(path)
    lib.bpe_train.restype = ctypes.c_int64
    lib.bpe_train.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, _PROGRESS, ctypes.c_int32]
    return lib


def available():
    """True when the C loop could be built and loaded (the reason is kept for `unavailable_reason`)."""
    global _lib, _error
    if _lib is None and _error is None:
        try:
            _lib = _build()
        except OSError as err:
            _error = str(err)
    return _lib is not None


def unavailable_reason():
    available()
    return _error


class _MergesView:
    """Read-only sequence of the first `n` merges in the output buffer (what on_merge callbacks receive)."""

    def __init__(self, pairs, n):
        self.pairs, self.n = pairs, n

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        if not 0 <= k < self.n:
            raise IndexError(k)
        return int(self.pairs[2 * k]), int(self.pairs[2 * k + 1])

    def __iter__(self):
        return iter([tuple(p) for p in self.pairs[:2 * self.n].reshape(-1, 2).tolist()])


def train_merges_native(word_counts, num_merges, progress=None, on_merge=None):
    """Exact BPE with the C loop → trainer.MergeResult (same contract as train_merges_python)."""
    import numpy as np  # ~45 ms: train_tokenizer.py --help imports this module (through tokenizer.job)

    if not available():
        raise RuntimeError(f"the C merge loop is unavailable: {_error}")
    words = [w for w in word_counts if len(w) >= 2]
    lengths = np.fromiter((len(w) for w in words), dtype=np.int32, count=len(words))
    starts = np.zeros(len(words), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    ids = np.frombuffer(b"".join(words), dtype=np.uint8).astype(np.int32)
    weights = np.fromiter((word_counts[w] for w in words), dtype=np.int64, count=len(words))
    if len(weights) and int(weights.max()) >= 2**62:
        raise UserError("a pre-token occurs more than 2**62 times; the C loop counts in 64 bits, use --engine python")
    out_pairs = np.zeros(2 * max(num_merges, 1), dtype=np.int32)
    out_counts = np.zeros(max(num_merges, 1), dtype=np.int64)
    state = {"reported": 0}

    def report(done):
        if progress is not None:
            progress(done - state["reported"])
            state["reported"] = done
        if on_merge is not None:  # a view, not a copy: this runs after every merge
            on_merge(done - 1, _MergesView(out_pairs, done))
        return 0

    callback = _PROGRESS(report)
    every = 1 if on_merge is not None else 256
    done = _lib.bpe_train(ids.ctypes.data, starts.ctypes.data, lengths.ctypes.data, weights.ctypes.data,
                          len(words), num_merges, out_pairs.ctypes.data, out_counts.ctypes.data, callback, every)
    if done == -1:
        raise MemoryError("the C merge loop ran out of memory")
    if progress is not None and done > state["reported"]:
        progress(done - state["reported"])
    if done < num_merges:
        _out_of_pairs(done, num_merges)
    merges = [tuple(p) for p in out_pairs[:2 * done].reshape(-1, 2).tolist()]
    return finish_result(merges, out_counts[:done].tolist())
