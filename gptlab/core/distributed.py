"""torchrun's environment → (rank, world size, device, backend), once, for every script.

Works unchanged for `python script.py` (one process, no process group), `torchrun --nproc_per_node=G` and
multi-node `torchrun --nnodes=N --rdzv_backend=c10d ...`. CPU runs use gloo, CUDA runs NCCL. Every collective
has a timeout, so a rank that dies makes the others fail with an error instead of hanging forever (torchrun
also tears the whole group down when one worker exits non-zero).

torch is imported inside the functions that use it (heavy, ~1 s): download_fineweb.py and a CPU train_tokenizer.py
run use this module (ranks, worker counts, --device checks) without ever loading torch.
"""
import datetime
import os
from dataclasses import dataclass

from gptlab.core.errors import UserError

DEFAULT_TIMEOUT_S = int(os.environ.get("GPTLAB_DIST_TIMEOUT_S", "600"))


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    device: "torch.device"  # noqa: F821 (torch is imported lazily)
    backend: str | None  # None when running as a single plain process

    @property
    def is_main(self):
        return self.rank == 0

    @property
    def is_distributed(self):
        return self.backend is not None


def local_ranks():
    """(LOCAL_RANK, LOCAL_WORLD_SIZE) from torchrun's environment; (0, 1) for a plain process."""
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def check_device_flag(requested):
    """A --device value is auto, cpu, cuda or cuda:N (checked without importing torch)."""
    index = requested[len("cuda:"):] if requested.startswith("cuda:") else None
    if requested not in ("auto", "cpu", "cuda") and not (index and index.isascii() and index.isdigit()):
        raise UserError(f"--device {requested!r} is not one of auto, cpu, cuda, cuda:N (N a GPU's index)")


def resolve_device(requested="auto", local_rank=None, local_world_size=None):
    """'auto' → cuda:LOCAL_RANK when a GPU is visible, else cpu. An unavailable 'cuda' is a clear error.
    local_rank / local_world_size default to torchrun's environment."""
    import torch  # heavy: see the module docstring

    check_device_flag(requested)
    env_rank, env_world = local_ranks()
    local_rank = env_rank if local_rank is None else local_rank
    local_world_size = env_world if local_world_size is None else local_world_size
    if requested.startswith("cuda:") and local_world_size > 1:
        raise UserError(f"--device {requested} would put all {local_world_size} ranks of this node on one GPU; "
                        "pass --device cuda (each rank takes the GPU of its LOCAL_RANK) and choose the GPUs with "
                        "CUDA_VISIBLE_DEVICES")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"--device {requested} was asked for but no CUDA GPU is visible; use --device cpu or auto")
        count = torch.cuda.device_count()
        if requested != "cuda" and int(requested[len("cuda:"):]) >= count:
            raise UserError(f"--device {requested}: this machine shows {count} CUDA GPU(s), numbered 0 to {count - 1}; "
                            "use --device cuda or one of those")
        if requested == "cuda":
            requested = f"cuda:{local_rank % torch.cuda.device_count()}"
    return torch.device(requested)


def setup(device="auto", timeout_s=DEFAULT_TIMEOUT_S):
    """Read torchrun's environment, pick the device, and start the process group when world size > 1."""
    import torch  # heavy: see the module docstring
    import torch.distributed as dist  # heavy: see the module docstring

    rank = int(os.environ.get("RANK", "0"))
    local_rank, _ = local_ranks()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    backend = None
    if world_size > 1:
        backend = "nccl" if dev.type == "cuda" else "gloo"
        import_group_defaults_first()
        if not dist.is_initialized():
            kwargs = {"device_id": dev} if dev.type == "cuda" else {}
            dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return DistContext(rank, local_rank, world_size, dev, backend)


def import_group_defaults_first():
    """Import, before any process group exists, the torch modules that take `group.WORLD` as a default argument
    when imported: torch.distributed.nn.functional (torch <= 2.13), pulled in by torch._inductor whenever the
    first optimizer is built. Imported after init_process_group, ten of its functions keep the group forever, so
    destroy_process_group cannot free it: its gloo threads outlive training into interpreter shutdown, where a
    late teardown killed ranks with SIGABRT ("terminate called without an active exception")."""
    import torch.distributed.nn  # noqa: F401 (heavy, and imported for its side effect at this moment)


def rendezvous_store(timeout_s=DEFAULT_TIMEOUT_S):
    """torchrun's key-value store (RANK, WORLD_SIZE, MASTER_ADDR/PORT from the environment), without starting a
    process group: for small messages between ranks, such as rank 0's error, before the group exists. A group
    held open through long independent work would turn a rank that dies there into errors on the others; without
    one, torchrun ends them."""
    import torch.distributed as dist  # heavy: see the module docstring

    store, _, _ = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=timeout_s)))
    return store


def cleanup(ctx):
    import torch.distributed as dist  # heavy: see the module docstring

    if ctx.is_distributed and dist.is_initialized():
        dist.destroy_process_group()


def barrier(ctx):
    import torch.distributed as dist  # heavy: see the module docstring

    if ctx.is_distributed:
        dist.barrier()


def broadcast_object(ctx, obj, src=0):
    """Rank src's Python object on every rank (identity when not distributed)."""
    import torch.distributed as dist  # heavy: see the module docstring

    if not ctx.is_distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_objects(ctx, obj):
    """List of every rank's object, in rank order."""
    import torch.distributed as dist  # heavy: see the module docstring

    if not ctx.is_distributed:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def device_memory_bytes(device):
    """Total memory of a CUDA device, or the machine's physical memory for the CPU."""
    import torch  # heavy: see the module docstring

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def broadcast_parameters(ctx, model, src=0):
    """Every rank gets rank src's parameters (in place; nothing to do when not distributed)."""
    import torch.distributed as dist  # heavy: see the module docstring

    if ctx.is_distributed:
        for p in model.parameters():
            dist.broadcast(p.data, src=src)


def all_reduce_sum(ctx, tensor):
    """In-place sum over ranks; returns the tensor for chaining."""
    import torch.distributed as dist  # heavy: see the module docstring

    if ctx.is_distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def default_workers():
    """All cores of this rank: cpu count divided by the ranks sharing this machine."""
    _, local_world = local_ranks()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_world))


def is_sharded(tensor):
    """True for a DTensor (a parameter under --shard_params)."""
    from torch.distributed.tensor import DTensor  # (torch.distributed is there on every build this runs on)

    return isinstance(tensor, DTensor)


def reshard(model):
    """Every FSDP unit back to its shards (the root keeps its whole parameters after a forward outside training):
    the optimizers hold the shards, so named_parameters() must give those before a checkpoint or a copy. A model
    without FSDP units is left as it is."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
