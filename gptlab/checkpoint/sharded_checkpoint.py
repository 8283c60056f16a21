"""Sharded checkpoints (train_gpt.py --shard_params): a folder per checkpoint, each rank writing its own blocks
with torch.distributed.checkpoint (DCP), which reshards them onto any world size when read back.

    experiments/RUN/checkpoints/step_000100/
        checkpoint.pt        the run's bookkeeping as a gptlab checkpoint with no tensors (flags, model source,
                             step, data position, every rank's random generators, optimizer settings) and a
                             manifest: every other file's size and sha256
        .metadata            DCP's index of the tensors
        __0_0.distcp ...     the tensors: model.<name>, optim.<i>.<name>.<state key> (rank r wrote __r_*)

The folder is written under a temporary name and renamed when complete (the manifest last), so a run killed while
saving leaves no folder that looks like a checkpoint; a save that fails (a full disk) on any rank fails on every
rank with one message and removes that temporary folder. Loading checks every file against the manifest first: a
missing, truncated or altered file is refused by name.

A manifest proves no origin (whoever makes a folder can recompute it), and DCP reads `.metadata` with pickle.load
and non-tensor entries with torch.load(weights_only=False): either could run a stranger's code. So `.metadata` is
unpickled here with an allow-list of the classes DCP's index is made of (gptlab.core.unpickle), checked (every
entry a tensor, every block inside a file of the manifest) and handed to DCP, which then reads only tensors
(torch.load(weights_only=True)). Anything else is refused unless the user passes --trust_model_code.

The same functions restore a checkpoint into a run of either kind: a sharded folder into a sharded run (DCP reads
this rank's blocks) or into an unsharded one (whole tensors), and a one-file checkpoint into a sharded run (each
rank keeps its blocks of the whole tensors). Multi-node runs need the folder on a filesystem every node sees.
"""
import contextlib
import errno
import hashlib
import os
import pathlib
import pickle
import shutil
import uuid
import warnings

import torch

from gptlab.core import distributed as dist_utils
from gptlab.core.distributed import is_sharded, reshard
from gptlab.core.errors import UserError
from gptlab.core.unpickle import RefusedGlobal, load_allowed
from gptlab.checkpoint.format import (checkpoint_payload, code_in_pickle, read_file, refused_global, write_failure,
                                      write_payload)

META_FILE = "checkpoint.pt"
DCP_INDEX = ".metadata"
HASH_CHUNK = 1 << 24
TRUST_FLAG = "--trust_model_code"
# a write that failed for want of room (or a disk that refuses writes): one error line, not a traceback
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def save(path, ctx, model, optimizers, **bookkeeping):
    """Collective: write the sharded checkpoint folder `path`. bookkeeping: checkpoint_payload's
    arguments other than the model state and optimizer states (dataloader_state, rng_states, args, ...). A write
    that fails on any rank (a full disk) fails on every rank, with no temporary folder left (_agree_on_failure)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # (a BaseException)

    if os.path.exists(path):
        raise UserError(f"{path} already exists; checkpoints are never overwritten")
    token = dist_utils.broadcast_object(ctx, uuid.uuid4().hex[:12])
    partial = f"{path}.partial-{token}"
    failure, writer = None, _recording_writer(partial)
    try:
        os.makedirs(partial, exist_ok=True)
        dcp.save(state_entries(model, optimizers), storage_writer=writer)
    except (Exception, CheckpointException) as err:  # DCP raises its ranks' failures on every rank
        failure = writer.fs.failed_writes[-1] if writer.fs.failed_writes else err
    _agree_on_failure(ctx, path, partial, failure, dist_utils.all_gather_objects)
    files = sorted(name for name in os.listdir(partial) if name != META_FILE)
    mine = {name: _file_record(os.path.join(partial, name)) for i, name in enumerate(files)
            if i % ctx.world_size == ctx.rank}  # each rank hashes its share of the files
    manifest = {}
    for part in dist_utils.all_gather_objects(ctx, mine):
        manifest.update(part)
    # every rank's generators (the data position is global, the same on every rank by design: rank 0's is saved)
    rng_per_rank = dist_utils.all_gather_objects(ctx, bookkeeping.get("rng_states") or {})
    if ctx.is_main:
        groups = [{"param_groups": _param_groups(opt)} for opt in optimizers]  # settings; the state is in DCP
        payload = checkpoint_payload(
            model_state={}, optimizer_states=groups,
            sharded={"files": manifest, "world_size": ctx.world_size, "rng_per_rank": rng_per_rank},
            **bookkeeping)
        try:
            write_payload(os.path.join(partial, META_FILE), payload)
            os.rename(partial, path)
        except Exception as err:  # noqa: BLE001 (every rank learns of it below)
            failure = err
    _agree_on_failure(ctx, path, partial, failure, lambda ctx, failed: [dist_utils.broadcast_object(ctx, failed)])
    return path


def _recording_writer(folder):
    """DCP's FileSystemWriter for `folder`, whose files keep the OSError of a write that failed (a full disk):
    torch.save inside DCP reports it only as "unexpected pos", and DCP passes its ranks' failures around pickled,
    without their causes."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import FileSystem

    class RecordedWrites:
        def __init__(self, stream, failed):
            self._stream, self._failed = stream, failed

        def write(self, data):
            try:
                return self._stream.write(data)
            except OSError as err:
                self._failed.append(err)
                raise

        def __getattr__(self, name):
            return getattr(self._stream, name)

    class RecordingFileSystem(FileSystem):
        def __init__(self):
            super().__init__()
            self.failed_writes = []

        @contextlib.contextmanager
        def create_stream(self, path, mode):
            with super().create_stream(path, mode) as stream:
                yield RecordedWrites(stream, self.failed_writes) if "r" not in mode else stream

    writer = FileSystemWriter(folder)
    writer.fs = RecordingFileSystem()
    return writer


def _agree_on_failure(ctx, path, partial, err, share):
    """Collective: every rank learns whether any failed (share(ctx, this rank's report) → the reports it sees). A
    failure removes the temporary folder (rank 0) and is raised on every rank: a full disk as one UserError that
    rank 0 alone prints, anything else (a bug) as its own exception on the rank where it happened."""
    mine = None if err is None else (_disk_message(err, path) or "")
    reports = share(ctx, mine)
    if all(report is None for report in reports):
        return
    if ctx.is_main:
        shutil.rmtree(partial, ignore_errors=True)
    dist_utils.barrier(ctx)  # the folder is gone before any rank reports
    message = next((report for report in reports if report), None)
    if message is None and err is not None:  # no rank ran out of room: a bug, with its traceback
        raise err
    raise UserError(message or f"could not write checkpoint {path}: another rank failed (see its error)",
                    quiet=not ctx.is_main)


def _disk_message(err, path):
    """The one-line message for a save that failed on the disk (ENOSPC, EFBIG, ...) anywhere in err's chain (a
    suppressed context included) or in the per-rank failures a DCP CheckpointException carries; None for any
    other failure."""
    seen, todo = set(), [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
            return write_failure(path, e.strerror or str(e))
        todo += [e.__cause__, e.__context__]
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            todo += [pair[0] if isinstance(pair, tuple) else pair for pair in failures.values()]
    if isinstance(err, UserError) and str(err).startswith("could not write checkpoint"):  # torch's words only
        return write_failure(path, str(err).split(": ", 1)[1].split(". Nothing half-written")[0])
    return None


def state_entries(model, optimizers):
    """{"model": {name: tensor}, "optim": {"<i>.<name>.<key>": tensor}}: the run's tensors by name, as this run
    holds them (DTensor blocks under --shard_params, whole tensors otherwise)."""
    reshard(model)
    names = {id(p): n for n, p in model.named_parameters()}
    optim = {}
    for i, opt in enumerate(optimizers):
        for group in opt.param_groups:
            for p in group["params"]:
                for key, value in opt.state.get(p, {}).items():
                    if isinstance(value, torch.Tensor):
                        optim[f"{i}.{names[id(p)]}.{key}"] = _storable(value)
    return {"model": {name: _storable(value) for name, value in model.state_dict().items()}, "optim": optim}


def _strided(tensor):
    from torch.distributed.tensor.placement_types import _StridedShard

    return any(isinstance(p, _StridedShard) for p in getattr(tensor, "placements", ()))


def _storable(tensor):
    """tensor as DCP can store it: a DTensor split in strided parts (gpt2.py's fused q/k/v under --tp: rank r holds
    part r of each third) gathered whole along those mesh dimensions, since DCP records a block as one contiguous
    chunk (two ranks' strided blocks would claim overlapping chunks and the save fails); anything else as it is."""
    if not _strided(tensor):
        return tensor
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.placement_types import _StridedShard

    return tensor.redistribute(placements=[Replicate() if isinstance(p, _StridedShard) else p
                                           for p in tensor.placements])


def _unstored(value, like):
    """The inverse of _storable: `value` (read in _storable(like)'s layout) in like's layout."""
    if not _strided(like):
        return value
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(value.full_tensor(), like.device_mesh, like.placements, src_data_rank=None)


def _param_groups(opt):
    """torch's state_dict()["param_groups"] (settings and parameter indices) without touching the state."""
    groups, index = [], 0
    for group in opt.param_groups:
        saved = {k: v for k, v in group.items() if k != "params"}
        saved["params"] = list(range(index, index + len(group["params"])))
        index += len(group["params"])
        groups.append(saved)
    return groups


def _file_record(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return {"bytes": os.path.getsize(path), "sha256": digest.hexdigest()}


def load(path, load_weights=True, trust_code=False):
    """A sharded checkpoint folder → the dict load_checkpoint returns, after checking every file against the
    manifest and reading DCP's index without running code from it (read_index; trust_code: the user's
    --trust_model_code). "model": the whole weights (read in this process), or with load_weights=False meta
    tensors of their shapes and dtypes."""
    meta_path = os.path.join(path, META_FILE)
    if not os.path.isfile(meta_path):
        raise UserError(f"{path} is a folder but not a complete sharded checkpoint (no {META_FILE} in it); pass a "
                        "run's checkpoints/step_N.pt file or step_N folder")
    payload = read_file(meta_path)  # weights_only: plain values
    sharded = payload.get("sharded")
    if not isinstance(sharded, dict) or not isinstance(sharded.get("files"), dict) or not sharded["files"]:
        raise UserError(f"{meta_path} has no manifest of the files beside it; it is damaged or not a sharded "
                        "checkpoint")
    for name, record in sorted(sharded["files"].items()):
        if (not isinstance(name, str) or name in ("", ".", "..", META_FILE) or "/" in name or "\\" in name
                or not isinstance(record, dict) or not isinstance(record.get("bytes"), int)
                or not isinstance(record.get("sha256"), str)):
            raise UserError(f"{meta_path} has a malformed manifest entry {name!r}; it is damaged or not a sharded "
                            "checkpoint")
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise UserError(f"sharded checkpoint {path} is incomplete: {name} is missing; resume from another "
                            "checkpoint of the run")
        size = os.path.getsize(file)
        if size != record["bytes"] or _file_record(file)["sha256"] != record["sha256"]:
            how = f"{size:,} bytes instead of {record['bytes']:,}" if size != record["bytes"] else "its content changed"
            raise UserError(f"sharded checkpoint {path} is damaged: {name} does not match its manifest ({how}); "
                            "resume from another checkpoint of the run")
    if DCP_INDEX not in sharded["files"]:
        raise UserError(f"sharded checkpoint {path} is incomplete: its manifest lists no {DCP_INDEX}; resume from "
                        "another checkpoint of the run")
    metadata = read_index(path, sharded["files"], trust_code)
    model_keys = {key[len("model."):]: meta for key, meta in _saved_tensors(metadata).items()
                  if key.startswith("model.")}
    if load_weights:
        weights = {name: torch.zeros(size, dtype=dtype) for name, (size, dtype) in model_keys.items()}
        _dcp_load({"model": weights}, path, metadata, trust_code, no_dist=True)
    else:
        weights = {name: torch.empty(size, dtype=dtype, device="meta") for name, (size, dtype) in model_keys.items()}
    payload["model"] = weights
    payload["sharded_path"] = path
    payload["sharded_trusted"] = bool(trust_code)  # what restore() may read from it
    return payload


def _index_globals():
    """What DCP's index may name (found by unpickling real ones), each as the object to use: its dataclasses, torch
    dtypes, torch.Size, a layout by name, a path. Calling any of these builds a value and nothing else."""
    from torch.distributed.checkpoint import filesystem, metadata

    allowed = {("torch.distributed.checkpoint.metadata", name): getattr(metadata, name) for name in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")}
    allowed["torch.distributed.checkpoint.filesystem", "_StorageInfo"] = filesystem._StorageInfo
    allowed["torch", "Size"] = torch.Size
    allowed.update({("torch", name): value for name, value in vars(torch).items() if isinstance(value, torch.dtype)})
    layouts = {str(value): value for value in vars(torch).values() if isinstance(value, torch.layout)}
    allowed["torch.serialization", "_get_layout"] = lambda name: layouts[name]
    for name in ("PosixPath", "PurePosixPath"):  # StorageMeta.checkpoint_id: where it was saved (not used)
        allowed["pathlib", name] = pathlib.PurePosixPath
    return allowed


def read_index(path, files, trust_code=False):
    """DCP's index (.metadata, a pickle) of a sharded checkpoint, read without running code from it: only the
    globals of _index_globals, then every entry checked (check_index). A pickle that names anything else (a
    function, a wrapper around genuine metadata) is refused, naming the flag, unless trust_code: then it is read
    as DCP reads it (pickle.load), the way it was before this check."""
    index_path = os.path.join(path, DCP_INDEX)
    try:
        with open(index_path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise UserError(f"cannot read {index_path} ({err.strerror or err})") from None
    try:
        metadata = load_allowed(data, _index_globals())
    except RefusedGlobal as err:
        if not trust_code:
            raise UserError(f"sharded checkpoint {path}: its {DCP_INDEX} {err} (not one of DCP's index classes), "
                            f"which loading would call: it could run code. Refused; pass {TRUST_FLAG} only for a "
                            "checkpoint whose maker you trust") from None
        return pickle.loads(data)  # noqa: S301 (the user's explicit opt-in)
    except Exception as err:  # noqa: BLE001 (truncated, or values of the wrong kind)
        raise UserError(f"sharded checkpoint {path}: its {DCP_INDEX} cannot be read ({type(err).__name__}: "
                        f"{str(err)[:200]}); it is damaged or not a DCP index") from None
    return check_index(metadata, path, files, trust_code)


def check_index(metadata, path, files, trust_code=False):
    """Refuse an index that is not what gptlab writes: every entry a tensor (a non-tensor entry is a pickle DCP
    would read with torch.load(weights_only=False), so only with trust_code), of a known dtype and shape, stored in
    a file of the manifest (no other path), within its size, untransformed; no more elements than those files
    hold (a crafted shape cannot allocate terabytes)."""
    from torch.distributed.checkpoint import filesystem
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                        MetadataIndex, TensorProperties, TensorStorageMetadata)

    def bad(what):
        return UserError(f"sharded checkpoint {path}: its {DCP_INDEX} {what}; it is damaged or was not written by "
                         "gptlab")

    def is_size(value):
        return isinstance(value, torch.Size) and all(isinstance(n, int) and n >= 0 for n in value)

    entries, storage = getattr(metadata, "state_dict_metadata", None), getattr(metadata, "storage_data", None)
    if type(metadata) is not Metadata or not isinstance(entries, dict) or not isinstance(storage, dict):
        raise bad("is not a DCP index")
    data_bytes = sum(record["bytes"] for name, record in files.items() if name != DCP_INDEX)
    total = 0
    for key, entry in entries.items():
        if isinstance(entry, BytesStorageMetadata) and not trust_code:
            raise UserError(f"sharded checkpoint {path} holds a non-tensor entry {str(key)[:100]!r}, which DCP "
                            f"unpickles with torch.load (it could run code; gptlab writes tensors only). Refused; "
                            f"pass {TRUST_FLAG} only for a checkpoint whose maker you trust")
        if isinstance(entry, BytesStorageMetadata):
            continue
        props = getattr(entry, "properties", None)
        chunks = getattr(entry, "chunks", None)
        if (not isinstance(key, str) or type(entry) is not TensorStorageMetadata
                or type(props) is not TensorProperties or not isinstance(props.dtype, torch.dtype)
                or not is_size(entry.size) or not isinstance(chunks, list)
                or not all(type(c) is ChunkStorageMetadata and is_size(c.offsets) and is_size(c.sizes)
                           and len(c.offsets) == len(c.sizes) == len(entry.size) for c in chunks)):
            raise bad(f"has a malformed entry {str(key)[:100]!r}")
        total += entry.size.numel() * props.dtype.itemsize
    if total > data_bytes:
        raise bad(f"describes {total:,} bytes of tensors, more than its files hold ({data_bytes:,})")
    for index, info in storage.items():
        if (type(index) is not MetadataIndex or type(info) is not filesystem._StorageInfo
                or not isinstance(info.relative_path, str) or info.relative_path not in files
                or info.relative_path == DCP_INDEX or not isinstance(info.offset, int)
                or not isinstance(info.length, int) or info.offset < 0 or info.length < 0
                or info.offset + info.length > files[info.relative_path]["bytes"]
                or (info.transform_descriptors and not trust_code)):
            raise bad(f"points outside the checkpoint's files or is malformed (entry {str(index)[:100]})")
    return metadata


def _saved_tensors(metadata):
    """{key: (shape, dtype)} of every tensor in a DCP index (keys flattened: model.<name>, optim.<i>.<name>.<k>)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    return {key: (tuple(meta.size), meta.properties.dtype) for key, meta in metadata.state_dict_metadata.items()
            if isinstance(meta, TensorStorageMetadata)}


def _dcp_load(state, path, metadata, trust_code, no_dist):
    """dcp.load into `state` (in place) from the index read_index gave (DCP reads no pickle of its own), tensors
    only (torch.load(weights_only=True)) unless trust_code; a failure to read is one UserError."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    class CheckedIndex(dcp.FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            if getattr(metadata, "storage_meta", None) is None:
                from torch.distributed.checkpoint.metadata import StorageMeta
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class TensorsOnly(dcp.DefaultLoadPlanner):
        def load_bytes(self, read_item, value):  # check_index already refused these entries
            if not trust_code:
                raise UserError(f"sharded checkpoint {path} holds a non-tensor entry; pass {TRUST_FLAG} to read it")
            super().load_bytes(read_item, value)

    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(state, storage_reader=CheckedIndex(path), planner=TensorsOnly(), no_dist=no_dist)
    except (Exception, CheckpointException) as err:
        if isinstance(err, UserError):
            raise
        inner = [pair[0] for pair in getattr(err, "failures", {}).values() if isinstance(pair, tuple)]
        refusal = next((e for e in inner if isinstance(e, UserError)), None)
        if refusal is not None:
            raise UserError(str(refusal)) from None
        named = next((refused_global(e) for e in inner if refused_global(e)), None)
        if named:  # a tensor block that is a pickle of code: torch.load(weights_only=True) refused it
            raise UserError(code_in_pickle(f"sharded checkpoint {path}", named)) from None
        reason = str(inner[0] if inner else err).strip().splitlines()
        raise UserError(f"sharded checkpoint {path} cannot be read ({type(inner[0] if inner else err).__name__}: "
                        f"{(reason[-1] if reason else '')[:200]}); it is damaged or not a gptlab checkpoint") from None


def restore(ckpt, model, optimizers, ctx):
    """Put a checkpoint's weights and optimizer states into this run's model and optimizers: a sharded folder
    (DCP reads what this rank holds: blocks or whole tensors) or a one-file checkpoint into a sharded run (each
    rank cuts its blocks out of the whole tensors). Collective for a folder."""
    reshard(model)
    params = dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    optim_state = {}  # (optimizer index, parameter name) → {state key: tensor as this run holds it}
    if "sharded_path" in ckpt:
        path, trusted = ckpt["sharded_path"], ckpt.get("sharded_trusted", False)
        metadata = read_index(path, ckpt["sharded"]["files"], trusted)
        saved_like = model.state_dict()
        targets = {"model": {name: _storable(value) for name, value in saved_like.items()}, "optim": {}}
        for key, (size, dtype) in _saved_tensors(metadata).items():
            if key.startswith("optim."):
                i, rest = key[len("optim."):].split(".", 1)
                name, state_key = rest.rsplit(".", 1)  # (state keys have no dots; parameter names do)
                p = params.get(name)
                if p is None:
                    raise ValueError(f"the optimizer state of {name} has no parameter of that name here")
                like = torch.zeros_like(p, dtype=dtype) if size == tuple(p.shape) else torch.zeros(size, dtype=dtype)
                targets["optim"][f"{i}.{name}.{state_key}"] = _storable(like)
                optim_state.setdefault((int(i), name), {})[state_key] = like
        _dcp_load(targets, path, metadata, trusted, no_dist=not ctx.is_distributed)  # fills them in place
        for (i, name), states in optim_state.items():
            for state_key, like in states.items():
                states[state_key] = _unstored(targets["optim"][f"{i}.{name}.{state_key}"], like)
        model_state = {name: _unstored(value, saved_like[name]) for name, value in targets["model"].items()}
        rng = ckpt["sharded"]["rng_per_rank"]
        ckpt["rng"] = rng[ctx.rank] if ctx.rank < len(rng) else ckpt["rng"]  # this rank's generators where it had one
    else:  # one file of whole tensors into a sharded run
        model_state = {name: _like(value, params.get(name)) for name, value in ckpt["model"].items()}
        for i, (opt, state) in enumerate(zip(optimizers, ckpt["optimizers"])):
            order = [p for group in opt.param_groups for p in group["params"]]
            for index, values in state.get("state", {}).items():
                p = order[index]
                optim_state[i, names[id(p)]] = {key: _like(value, p) if isinstance(value, torch.Tensor) else value
                                                for key, value in values.items()}
    model.load_state_dict(model_state)
    for i, (opt, saved) in enumerate(zip(optimizers, ckpt["optimizers"])):
        order = [p for group in opt.param_groups for p in group["params"]]
        state = {index: optim_state[i, names[id(p)]] for index, p in enumerate(order)
                 if (i, names[id(p)]) in optim_state}
        opt.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def _like(whole, param):
    """A whole tensor as `param` holds its kind: this rank's block (a DTensor of param's layout) where param is
    sharded and the shapes agree, else as it is."""
    if param is None or not is_sharded(param) or tuple(whole.shape) != tuple(param.shape):
        return whole
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(whole.to(param.device), param.device_mesh, param.placements, src_data_rank=None)
