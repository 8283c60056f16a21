"""How a run spreads its model over the ranks, and the one object that sums its gradients, for every layout:
data parallelism (comm.GradientSync), --shard_params (FSDP2: fsdp.ShardedGradients), --tp (DTensor:
tensor_parallel.TPGradients around either). Each has the same interface: `armed` (the last micro-batch's backward
sums), `finish()` (after it)."""
import dataclasses

from gptlab.train import fsdp, tensor_parallel
from gptlab.train.comm import GradientSync


@dataclasses.dataclass
class Layout:
    mesh: object = None     # --tp: the (dp, tp) device mesh (with --pp and --shard_params: (dp, pp, tp))
    partial: object = None  # --tp: the parameters whose gradients are partial sums over the TP ranks


def distribute(model, module, ctx, cfg):
    """Lay `model` out in place as the flags ask: --tp gives each rank its heads and MLP units of every block
    (gptlab/train/tensor_parallel.py), --shard_params then cuts every parameter into row blocks over the
    data-parallel ranks (FSDP2, gptlab/train/fsdp.py). Returns the Layout for gradient_sync."""
    from torch.distributed.device_mesh import init_device_mesh

    layout = Layout()
    # --pp with --shard_params: FSDP over the replicas of each stage (and TP rank), on a (dp, pp, tp) mesh whose
    # "tp" TP's plan also uses (FSDP2 joins a TP weight's mesh and its own only when both slice one root mesh)
    staged = (init_device_mesh(ctx.device.type, (ctx.world_size // (cfg.pp * cfg.tp), cfg.pp, cfg.tp),
                               mesh_dim_names=("dp", "pp", "tp")) if cfg.pp > 1 and cfg.shard_params else None)
    if cfg.tp > 1:
        layout.mesh, layout.partial = tensor_parallel.parallelize(model, module, ctx, cfg.tp, staged)
    if cfg.shard_params:
        mesh = staged if staged is not None else layout.mesh
        mesh = mesh["dp"] if mesh is not None else None
        fsdp.shard_model(model, ctx, mesh)
    return layout


def gradient_sync(model, optimizers, ctx, cfg, layout):
    """The gradient summing of this layout: FSDP's reduce-scatters, or GradientSync's hooks; under --tp the partial
    gradients' sums over the TP ranks around either."""
    sync = (fsdp.ShardedGradients(model, optimizers) if cfg.shard_params else
            GradientSync(model, optimizers, ctx.world_size) if layout.mesh is None else None)
    if layout.mesh is not None:
        sync = tensor_parallel.TPGradients(model, optimizers, layout.mesh, layout.partial, sync)
    return sync
