"""train_gpt.py's flags turned into a checked configuration: the model's flags made from its config dataclass (the
one list of architecture fields, in model.py), every flag checked before any data is read, the micro-batch split,
dtype, compile and attention derived for the device."""
import argparse
import dataclasses

import torch
import torch.utils._device

from gptlab.core.distributed import all_gather_objects, device_memory_bytes
from gptlab.core.errors import UserError
from gptlab.train.batching import micro_batch_candidates, split_batch
from gptlab.train.flags import model_flags

def arch_fields(config_class):
    """The fields that change what the weights mean: a resumed run must keep them."""
    return [f.name for f in dataclasses.fields(config_class) if f.metadata.get("arch", True)]


DEFAULT_VAL_SEQ_LEN = 1024  # --val_seq_len of a model whose position table is not weights (rotary: model.py)


def positions_are_weights(config_class):
    """Whether max_seq_len sizes weights (a learned position table: a resumed run must keep it) rather than a
    table rebuilt on demand (arch=False)."""
    return any(f.name == "max_seq_len" and f.metadata.get("arch", True) for f in dataclasses.fields(config_class))


def model_config_of(cfg, config_class):
    """The model's config (a dict of the dataclass's fields) from resolved flags; max_seq_len is the longest row."""
    fields = {f.name: getattr(cfg, f.name) for f in model_flags(config_class)}
    return dataclasses.asdict(config_class(**fields, max_seq_len=max(cfg.train_seq_len, cfg.val_seq_len)))


def parameter_count(model_module, model_config):
    """Parameters of model_module.GPT(model_config), counted on a model built on the meta device (no memory)."""
    # torch caches the set of functions a device context redirects on first use; if that was inside transformers'
    # model loading, which patches torch.linspace for a while, linspace stays unredirected (a CPU tensor among meta
    # ones): start from a fresh set
    getattr(torch.utils._device._device_constructors, "cache_clear", lambda: None)()
    with torch.device("meta"):
        model = model_module.GPT(model_module.GPTConfig(**model_config))
    return sum(p.numel() for p in model.parameters())


def check_model_fits(model_module, model_config, device):
    """Refuse a model whose weights, gradients and optimizer state (~16 bytes a parameter) exceed the device's
    memory, before anything is allocated."""
    have = device_memory_bytes(device)
    try:
        layers = model_config.get("num_layers")
        if isinstance(layers, int) and layers > 2 * _FEW_LAYERS:
            # building 10**6 blocks, even on the meta device, takes hours: extrapolate from 64 and 128 first
            few, twice = (parameter_count(model_module, _with_layers(model_config, n))
                          for n in (_FEW_LAYERS, 2 * _FEW_LAYERS))
            estimate = few + (twice - few) * (layers - _FEW_LAYERS) // _FEW_LAYERS
            if 16 * estimate > 2 * have:  # far beyond: near the limit the exact count below decides
                _refuse_if_too_big(estimate, have, device, "~")
        n_params = parameter_count(model_module, model_config)
    except (TypeError, OverflowError, RuntimeError) as err:  # a size beyond torch's int64 (--mlp_ratio 1e300)
        raise UserError(f"the model's sizes are too large to build ({str(err).splitlines()[0][:120]}); lower "
                        "--mlp_ratio, --model_dim, --num_layers or --vocab_size") from None
    _refuse_if_too_big(n_params, have, device)


_FEW_LAYERS = 64


def _with_layers(model_config, n):
    """model_config with n layers (and, where the model has value embeddings, no more of them than layers)."""
    changed = dict(model_config, num_layers=n)
    if "num_val_emb" in model_config:
        changed["num_val_emb"] = min(model_config["num_val_emb"] or 0, n)
    return changed


def _refuse_if_too_big(n_params, have, device, about=""):
    need = 16 * n_params
    if need > have:
        raise UserError(f"the model has {about}{n_params:,} parameters: with gradients and optimizer state "
                        f"~{need / 2**30:,.0f} GiB, more than the {have / 2**30:,.0f} GiB of {device}; lower "
                        "--vocab_size, --model_dim or --num_layers")


def resolve_config(args, world_size, device, model_module):
    """Check what the flags' types (train_gpt.py's build_parser) cannot: the model's fields (its config dataclass),
    the row lengths against the attention's block, the batch split and the device; derive head_dim, the micro-batch
    split, dtype, compile and attention."""
    cfg = argparse.Namespace(**vars(args))
    for f in model_flags(model_module.GPTConfig):  # a field not set (flags of several architectures): its default
        if getattr(cfg, f.name, None) is None and f.default is not dataclasses.MISSING:
            setattr(cfg, f.name, f.default)
    fields = {f.name: getattr(cfg, f.name) for f in model_flags(model_module.GPTConfig)}
    try:  # the model checks its own fields (the vocabulary comes from the tokenizer later)
        checked = model_module.GPTConfig(**dict(fields, vocab_size=fields["vocab_size"] or 1))
    except ValueError as err:
        raise UserError(str(err)) from None
    ranks = world_size
    world_size, cfg.tp, cfg.pp = check_layout(cfg, ranks, model_module)  # from here: the data-parallel ranks
    if hasattr(cfg, "head_dim"):  # a field of the model's (derived from the width and heads where not given)
        cfg.head_dim = checked.head_dim
    if cfg.val_seq_len is None:  # a learned position table is weights: validate on the rows it trains on
        cfg.val_seq_len = cfg.train_seq_len if positions_are_weights(model_module.GPTConfig) else DEFAULT_VAL_SEQ_LEN
    multiple = model_module.SEQ_MULTIPLE
    for name in ("train_seq_len", "val_seq_len"):
        value = getattr(cfg, name)
        if value % multiple:
            raise UserError(f"--{name} {value} is not a multiple of {multiple} (FlexAttention's block size; "
                            f"required on CPU too so configs stay portable); use {-(-value // multiple) * multiple}")
        if cfg.tp > 1 and getattr(model_module, "SEQUENCE_PARALLEL", False) and value % cfg.tp:
            raise UserError(f"--{name} {value} does not divide by --tp {cfg.tp} (sequence parallelism: each TP rank "
                            f"holds an equal share of a row's positions); use a multiple of {cfg.tp}, e.g. "
                            f"{-(-value // cfg.tp) * cfg.tp}, or another --tp")
    if cfg.device_batch_size == "auto" and cfg.grad_acc_steps is None:
        split_batch(cfg.batch_size, cfg.train_seq_len, world_size, cfg.train_seq_len)  # the batch divides at all
        if device.type != "cuda":  # no memory to probe: micro-batches of about 4096 tokens, at least one row
            cfg.device_batch_size = max(t for t in micro_batch_candidates(cfg.batch_size // world_size,
                                                                          cfg.train_seq_len)
                                        if t <= max(4096, cfg.train_seq_len))
    dbs, seq_len = cfg.device_batch_size, cfg.train_seq_len
    if (dbs != "auto" and cfg.grad_acc_steps is None and dbs % seq_len and dbs < cfg.batch_size // world_size
            and cfg.batch_size % seq_len == 0):  # (a batch that is not whole rows has its own error below)
        raise UserError(f"--device_batch_size {dbs} is not a multiple of --train_seq_len {seq_len} (a micro-batch "
                        f"holds whole rows); use {max(1, dbs // seq_len) * seq_len}")
    if cfg.device_batch_size != "auto" or cfg.grad_acc_steps is not None:  # else train() probes the GPU first
        cfg.grad_acc_steps, cfg.device_batch_size = split_batch(cfg.batch_size, cfg.train_seq_len, world_size,
                                                                cfg.device_batch_size, cfg.grad_acc_steps)
    if cfg.pp > 1:  # the schedule splits this replica's rows of a step into --pp_microbatches
        cfg.pp_microbatches = cfg.pp_microbatches or 2 * cfg.pp
        rows = cfg.grad_acc_steps * cfg.device_batch_size // cfg.train_seq_len if cfg.grad_acc_steps else None
        if rows is not None and rows % cfg.pp_microbatches:
            raise UserError(f"--pp_microbatches {cfg.pp_microbatches} does not divide the {rows} rows of "
                            f"--train_seq_len {cfg.train_seq_len} that each of the {world_size} data-parallel "
                            "replica(s) takes per step; choose micro-batches dividing it, or another --batch_size")
    if cfg.val_batch_size is None:
        cfg.val_batch_size = max(cfg.val_seq_len, cfg.batch_size // cfg.val_seq_len * cfg.val_seq_len)
    if cfg.val_batch_size % cfg.val_seq_len:
        raise UserError(f"--val_batch_size {cfg.val_batch_size} is not a multiple of --val_seq_len {cfg.val_seq_len}")
    if cfg.dtype == "auto":
        cfg.dtype = "bfloat16" if device.type == "cuda" else "float32"
    if cfg.compile is None:
        cfg.compile = device.type == "cuda"
    if cfg.attention == "auto":
        cfg.attention = "flex" if device.type == "cuda" else "sdpa"
    if cfg.attention == "flex" and device.type != "cuda":
        raise UserError("--attention flex trains on CUDA only (FlexAttention has no CPU backward); on CPU use "
                        "--attention sdpa (the same mask, evaluated densely) or auto")
    cfg.fp8_head = resolve_fp8_head(getattr(cfg, "fp8_head", False), device, model_module, cfg.model_dim)
    if getattr(cfg, "shard_params", False) and ranks == 1:
        raise UserError("--shard_params shards the model across ranks, and this is one process; drop it (--no-shard_params "
                        "where a --preset sets it), or launch several ranks: torchrun --nproc_per_node=N train_gpt.py ...")
    return cfg


def fp8_supported(device, capability=None):
    """Whether device multiplies in FP8 (torch._scaled_mm): CUDA of compute capability 8.9 (Ada) or later
    (Hopper, Blackwell). capability (major, minor) is read from the device unless given."""
    if device.type != "cuda":
        return False
    return tuple(capability or torch.cuda.get_device_capability(device)) >= (8, 9)


def resolve_fp8_head(requested, device, model_module, model_dim, capability=None):
    """--fp8_head: "auto" (the record26 preset) is on where the device supports FP8 and the model has an FP8
    head that fits; on, it must be supported, else one UserError naming the fix."""
    has_head = hasattr(model_module.GPT, "fp8_head")
    if requested == "auto":
        return has_head and model_dim % 16 == 0 and fp8_supported(device, capability)
    if not requested:
        return False
    if not fp8_supported(device, capability):
        where = ("a CPU" if device.type != "cuda" else f"{device} has compute capability "
                 + ".".join(map(str, capability or torch.cuda.get_device_capability(device))))
        raise UserError(f"--fp8_head needs a CUDA GPU of compute capability 8.9 or later (FP8 matmuls: Ada, Hopper "
                        f"and later); this is {where}: pass --no-fp8_head")
    if not has_head:
        raise UserError("--fp8_head: this model.py (the checkpoint's) has no FP8 head; pass --no-fp8_head")
    if model_dim % 16:  # torch._scaled_mm multiplies in tiles of 16 along the model's width
        raise UserError(f"--fp8_head needs --model_dim a multiple of 16 (FP8 matmul tiles), got {model_dim}; "
                        "change --model_dim or pass --no-fp8_head")
    return True


# flags that may differ between ranks: paths (node-local copies: what they hold is compared instead, below) and what
# only rank 0 uses (the run folder, the console, the dashboards, the price)
_PER_RANK_FLAGS = ("train_files", "val_files", "tokenizer", "resume", "hellaswag_path", "experiments_dir", "device",
                   "dry_run", "usd_per_gpu_hour", "tensorboard", "wandb", "from_checkpoint")


def rank_settings(cfg, device, tokenizer, shards, checkpoint=None, model_source=None):
    """What every rank must share, as {name shown in an error: short text of the value}: each resolved flag but the
    per-rank ones, and in place of the paths what they name (the data's fingerprint: shard names, sizes and manifest
    checksums; the tokenizer's hash; the --resume checkpoint's step and checksum; the architecture file's hash)."""
    settings = {f"--{key}": value for key, value in sorted(vars(cfg).items()) if key not in _PER_RANK_FLAGS}
    settings.update({"--device (type)": device.type, "--tokenizer (its merges)": tokenizer.ranks_sha256,
                     "--train_files (the shards' names, sizes and checksums)": getattr(shards, "train_sha256", None),
                     "--val_files (the shards' names, sizes and checksums)": getattr(shards, "val_sha256", None),
                     _source_name(model_source): (model_source or {}).get("sha256")})
    if checkpoint is not None:
        settings["--resume (the checkpoint's step and checksum)"] = (checkpoint.get("step"), checkpoint.get("sha256"))
    return {name: _short(value) for name, value in settings.items()}


def _source_name(model_source):
    """The run's architecture file (model.py, gpt2.py, ...): what the settings check names."""
    from gptlab.checkpoint.model_source import DEFAULT_FILE, source_file  # (it imports the checkpoint code: only here)

    return source_file(model_source) or DEFAULT_FILE  # (a source recorded without its name: model.py's)


def _short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_ranks_agree(ctx, cfg, *, tokenizer, shards, checkpoint=None, model_source=None):
    """One collective at start (an all-gather of a small dict): every rank compares its settings (rank_settings)
    with every other's. Ranks started with other flags or other data (multi-node runs launched with different
    per-node commands, node-local data that differs) all stop with the same error naming what differs, on which
    ranks; rank 0 prints it."""
    if not ctx.is_distributed:
        return
    mine = rank_settings(cfg, ctx.device, tokenizer, shards, checkpoint, model_source)
    everyone = all_gather_objects(ctx, mine)
    differ = []
    for name in sorted(set().union(*everyone)):
        values = [settings.get(name, "(missing)") for settings in everyone]
        if len(set(values)) > 1:
            ranks_by_value = {}
            for rank, value in enumerate(values):
                ranks_by_value.setdefault(value, []).append(rank)
            shown = ", ".join(f"{_ranks(ranks)}: {value}" for value, ranks in ranks_by_value.items())
            differ.append(f"{name} ({shown})")
    if differ:
        raise UserError(f"ranks disagree on {'; '.join(differ[:6])}" + (f"; and {len(differ) - 6} more" if
                        len(differ) > 6 else "") + "; start every rank with the same flags and data",
                        quiet=not ctx.is_main)


def _ranks(ranks):
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


# ============================================================================================== Parallel layout
def tp_sizes(model_module, fields):
    """{what: size} the --tp ranks must divide, from the module's tp_sizes(config) (None: it has no tensor-parallel
    plan)."""
    sizes = getattr(model_module, "tp_sizes", None)
    if sizes is None:
        return None
    return sizes(model_module.GPTConfig(**dict(fields, vocab_size=fields.get("vocab_size") or 1)))


def check_layout(args, world_size, model_module):
    """The parallel layout (--tp, --pp, --pp_microbatches) against the ranks and the model: one UserError before
    any process group exists. Returns (data-parallel size, tp, pp)."""
    tp, pp, micro = getattr(args, "tp", 1) or 1, getattr(args, "pp", 1) or 1, getattr(args, "pp_microbatches", None)
    if micro is not None and pp == 1:
        raise UserError(f"--pp_microbatches {micro} is a setting of pipeline parallelism, and --pp is 1; drop it, "
                        "or pass --pp 2 or more")
    if world_size % (tp * pp):
        raise UserError(f"--tp {tp} x --pp {pp} = {tp * pp} ranks per model copy does not divide the {world_size} "
                        f"rank(s) launched; launch a multiple of {tp * pp} ranks (torchrun --nproc_per_node=N) or "
                        "change --tp / --pp")
    fields = {f.name: getattr(args, f.name, None) for f in model_flags(model_module.GPTConfig)}
    fields = {k: v for k, v in fields.items() if v is not None}
    if tp > 1:
        sizes = tp_sizes(model_module, fields)
        if sizes is None:
            raise UserError(f"--tp {tp}: this architecture ({getattr(args, 'arch', 'its module')}) has no "
                            "tensor-parallel plan (tp_plan in its module); drop --tp")
        for what, size in sizes.items():
            if size % tp:
                fits = [d for d in range(1, size + 1) if size % d == 0 and world_size % (d * pp) == 0]
                raise UserError(f"--tp {tp} does not divide {what} {size} (each rank holds an equal share); use a "
                                f"--tp dividing {size}" + (f": {', '.join(map(str, fits))}" if fits else ""))
    if pp > 1:
        layers = fields.get("num_layers")
        if layers is not None and layers % pp:
            raise UserError(f"--pp {pp} does not divide --num_layers {layers} (each stage holds the same number of "
                            "blocks); choose --pp dividing the layers, or another --num_layers")
        if micro is not None and micro < pp:
            raise UserError(f"--pp_microbatches {micro} is fewer than the --pp {pp} stages (a schedule needs at least "
                            f"one micro-batch per stage in flight); use at least {pp}, e.g. {2 * pp}")
    if pp > 1 and getattr(model_module, "pp_stage", None) is None:
        raise UserError(f"--pp {pp}: this architecture ({getattr(args, 'arch', 'its module')}) has no pipeline "
                        "stages (pp_stage in its module); drop --pp")
    if getattr(args, "shard_params", False) and world_size == tp * pp and world_size > 1:
        raise UserError(f"--shard_params shards over the data-parallel ranks, and --tp {tp} x --pp {pp} uses all "
                        f"{world_size}; drop --shard_params, or launch more ranks")
    return world_size // (tp * pp), tp, pp
