"""Faults the tests plant in the unchanged product: a full disk under one shard, a crash after N shards, a rank that
dies after counting its documents. The product has no test switches; each fault is a wrapper around one product
function, put in place with pytest's monkeypatch in-process or, in a subprocess, by fault_site/sitecustomize.py.

In-process:

    monkeypatch.setattr(shards, "atomic_write", full_disk_atomic_write(shards.atomic_write, "x.bin"))

In a subprocess (also every rank under torchrun: the environment reaches them), `env(...)` gives the environment
changes: PYTHONPATH with the repository and fault_site/ (whose sitecustomize.py runs at interpreter start), and one
GPTLAB_FAULT_* variable per fault. Each fault is applied right after the product imports the module it wraps.

    run_script([...], env_extra=faults.env(die_after_shards=3))
"""
import contextlib
import errno
import functools
import importlib.abc
import os
import sys

HELPERS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HELPERS))
SITE_DIR = os.path.join(HELPERS, "fault_site")
ENV_PREFIX = "GPTLAB_FAULT_"
INJECTED = "fault injected by tests/helpers/faults.py"


# ---------------------------------------------------------------------------------------------------- the faults
class _DiskFullAfter:
    """A file on a disk with room for `room` more bytes: the write that would pass it fails with ENOSPC."""

    def __init__(self, f, room):
        self._f, self._room = f, room

    def write(self, data):
        size = memoryview(data).nbytes
        if size > self._room:
            raise OSError(errno.ENOSPC, f"No space left on device ({INJECTED})", self._f.name)
        self._room -= size
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


def full_disk_atomic_write(real_atomic_write, shard_name, room=1024):
    """gptlab.dataset.shards.atomic_write where the disk fills while the shard called `shard_name` is written: its
    1024-byte header fits, its tokens do not (ENOSPC), inside the real atomic_write, which removes the temporary
    file and renames nothing. Other files are written normally."""

    @contextlib.contextmanager
    def atomic_write(path, *args, **kwargs):
        with real_atomic_write(path, *args, **kwargs) as f:
            yield _DiskFullAfter(f, room) if os.path.basename(path) == shard_name else f

    return atomic_write


def die_after_shards(fineweb, count):
    """download_fineweb's ShardWriter ends the process with status 1 (a crash: os._exit, nothing cleaned up)
    right after its `count`-th shard is written and recorded in the manifest."""
    real_flush = fineweb.ShardWriter.flush

    def flush(self):
        real_flush(self)
        if self.written >= count:
            os._exit(1)

    fineweb.ShardWriter.flush = flush


def die_rank(pretokenize_module, rank):
    """Under torchrun, rank `rank` ends with status 1 (os._exit) as soon as it has counted its documents
    (gptlab.tokenizer.pretokenize.pretokenize returned), before the ranks combine their tables."""
    real_pretokenize = pretokenize_module.pretokenize

    def pretokenize(*args, **kwargs):
        result = real_pretokenize(*args, **kwargs)
        if os.environ.get("RANK", "0") == str(rank):
            os._exit(1)
        return result

    pretokenize_module.pretokenize = pretokenize


# fault (the GPTLAB_FAULT_ variable's name, lower case) → (module it wraps, how to apply it given the variable)
FAULTS = {
    "full_disk": ("gptlab.dataset.shards",
                  lambda module, value: setattr(module, "atomic_write",
                                                full_disk_atomic_write(module.atomic_write, value))),
    "die_after_shards": ("gptlab.dataset.fineweb", lambda module, value: die_after_shards(module, int(value))),
    "die_rank": ("gptlab.tokenizer.pretokenize", lambda module, value: die_rank(module, int(value))),
}


# ------------------------------------------------------------------------------------------- subprocess wiring
def env(**faults):
    """Environment changes for a subprocess with these faults, e.g. env(full_disk="train_000002.bin")."""
    unknown = set(faults) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
    changes = {"PYTHONPATH": os.pathsep.join([SITE_DIR, REPO])}
    changes.update({ENV_PREFIX + name.upper(): str(value) for name, value in faults.items()})
    return changes


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module with a pending patch, it takes the spec the other finders give and
    applies the patch once the module has executed (before the importer gets it)."""

    def __init__(self, patches):
        self.patches = patches  # module name → function(module)

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        patch, loader = self.patches.pop(name), spec.loader  # a source file's loader is this spec's own object
        real_exec_module = loader.exec_module

        def exec_module(module):
            real_exec_module(module)
            patch(module)

        loader.exec_module = exec_module
        return spec


def install_from_environment(environ=os.environ):
    """Apply every fault whose GPTLAB_FAULT_ variable is set (fault_site/sitecustomize.py calls this)."""
    patches = {}  # module name → function(module) applying its faults
    for name, (module_name, apply) in FAULTS.items():
        value = environ.get(ENV_PREFIX + name.upper())
        if value is not None:
            patches.setdefault(module_name, []).append(functools.partial(apply, value=value))
    patches = {name: (lambda module, fs=fs: [f(module) for f in fs]) for name, fs in patches.items()}
    for module_name in [m for m in patches if m in sys.modules]:  # already imported: patch it now
        patches.pop(module_name)(sys.modules[module_name])
    if patches:
        sys.meta_path.insert(0, _PatchAfterImport(patches))
