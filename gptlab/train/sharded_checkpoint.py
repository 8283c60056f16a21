"""Sharded checkpoints (train_gpt.py --shard_params): a folder per checkpoint, each rank writing its own blocks
with torch.distributed.checkpoint (DCP), which reshards them onto any world size when read back.

    experiments/RUN/checkpoints/step_000100/
        checkpoint.pt        the run's bookkeeping as a gptlab checkpoint with no tensors (flags, model source,
                             step, data position, every rank's random generators, optimizer settings) and a
                             manifest: every other file's size and sha256
        .metadata            DCP's index of the tensors
        __0_0.distcp ...     the tensors: model.<name>, optim.<i>.<name>.<state key> (rank r wrote __r_*)

The folder is written under a temporary name and renamed when complete (the manifest last), so a run killed while
saving leaves no folder that looks like a checkpoint. Loading checks every file against the manifest first: a
missing, truncated or altered file is refused by name.

The same functions restore a checkpoint into a run of either kind: a sharded folder into a sharded run (DCP reads
this rank's blocks) or into an unsharded one (whole tensors), and a one-file checkpoint into a sharded run (each
rank keeps its blocks of the whole tensors). Multi-node runs need the folder on a filesystem every node sees.
"""
import hashlib
import os
import uuid
import warnings

import torch

from gptlab.core import distributed as dist_utils
from gptlab.core.errors import UserError
from gptlab.train import checkpointing
from gptlab.train.fsdp import is_sharded, reshard

META_FILE = "checkpoint.pt"
HASH_CHUNK = 1 << 24


def save(path, ctx, model, optimizers, **bookkeeping):
    """Collective: write the sharded checkpoint folder `path`. bookkeeping: checkpointing.checkpoint_payload's
    arguments other than the model state and optimizer states (dataloader_state, rng_states, args, ...)."""
    import torch.distributed.checkpoint as dcp

    if os.path.exists(path):
        raise UserError(f"{path} already exists; checkpoints are never overwritten")
    token = dist_utils.broadcast_object(ctx, uuid.uuid4().hex[:12])
    partial = f"{path}.partial-{token}"
    os.makedirs(partial, exist_ok=True)
    dcp.save(state_entries(model, optimizers), checkpoint_id=partial)
    dist_utils.barrier(ctx)
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
        payload = checkpointing.checkpoint_payload(
            model_state={}, optimizer_states=groups,
            sharded={"files": manifest, "world_size": ctx.world_size, "rng_per_rank": rng_per_rank},
            **bookkeeping)
        checkpointing.write_payload(os.path.join(partial, META_FILE), payload)
        os.rename(partial, path)
    dist_utils.barrier(ctx)
    return path


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
                        optim[f"{i}.{names[id(p)]}.{key}"] = value
    return {"model": model.state_dict(), "optim": optim}


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


def load(path, load_weights=True):
    """A sharded checkpoint folder → the dict load_checkpoint returns, after checking every file against the
    manifest. "model": the whole weights (read in this process), or with load_weights=False meta tensors of their
    shapes and dtypes."""
    meta_path = os.path.join(path, META_FILE)
    if not os.path.isfile(meta_path):
        raise UserError(f"{path} is a folder but not a complete sharded checkpoint (no {META_FILE} in it); pass a "
                        "run's checkpoints/step_N.pt file or step_N folder")
    payload = checkpointing.load_checkpoint(meta_path)
    sharded = payload.get("sharded")
    if not isinstance(sharded, dict) or not isinstance(sharded.get("files"), dict) or not sharded["files"]:
        raise UserError(f"{meta_path} has no manifest of the files beside it; it is damaged or not a sharded "
                        "checkpoint")
    for name, record in sorted(sharded["files"].items()):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise UserError(f"sharded checkpoint {path} is incomplete: {name} is missing; resume from another "
                            "checkpoint of the run")
        size = os.path.getsize(file)
        if size != record["bytes"] or _file_record(file)["sha256"] != record["sha256"]:
            how = f"{size:,} bytes instead of {record['bytes']:,}" if size != record["bytes"] else "its content changed"
            raise UserError(f"sharded checkpoint {path} is damaged: {name} does not match its manifest ({how}); "
                            "resume from another checkpoint of the run")
    shapes = _saved_tensors(path)
    model_keys = {key[len("model."):]: meta for key, meta in shapes.items() if key.startswith("model.")}
    if load_weights:
        import torch.distributed.checkpoint as dcp

        weights = {name: torch.zeros(size, dtype=dtype) for name, (size, dtype) in model_keys.items()}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load({"model": weights}, checkpoint_id=path, no_dist=True)
    else:
        weights = {name: torch.empty(size, dtype=dtype, device="meta") for name, (size, dtype) in model_keys.items()}
    payload["model"] = weights
    payload["sharded_path"] = path
    return payload


def _saved_tensors(path):
    """{key: (shape, dtype)} of every tensor in a DCP folder (keys flattened: model.<name>, optim.<i>.<name>.<k>)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = dcp.FileSystemReader(path).read_metadata()
    return {key: (tuple(meta.size), meta.properties.dtype) for key, meta in metadata.state_dict_metadata.items()
            if isinstance(meta, TensorStorageMetadata)}


def restore(ckpt, model, optimizers, ctx):
    """Put a checkpoint's weights and optimizer states into this run's model and optimizers: a sharded folder
    (DCP reads what this rank holds: blocks or whole tensors) or a one-file checkpoint into a sharded run (each
    rank cuts its blocks out of the whole tensors). Collective for a folder."""
    reshard(model)
    params = dict(model.named_parameters())
    names = {id(p): n for n, p in params.items()}
    optim_state = {}  # (optimizer index, parameter name) → {state key: tensor as this run holds it}
    if "sharded_path" in ckpt:
        import torch.distributed.checkpoint as dcp

        targets = {"model": model.state_dict(), "optim": {}}
        for key, (size, dtype) in _saved_tensors(ckpt["sharded_path"]).items():
            if key.startswith("optim."):
                i, rest = key[len("optim."):].split(".", 1)
                name, state_key = rest.rsplit(".", 1)  # (state keys have no dots; parameter names do)
                p = params.get(name)
                if p is None:
                    raise ValueError(f"the optimizer state of {name} has no parameter of that name here")
                like = torch.zeros_like(p, dtype=dtype) if size == tuple(p.shape) else torch.zeros(size, dtype=dtype)
                targets["optim"][f"{i}.{name}.{state_key}"] = like
                optim_state.setdefault((int(i), name), {})[state_key] = like
        dcp.load(targets, checkpoint_id=ckpt["sharded_path"], no_dist=not ctx.is_distributed)  # fills them in place
        model_state = targets["model"]
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
