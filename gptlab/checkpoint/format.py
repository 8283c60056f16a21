"""The checkpoint format (its one owner): the payload dict (format, version, checksum, the structure every tool
relies on), written atomically and read without running code. The layer both checkpoint kinds build on:
checkpointing.py (one file) and sharded_checkpoint.py (a folder whose bookkeeping file is one of these)."""
import errno
import hashlib
import os
import re

import torch

from gptlab.checkpoint import CHECKPOINT_DIR
from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write

CHECKPOINT_FORMAT = "gptlab-checkpoint"
CHECKPOINT_VERSION = 3  # 2: carries "sha256", a digest of everything else in it, verified on load; 3: carries
#                          "model_source", the model.py that made it (gptlab.checkpoint.model_source builds from it)
CONVERT_HINT = "python -m gptlab.checkpoint.convert_checkpoint"


def checkpoint_payload(*, model_state, model_config, step, args=None, tokenizer=None, optimizer_states=None,
                       dataloader_state=None, rng_states=None, extra=None, data=None, model_source=None, sharded=None):
    """The dict save_checkpoint writes (see there), its sha256 included. `sharded`: a sharded checkpoint's
    manifest (gptlab.checkpoint.sharded_checkpoint), whose tensors live beside it."""
    state = {k.removeprefix("_orig_mod."): v.detach().cpu() for k, v in model_state.items()}
    payload = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_VERSION, "step": int(step),
               "model": state, "model_config": dict(model_config), "model_source": model_source,
               "args": dict(args or {}),
               "tokenizer": dict(tokenizer or {}), "optimizers": list(optimizer_states or []),
               "dataloader": dataloader_state, "rng": rng_states or {}, "extra": extra or {}, "data": data or {}}
    if sharded is not None:
        payload["sharded"] = sharded
    payload["sha256"] = payload_sha256(payload)
    return payload


def write_payload(path, payload, overwrite=False):
    """Write a checkpoint_payload to `path` atomically (never over an existing file unless overwrite)."""
    try:
        if overwrite or not _save_unnamed_then_link(path, payload):
            with atomic_write(path, "wb", overwrite=overwrite) as f:
                torch.save(payload, f)
    except (OSError, RuntimeError) as err:  # torch's zip writer turns a failed write (disk full) into RuntimeErrors
        failed_write = err if isinstance(err, OSError) else err.__context__
        if not isinstance(failed_write, OSError) and "writ" not in str(err):
            raise
        reason = getattr(failed_write, "strerror", None) or str(err).splitlines()[0][:200]
        raise UserError(write_failure(path, reason)) from None


def write_failure(path, reason):
    """The one line for a checkpoint (file or sharded folder) that did not fit on the disk."""
    return (f"could not write checkpoint {path}: {reason}. Nothing half-written was left; free space (or fix the "
            "folder) and resume from the last checkpoint")


def _save_unnamed_then_link(path, payload):
    """torch.save into an unnamed file in path's folder (Linux O_TMPFILE), fsynced, then linked in as `path`: a
    process killed while writing (a checkpoint is megabytes to gigabytes) leaves nothing behind, where a named
    temporary file (path.tmp.PID) would stay. False where that cannot be done (no O_TMPFILE on this system or
    filesystem, no folder yet, an existing `path`): the caller writes through gptlab.core.files.atomic_write."""
    flag, folder = getattr(os, "O_TMPFILE", None), os.path.dirname(os.path.abspath(path))
    if flag is None or os.path.lexists(path):
        return False
    try:
        os.makedirs(folder, exist_ok=True)
        fd = os.open(folder, flag | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError:  # atomic_write words the folder's problem
        return False
    with os.fdopen(fd, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
        try:
            os.link(f"/proc/self/fd/{f.fileno()}", path)  # linkat(AT_SYMLINK_FOLLOW): the complete file gets its name
        except FileExistsError:
            raise UserError(f"{path} already exists; checkpoints are never overwritten") from None
        except OSError as err:
            if err.errno not in (errno.ENOENT, errno.EXDEV, errno.EPERM, errno.EACCES, errno.EINVAL):
                raise
            return False  # no /proc, or a filesystem that refuses the link: write it the other way
    return True


def payload_sha256(payload):
    """sha256 over a checkpoint's content (every tensor's dtype, shape and bytes, every value; the "sha256" entry
    left out), in a fixed order, so a flipped byte anywhere in its data shows on load."""
    digest = hashlib.sha256()

    def feed(value):
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b"")
        elif isinstance(value, dict):
            digest.update(b"{")
            for key in sorted(value, key=repr):
                if key != "sha256" or value is not payload:
                    digest.update(repr(key).encode())
                    feed(value[key])
            digest.update(b"}")
        elif isinstance(value, (list, tuple)):
            digest.update(b"[" if isinstance(value, list) else b"(")
            for item in value:
                feed(item)
            digest.update(b"]")
        else:
            digest.update(repr(value).encode())

    feed(payload)
    return digest.hexdigest()


def read_file(path, map_location="cpu", allow_old=False):
    """One checkpoint file → its payload, checked (format, version, checksum, structure); load_checkpoint's file
    half, and a sharded folder's bookkeeping file. Runs no code from the file (weights_only=True)."""
    if not os.path.isfile(path):
        raise UserError(f"checkpoint {path} does not exist; pass a .pt file from an experiments/<run>/"
                        f"{CHECKPOINT_DIR}/ folder")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except PermissionError:
        raise UserError(f"checkpoint {path} is not readable (permission denied); check its permissions") from None
    except Exception as err:
        named = refused_global(err)
        if named:
            raise UserError(code_in_pickle(f"checkpoint {path}", named)) from None
        first_line = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise UserError(f"checkpoint {path} cannot be read ({type(err).__name__}: {first_line}); it is damaged or "
                        "not a gptlab checkpoint") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} is not a gptlab checkpoint (no format={CHECKPOINT_FORMAT!r}); pass one that "
                        "train_gpt.py --save_model wrote (experiments/<run>/checkpoints/step_N.pt)")
    version = payload.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UserError(f"checkpoint {path} has an unknown format_version {_short_repr(version)}; it is damaged or "
                        "not a gptlab checkpoint")
    if version > CHECKPOINT_VERSION:
        raise UserError(f"{path} has checkpoint format_version {version}, newer than this code "
                        f"({CHECKPOINT_VERSION}); update gptlab")
    # The checksum is checked whatever the version says: only format 1 was written without one, and a file that
    # carries one is verified even if it claims format 1 (a version field cannot opt out of verification).
    if "sha256" in payload or version >= 2:
        if payload.get("sha256") != payload_sha256(payload):
            raise UserError(f"checkpoint {path} is damaged: its content does not match the checksum it was saved "
                            "with; resume from another checkpoint of the run")
    check_structure(payload, path)
    if version < CHECKPOINT_VERSION and not allow_old:
        raise UserError(f"checkpoint {path} has format_version {version}, from before checkpoints carried their "
                        f"model's source; convert it once with: {CONVERT_HINT} {path}")
    return payload


def refused_global(err):
    """What a weights-only torch.load refused to call (its long message names it: "GLOBAL builtins.eval"), or None
    for another error (an opcode it does not read, as in a plain pickle of protocol 4: not a checkpoint at all)."""
    found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
    return found.group(1) if found else None


def code_in_pickle(what, named):
    """The refusal of a weights-only file that names code: torch.load never ran it, and no flag makes it run."""
    return (f"{what} cannot be read: it holds a pickle that names {named} (code, where checkpoints hold only tensors "
            "and plain values); it was not run, and is refused even with --trust_model_code: the file is damaged or "
            "was made to run code")


def _short_repr(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _type_name(value):
    return "None" if value is None else type(value).__name__


def _plain_keys(value):
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


# Each entry a checkpoint holds → (check(value), what it must be). format_version 3 needs all of them; the older
# formats the converter reads (allow_old) may lack model_source (format 2) and data (format 1).
_STRUCTURE = {
    "step": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    # empty weights or no model source load (a checkpoint of a run's bookkeeping), but build no model:
    # model_source.load_model and module_for refuse them
    "model": (lambda v: _plain_keys(v) and all(isinstance(t, torch.Tensor) for t in v.values()),
              "a dict of parameter names to tensors"),
    "model_config": (_plain_keys, "a dict of GPTConfig fields"),
    "model_source": (lambda v: v is None or (isinstance(v, dict)
                                             and all(isinstance(v.get(k), str) for k in ("file", "code", "sha256"))),
                     "a dict of strings file, code, sha256"),
    "args": (_plain_keys, "a dict of flag names to values"),
    "tokenizer": (lambda v: _plain_keys(v) and all(isinstance(v.get(k), (str, type(None)))
                                                   for k in ("name", "ranks_sha256")),
                  "a dict with name and ranks_sha256 strings"),
    "optimizers": (lambda v: isinstance(v, list) and all(isinstance(s, dict) for s in v),
                   "a list of optimizer state dicts"),
    "dataloader": (lambda v: v is None or _plain_keys(v), "a dict (or None)"),
    "rng": (_plain_keys, "a dict of random generator states"),
    "extra": (_plain_keys, "a dict"),
    "data": (_plain_keys, "a dict"),
}
_OPTIONAL_BEFORE_3 = ("model_source", "data")


def check_structure(payload, path):
    """Every entry a checkpoint must hold, with its type: one UserError naming the first that is missing or of the
    wrong type (a crafted or truncated checkpoint), so no tool meets a KeyError or TypeError later."""
    old = payload.get("format_version", CHECKPOINT_VERSION) < CHECKPOINT_VERSION
    for key, (check, wanted) in _STRUCTURE.items():
        if key not in payload:
            if old and key in _OPTIONAL_BEFORE_3:
                continue
            raise UserError(f"checkpoint {path} has no {key!r} entry; it is damaged or not a complete gptlab "
                            "checkpoint (resume from another checkpoint of the run)")
        if not check(payload[key]):
            if old and key in _OPTIONAL_BEFORE_3 and payload[key] is None:
                continue
            raise UserError(f"checkpoint {path} has a malformed {key!r} entry ({_type_name(payload[key])}; it must be "
                            f"{wanted}); it is damaged or not a gptlab checkpoint")
    return payload
