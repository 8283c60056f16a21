"""Training checkpoints: one file of plain values (weights, model source, optimizer states, data position,
random generators) with a checksum (format.py), or a sharded folder (sharded_checkpoint.py), loaded without running
code; the checks that a --resume checkpoint fits this run. The entry point every tool calls: load_checkpoint reads
either kind.
"""
import os
import random

import torch

from gptlab.checkpoint import sharded_checkpoint
from gptlab.checkpoint.format import checkpoint_payload, read_file, write_payload
from gptlab.core.errors import UserError
from gptlab.tokenizer.format import open_tokenizer


def rng_states():
    """Every random generator a training run draws from (torch CPU, Python, CUDA), for a checkpoint."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_states(states):
    """Restore rng_states() from a checkpoint (missing parts are left alone)."""
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "python" in states:
        random.setstate(_tuplify(states["python"]))
    if states.get("cuda") and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, (list, tuple)) else x


def save_checkpoint(path, *, model_state, model_config, step, args=None, tokenizer=None, optimizer_states=None,
                    dataloader_state=None, rng_states=None, extra=None, data=None, model_source=None,
                    overwrite=False):
    """Write one training checkpoint atomically (never over an existing file unless overwrite).

    The file is a `torch.save` of plain values only (tensors, numbers, strings, lists, dicts), so
    `load_checkpoint` can open it with `weights_only=True`:
        format, format_version, step (optimizer steps done), model (plain state dict: no `_orig_mod.`
        prefixes from torch.compile), model_config (GPT(GPTConfig(**model_config)) rebuilds the network),
        model_source {file, code, sha256} (the model.py that defines GPT and GPTConfig), args (every flag),
        tokenizer {name, ranks_sha256}, optimizers [state dicts], dataloader (position), rng, extra,
        data {train_sha256, val_sha256} (gptlab.dataset.selection.data_fingerprint), sha256 (of all the rest).
    """
    payload = checkpoint_payload(model_state=model_state, model_config=model_config, step=step, args=args,
                                 tokenizer=tokenizer, optimizer_states=optimizer_states,
                                 dataloader_state=dataloader_state, rng_states=rng_states, extra=extra, data=data,
                                 model_source=model_source)
    write_payload(path, payload, overwrite)
    return path


def load_checkpoint(path, map_location="cpu", allow_old=False, load_weights=True, trust_code=False):
    """Read a checkpoint written by save_checkpoint → dict (see save_checkpoint for the keys).

    The model it holds is built by gptlab.checkpoint.model_source.load_model (from the source it carries). Loading
    never runs code from the file (weights_only=True). A checkpoint of an older format is refused with the command
    that converts it (allow_old=True reads it anyway: the converter does). A folder is a sharded checkpoint
    (train_gpt.py --shard_params; gptlab.checkpoint.sharded_checkpoint): every file is checked against its manifest,
    and "model" holds the whole weights (load_weights=False: meta tensors of their shapes, for a resume that reads
    the shards itself). Its DCP index (a pickle) is read with an allow-list of DCP's own classes, and non-tensor
    entries (pickles too) are refused, unless trust_code (the tools' --trust_model_code).
    """
    if os.path.isdir(path):
        return sharded_checkpoint.load(path, load_weights=load_weights, trust_code=trust_code)
    return read_file(path, map_location=map_location, allow_old=allow_old)


def check_resume_compatible(ckpt, model_config, tokenizer, train_steps, arch_keys, shards=None, allow_new_data=False):
    """Refuse a --resume checkpoint this run cannot continue: another architecture (the model_config entries
    named by arch_keys), another tokenizer (by hash), past train_steps (one at train_steps only evaluates), or
    (unless allow_new_data) other training or validation data than it recorded (shards: a
    gptlab.dataset.selection.RunShards)."""
    differ = [k for k in arch_keys if ckpt["model_config"].get(k) != model_config[k]]
    if differ:
        raise UserError("--resume checkpoint has a different architecture: " + ", ".join(
            f"--{k} {ckpt['model_config'].get(k)} (checkpoint) vs {model_config[k]}" for k in differ)
            + "; pass the checkpoint's values")
    if ckpt["tokenizer"].get("ranks_sha256") not in (None, tokenizer.ranks_sha256):
        raise UserError(f"--resume checkpoint was trained with tokenizer {ckpt['tokenizer'].get('name')}, not "
                        f"{tokenizer.name}; pass --tokenizer {ckpt['tokenizer'].get('name')}")
    if ckpt["step"] > train_steps:
        raise UserError(f"--resume checkpoint is at step {ckpt['step']}, past --train_steps "
                        f"{train_steps}; raise --train_steps to train further")
    recorded = ckpt.get("data") or {}
    for split in ("train", "val"):
        was, now = recorded.get(f"{split}_sha256"), getattr(shards, f"{split}_sha256", None)
        if was and now and was != now and not allow_new_data:
            raise UserError(f"--resume checkpoint was trained on other {split} data: the {split} shards now "
                            f"({', '.join(getattr(shards, f'{split}_files'))}) differ from the ones it recorded "
                            "(rebuilt with another seed or text?); point --train_files/--val_files at the original "
                            "shards, or pass --allow_new_data to continue on these")


def checkpoint_tokenizer(ckpt, path):
    """The tokenizer a checkpoint (read from `path`) was trained with, as a gptlab.tokenizer.format.LoadedTokenizer: its
    --tokenizer as recorded, else its name in tokenizers/, checked by hash."""
    recorded = ckpt["tokenizer"]
    candidates = [c for c in (ckpt["args"].get("tokenizer"), recorded.get("name")) if c and isinstance(c, str)]
    for candidate in candidates:
        try:
            tokenizer = open_tokenizer(candidate)
            break
        except UserError:
            continue
    else:
        raise UserError(f"the tokenizer of {path} ({' or '.join(map(str, candidates))}) was not found; put it in "
                        "tokenizers/")
    if recorded.get("ranks_sha256") not in (None, tokenizer.ranks_sha256):
        raise UserError(f"{tokenizer.path} is not the tokenizer {path} was trained with (its hash differs)")
    return tokenizer
