"""The C parts of the trainer, compiled on first use with the system C compiler and loaded with ctypes:

- the merge loop (merge_loop.c): exactly `merges.train_merges_python` (tests compare the two on every corpus),
  the default CPU engine when a compiler is available; otherwise `available()` is False and the Python loop runs;
- the pre-tokenizer (pretok_scan.c): the gpt4/gpt2 patterns split exactly as `regex.findall` splits them and
  counted in C (`NativeCounter`), with character classes generated from the installed `regex`
  (unicode_classes.py); otherwise `scanner_available()` is False and pretokenize.py uses `regex`.

Each shared library is cached per source hash (and, for the scanner, regex's version) in $GPTLAB_CACHE
(default ~/.cache/gptlab).
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


def _compile(sources, name, key, generated=None):
    """Compile `sources` into $GPTLAB_CACHE/{name}_{digest}.so unless cached; the digest covers the sources, the
    interpreter and `key`. generated: a function giving {file name: text} for the include path of the build (a
    generated header), called only when building. Returns the library's path; OSError when there is no compiler
    or it fails."""
    digest = hashlib.sha256(sys.version.encode() + key.encode())
    for source in sources:
        with open(source, "rb") as f:
            digest.update(f.read())
    path = os.path.join(_cache_dir(), f"{name}_{digest.hexdigest()[:16]}.so")
    if os.path.exists(path):
        return path
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise OSError("no C compiler (cc, gcc or clang) found")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as build_dir:
        for file_name, text in (generated() if generated else {}).items():
            with open(os.path.join(build_dir, file_name), "w", encoding="utf-8") as f:
                f.write(text)
        tmp = os.path.join(build_dir, "lib.so")
        proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", build_dir, "-o", tmp, *sources],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"{compiler} failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, path)  # atomic: concurrent ranks may build at the same time
    return path


def _build():
    lib = ctypes.CDLL(_compile([_SOURCE], "bpe_merge_loop", ""))
    lib.bpe_train.restype = ctypes.c_int64
    lib.bpe_train.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, _PROGRESS, ctypes.c_int32]
    return lib


def _load(build, lib, error):
    """(library, reason it is unavailable) after one attempt to build it, made only while neither is known: each C
    file is compiled (or found in the cache) and loaded once per process."""
    if lib is None and error is None:
        try:
            lib = build()
        except OSError as err:
            error = str(err)
    return lib, error


def available():
    """True when the C loop could be built and loaded (the reason is kept for `unavailable_reason`)."""
    global _lib, _error
    _lib, _error = _load(_build, _lib, _error)
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


# ---- the native pre-tokenizer (pretok_scan.c): the built-in patterns split and counted in C

_SCAN_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretok_scan.c")
SCAN_PATTERNS = {"gpt4": 0, "gpt2": 1}  # the patterns pretok_scan.c implements (format.PATTERNS names)
_scan_lib = None
_scan_error = None


def _build_scanner():
    from gptlab.tokenizer import unicode_classes

    with open(unicode_classes.__file__, "rb") as f:  # the generator's code is part of the key, as the C file is
        key = hashlib.sha256(f.read()).hexdigest() + unicode_classes.source_digest()
    lib = ctypes.CDLL(_compile([_SCAN_SOURCE], "pretok_scan", key,
                               generated=lambda: {"pretok_tables.h": unicode_classes.header_text()}))
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.pt_new.restype = vp
    lib.pt_new.argtypes = []
    lib.pt_free.argtypes = [vp]
    lib.pt_scan.restype = ctypes.c_int
    lib.pt_scan.argtypes = [vp, ctypes.c_char_p, vp, i64, ctypes.c_int]
    lib.pt_add.restype = ctypes.c_int
    lib.pt_add.argtypes = [vp, ctypes.c_char_p, vp, vp, i64]
    lib.pt_entries.restype = i64
    lib.pt_entries.argtypes = [vp]
    lib.pt_key_bytes.restype = i64
    lib.pt_key_bytes.argtypes = [vp]
    lib.pt_export.argtypes = [vp, vp, vp, vp]
    lib.pt_split.restype = i64
    lib.pt_split.argtypes = [ctypes.c_char_p, i64, ctypes.c_int, vp, i64]
    return lib


def scanner_available():
    """True when pretok_scan.c could be built and loaded (the reason is kept for `scanner_unavailable_reason`)."""
    global _scan_lib, _scan_error
    _scan_lib, _scan_error = _load(_build_scanner, _scan_lib, _scan_error)
    return _scan_lib is not None


def scanner_unavailable_reason():
    scanner_available()
    return _scan_error


def _address(arr):
    return arr.buffer_info()[0]


def native_split(text, pattern_name):
    """text → its pre-tokens (str), as regex.findall(PATTERNS[pattern_name], text) gives them (the fuzz test's
    view of the scanner). `text` must hold no lone surrogates (pretokenize.clean_document)."""
    from array import array

    if not scanner_available():
        raise RuntimeError(f"the native pre-tokenizer is unavailable: {_scan_error}")
    data = text.encode("utf-8")
    ends = array("q", [0]) * (len(data) + 1)
    n = _scan_lib.pt_split(data, len(data), SCAN_PATTERNS[pattern_name], _address(ends), len(ends))
    out, start = [], 0
    for end in ends[:n]:
        out.append(data[start:end].decode("utf-8"))
        start = end
    return out


class NativeCounter:
    """A (pre-token bytes → count) table in C: `scan` splits and counts UTF-8 documents, `add` sums an exported
    table in, `export` gives (keys end to end, lengths, counts) to send between processes, `into_dict` the table as
    the regex path builds it. Counts are 64-bit (2**63 occurrences of one pre-token would need exabytes)."""

    def __init__(self, pattern_name):
        if not scanner_available():
            raise RuntimeError(f"the native pre-tokenizer is unavailable: {_scan_error}")
        self.pattern = SCAN_PATTERNS[pattern_name]
        self.handle = _scan_lib.pt_new()
        if not self.handle:
            raise MemoryError("the native pre-tokenizer ran out of memory")

    def close(self):
        if self.handle:
            _scan_lib.pt_free(self.handle)
            self.handle = None

    def __del__(self):
        self.close()

    def scan(self, encoded_docs):
        """Count the pre-tokens of documents given as UTF-8 bytes (each split on its own)."""
        from array import array

        lens = array("q", map(len, encoded_docs))
        if _scan_lib.pt_scan(self.handle, b"".join(encoded_docs), _address(lens), len(lens), self.pattern):
            raise MemoryError("the native pre-tokenizer ran out of memory")

    def add(self, exported):
        keys, lens, counts = exported
        if _scan_lib.pt_add(self.handle, keys, _address(lens), _address(counts), len(lens)):
            raise MemoryError("the native pre-tokenizer ran out of memory")

    def export(self):
        from array import array

        n = _scan_lib.pt_entries(self.handle)
        keys = bytearray(_scan_lib.pt_key_bytes(self.handle))
        lens, counts = array("q", [0]) * n, array("q", [0]) * n
        key_buf = (ctypes.c_char * len(keys)).from_buffer(keys) if keys else None
        _scan_lib.pt_export(self.handle, key_buf, _address(lens), _address(counts))
        return bytes(keys), lens, counts

    def into_dict(self):
        """The table as {pre-token bytes: count}; frees the C table first (this counter is closed after)."""
        keys, lens, counts = self.export()
        self.close()
        table, start = {}, 0
        for length, count in zip(lens, counts):
            table[keys[start:start + length]] = count
            start += length
        return table
