"""--shard_params: the model's parameters, gradients and optimizer state sharded across ranks with FSDP2
(torch.distributed.fsdp.fully_shard), for models whose training state does not fit one GPU.

    mesh = shard_model(model, ctx)          # every block and embedding its own unit, the root the rest
    grad_sync = ShardedGradients(model, optimizers)   # GradientSync's interface: armed / finish
    with evaluation_copy(model, build) as plain: ...  # a whole, unsharded model for per-rank evaluations

Each parameter becomes a DTensor holding this rank's row block (Shard(0)); a unit's whole parameters exist only
during its forward and backward (all-gathered, then freed), and gradients are reduce-scattered to the blocks.
Gradients are summed, not averaged (the loss is already divided by the global batch), so a step is the same
for any world size, as on the unsharded path.
"""
import contextlib

import torch
from torch import nn

from gptlab.core.distributed import is_sharded, reshard  # (also the checkpoint stage's)
from gptlab.train.comm import check_held_once


def is_sharded_model(model):
    """True when `model`'s parameters are DTensors (shard_model ran on it)."""
    return any(is_sharded(p) for p in model.parameters())


def local(tensor):
    """This rank's block of a DTensor; a plain tensor as it is."""
    return tensor.to_local() if is_sharded(tensor) else tensor


def shard_model(model, ctx, mesh=None):
    """Apply FSDP2 to `model` in place: each element of an nn.ModuleList (the transformer blocks) and each
    nn.Embedding (but a tied one) becomes a unit (all-gathered just before it runs, freed after), the root module holds the rest.
    mesh: the ranks to shard over (default: all; under --tp the data-parallel dimension). Returns the mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = mesh or init_device_mesh(ctx.device.type, (ctx.world_size,))
    uses = {}  # a tied weight (GPT-2's embedding is its head) stays with the root, which holds both its users
    for _, p in model.named_parameters(remove_duplicate=False):
        uses[p] = uses.get(p, 0) + 1
    units = [m for m in model.modules() if isinstance(m, nn.Embedding) and uses.get(m.weight, 0) == 1]
    units += [m for lst in model.modules() if isinstance(lst, nn.ModuleList) for m in lst
              if not isinstance(m, nn.Embedding) and any(True for _ in m.parameters())]
    for unit in units:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for unit in [*units, model]:
        # a plain sum over ranks: divide by 1, with SUM reductions only (a factor other than the world size is
        # otherwise a PREMUL_SUM, which gloo lacks)
        divide = getattr(unit, "set_gradient_divide_factor", None) or unit.set_reduce_scatter_divide_factor
        divide(1.0)
        if hasattr(unit, "set_force_sum_reduction_for_comms"):
            unit.set_force_sum_reduction_for_comms(True)
    return mesh


class ShardedGradients:
    """GradientSync's interface for an FSDP2 model: FSDP reduce-scatters each unit's gradients during backward;
    `armed` (the last micro-batch of a step) turns that on, earlier micro-batches accumulate whole gradients
    locally. Refuses a trainable parameter that no optimizer holds or that two hold, as GradientSync does."""

    def __init__(self, model, optimizers):
        check_held_once(model, [p for opt in optimizers for g in opt.param_groups for p in g["params"]])
        self.model = model
        self._armed = None

    @property
    def armed(self):
        return self._armed

    @armed.setter
    def armed(self, value):
        if value != self._armed:
            self.model.set_requires_gradient_sync(bool(value))
            self._armed = value

    def finish(self):
        """Nothing to wait for: FSDP finishes its reduce-scatters before backward returns."""


@contextlib.contextmanager
def evaluation_copy(model, build):
    """Collective: a plain model (build() makes an unsharded one, as training made it) holding `model`'s whole
    weights, for evaluations where ranks run different amounts of work (HellaSwag's shares, samples on rank 0):
    FSDP's all-gathers would need every rank in every forward. Its memory is the whole parameters, once."""
    reshard(model)
    state = {name: (value.full_tensor() if is_sharded(value) else value) for name, value in model.state_dict().items()}
    with torch.random.fork_rng(devices=[]):  # its random initialisation must not move the run's generators
        plain = build()
    plain.load_state_dict(state)
    del state
    plain.eval()
    try:
        yield plain
    finally:
        del plain
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
