"""Reading DCP's index (.metadata, a pickle) of a sharded checkpoint without running code from it (issue 37, item 1;
docs/faults.md "Loading never runs a stranger's code"): the allow-list unpickler, and the checks of what the index
may point at. The tools end to end: tests/e2e/test_checkpoint_trust_e2e.py."""
import contextlib
import errno
import os
import pickle
import re
import warnings

import pytest
import torch

from gptlab.core.errors import UserError
from gptlab.core.unpickle import RefusedGlobal, load_allowed
from gptlab.checkpoint import sharded_checkpoint as sc


class _Calls:
    """Unpickles as func(*args)."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def test_the_allow_list_unpickler_calls_nothing_outside_its_list(tmp_path):
    marker = tmp_path / "ran"
    data = pickle.dumps([1, _Calls(exec, f"open({str(marker)!r}, 'w').close()")])
    with pytest.raises(RefusedGlobal) as info:
        load_allowed(data, {("builtins", "list"): list})
    assert info.value.global_name == "builtins.exec" and not marker.exists()
    # what the list names is used in its place: torch.Size((2, 3)) here
    assert load_allowed(pickle.dumps(torch.Size([2, 3])), {("torch", "Size"): torch.Size}) == torch.Size([2, 3])
    with pytest.raises(RefusedGlobal):
        load_allowed(pickle.dumps(torch.Size([2, 3])), {})


@pytest.fixture
def folder(tmp_path):
    """A DCP folder of two tensors (one process), and its manifest ({name: {bytes, sha256}})."""
    import torch.distributed.checkpoint as dcp

    path = str(tmp_path / "ckpt")
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4, dtype=torch.bfloat16)}},
                 checkpoint_id=path, no_dist=True)
    return path


def manifest(path):
    return {name: sc._file_record(os.path.join(path, name)) for name in os.listdir(path)}


def rewrite_index(path, edit):
    """Change the folder's genuine index with edit(metadata) (this test's own trusted pickle)."""
    index = os.path.join(path, sc.DCP_INDEX)
    with open(index, "rb") as f:
        metadata = pickle.load(f)
    edit(metadata)
    with open(index, "wb") as f:
        pickle.dump(metadata, f)


def test_a_genuine_index_is_read_without_any_flag(folder):
    metadata = sc.read_index(folder, manifest(folder))
    assert sc._saved_tensors(metadata) == {"model.w": ((2, 3), torch.float32), "model.b": ((4,), torch.bfloat16)}


def _storage(metadata, key="model.w"):
    return next(info for index, info in metadata.storage_data.items() if index.fqn == key)


def _bytes_entry(metadata):
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    metadata.state_dict_metadata["model.w"] = BytesStorageMetadata()


@pytest.mark.parametrize("edit, words", [
    (lambda m: setattr(_storage(m), "relative_path", "/etc/passwd"), "points outside"),
    (lambda m: setattr(_storage(m), "relative_path", "../ckpt/__0_0.distcp"), "points outside"),
    (lambda m: setattr(_storage(m), "length", 10**9), "points outside"),
    (lambda m: setattr(_storage(m), "transform_descriptors", ["zstd"]), "points outside"),
    (lambda m: setattr(m.state_dict_metadata["model.w"], "size", torch.Size([10**6, 10**6])), "more than its files"),
    (lambda m: setattr(m, "state_dict_metadata", [1, 2]), "not a DCP index"),
    (_bytes_entry, "non-tensor entry 'model.w'"),
])
def test_an_index_that_points_elsewhere_or_holds_a_pickle_is_refused(folder, edit, words):
    rewrite_index(folder, edit)
    with pytest.raises(UserError) as info:
        sc.read_index(folder, manifest(folder))
    assert words in str(info.value) and folder in str(info.value), str(info.value)
    if "non-tensor" in words:  # DCP would torch.load it with weights_only=False: only on the user's word
        assert "--trust_model_code" in str(info.value)
        sc.read_index(folder, manifest(folder), trust_code=True)


def test_an_index_naming_code_is_refused_before_anything_runs_and_read_as_dcp_does_when_trusted(folder, tmp_path):
    marker = tmp_path / "ran"
    with open(os.path.join(folder, sc.DCP_INDEX), "wb") as f:
        pickle.dump(_Calls(exec, f"open({str(marker)!r}, 'w').close()"), f)
    with pytest.raises(UserError) as info:
        sc.read_index(folder, manifest(folder))
    assert "names builtins.exec" in str(info.value) and "--trust_model_code" in str(info.value)
    assert not marker.exists()
    sc.read_index(folder, manifest(folder), trust_code=True)
    assert marker.exists()


def test_a_checkpoint_file_whose_pickle_names_code_is_refused_and_never_run(tmp_path):
    """One-file checkpoints (and a folder's checkpoint.pt) are read as weights only: code in them never runs, with
    or without the flag, and the refusal names what the pickle called."""
    from gptlab.checkpoint import checkpointing

    marker, path = tmp_path / "ran", tmp_path / "step_000001.pt"
    torch.save({"format": "gptlab-checkpoint", "optimizers": [_Calls(exec, f"open({str(marker)!r}, 'w').close()")]},
               path)
    with pytest.raises(UserError) as info:
        checkpointing.load_checkpoint(str(path))
    assert re.search(r"names (builtins\.)?exec ", str(info.value)) and "--trust_model_code" in str(info.value)
    assert "\x1b" not in str(info.value) and not marker.exists()


def test_a_tensor_block_that_is_a_pickle_of_code_is_refused_and_never_run(folder, tmp_path):
    """DCP reads tensor blocks with torch.load(weights_only=True): a block replaced by a pickle of code (the index
    and the manifest made to point at it) is one clear refusal, not DCP's multi-rank report."""
    marker = tmp_path / "ran"
    torch.save(_Calls(exec, f"open({str(marker)!r}, 'w').close()"), os.path.join(folder, "__7_0.distcp"))

    def point_at_it(metadata):
        info = _storage(metadata)
        info.relative_path, info.offset = "__7_0.distcp", 0
        info.length = os.path.getsize(os.path.join(folder, "__7_0.distcp"))

    rewrite_index(folder, point_at_it)
    metadata = sc.read_index(folder, manifest(folder))
    with pytest.raises(UserError) as info:
        sc._dcp_load({"model": {"w": torch.zeros(2, 3)}}, folder, metadata, False, no_dist=True)
    assert re.search(r"names (builtins\.)?exec ", str(info.value)) and folder in str(info.value), str(info.value)
    assert not marker.exists()


def test_a_sharded_save_on_a_full_disk_is_one_error_and_leaves_no_folder(tmp_path, monkeypatch):
    """Item 4 on one process (tests/e2e/test_checkpoint_trust_e2e.py: 2 ranks): the disk fills while DCP writes the
    blocks (torch.save inside DCP turns the ENOSPC into "unexpected pos"); the message is the one-file path's
    (docs/faults.md) and names the final folder; nothing is left in the checkpoints folder."""
    from torch.distributed.checkpoint import filesystem

    from gptlab.core.distributed import DistContext

    real_create_stream = filesystem.FileSystem.create_stream

    class FullDisk:
        def __init__(self, stream):
            self._stream = stream

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self._stream, name)

    @contextlib.contextmanager
    def create_stream(self, path, mode):
        with real_create_stream(self, path, mode) as stream:
            yield FullDisk(stream) if str(path).endswith(".distcp") else stream

    monkeypatch.setattr(filesystem.FileSystem, "create_stream", create_stream)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    ctx = DistContext(0, 0, 1, torch.device("cpu"), None)
    path = str(tmp_path / "checkpoints" / "step_000001")
    os.makedirs(os.path.dirname(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(UserError) as info:
            sc.save(path, ctx, model, [opt], model_config={}, step=1)
    assert str(info.value).startswith(f"could not write checkpoint {path}: No space left on device. Nothing "
                                      "half-written was left"), str(info.value)
    assert os.listdir(tmp_path / "checkpoints") == []
