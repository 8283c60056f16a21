"""--tp N: tensor parallelism with DTensor (torch.distributed.tensor.parallel), on a 2-D device mesh (dp x tp).

    mesh, partial = parallelize(model, module, ctx, tp)    # the module's tp_plan(model), applied in place
    grad_sync = TPGradients(model, optimizers, mesh, partial)   # GradientSync's interface: armed / finish
    dp_ctx = data_parallel(ctx, tp)                         # the rank and size the data is split by

The architecture module says how its weights split (tp_plan(model) → ({submodule path: style}, [names of
parameters with a partial gradient]), tp_sizes(config) → what --tp must divide); nothing here names a submodule.
Styles: "colwise" / "rowwise" are torch's ColwiseParallel / RowwiseParallel (Megatron's column- and row-split
linear layers; an embedding's "rowwise" splits its vocabulary rows, "colwise" its columns), ("heads", name, dim):
the parameter `name` split along `dim` (a merged q/k/v weight split by heads), the module's first input
replicated, its gradient summed over the TP ranks in backward (what ColwiseParallel does for a Linear's input).
Sequence parallelism (Korthikanti et al. 2022): "sequence_norm" (torch's SequenceParallel: a norm on this rank's
share of the positions, its weights whole, its output gathered whole), "rowwise_to_sequence" (RowwiseParallel whose
sum is reduce-scattered to this rank's positions; an embedding's too), "split_sequence" (a whole module's
output cut to this rank's positions: the embeddings), "gather_sequence" (the reverse: a module's output gathered
whole), "colwise_from_sequence" (ColwiseParallel whose input is gathered from this rank's positions), ("heads",
name, dim, 1, True) (a "heads" module whose input is gathered so). A module whose plan uses them says so
(SEQUENCE_PARALLEL = True): the rows' length must then divide by --tp (gptlab/train/config.py checks it). Every
other parameter stays whole on every rank.

Ranks r = dp_rank x tp + tp_rank (init_device_mesh's row-major order): the tp ranks of one data-parallel replica
see the same data and compute the same loss; the replicas split the batch as plain data parallelism does.

Exactness: every activation and gradient is the 1-rank one up to summation order (a row-split matmul sums the
ranks' partial products in an all-reduce), so the curve is the 1-rank curve to round-off. Muon orthogonalises
whole matrices (WholeMatricesTP: each rank gathers every matrix, runs Newton–Schulz on it, keeps its block) with
the shape factor of the global shape (a DTensor's .shape): Newton–Schulz on a block would orthogonalise the block,
not the matrix. Not done: a vocabulary-parallel loss (the head is whole), and dealing
Muon's matrices out over ranks (every rank orthogonalises every matrix, as one rank does).
"""
import dataclasses
import functools

import torch
import torch.distributed as dist
from torch import nn

from gptlab.train.comm import WholeMatrices, check_held_once, same_shape_params


def data_parallel(ctx, tp):
    """ctx as the data sees it: the data-parallel replica's index and count (the TP ranks of one replica share it)."""
    if tp == 1:
        return ctx
    return dataclasses.replace(ctx, rank=ctx.rank // tp, world_size=ctx.world_size // tp)


def build_mesh(ctx, tp):
    """The (dp, tp) device mesh over every rank."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(ctx.device.type, (ctx.world_size // tp, tp), mesh_dim_names=("dp", "tp"))


def _replicated_input(module, args, mesh, sequence=False):
    """Forward pre-hook of a "heads" module: its first input as the whole (replicated) tensor it is, whose
    gradient (each rank's from its own heads) is summed over the TP ranks in backward. sequence: the input is this
    rank's share of the positions, gathered whole here (its gradient's sum then reduce-scattered back)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    x = (DTensor.from_local(args[0], mesh, [Shard(1)], run_check=False).redistribute(placements=[Replicate()])
         if sequence else DTensor.from_local(args[0], mesh, [Replicate()], run_check=False))
    return (x.to_local(grad_placements=[Partial()]), *args[1:])


def _heads_style(names, dim, groups=1, sequence=False):
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ParallelStyle
    from torch.distributed.tensor.placement_types import _StridedShard

    # groups > 1: dim holds `groups` equal parts (a fused q/k/v), each split over the ranks (rank r: part r of each)
    placement = _StridedShard(dim, split_factor=groups) if groups > 1 else Shard(dim)

    class HeadParallel(ParallelStyle):
        """The parameters `names` (dotted paths below the module; None ones skipped) split along `dim` over the TP
        ranks; the module's first input replicated."""

        def _apply(self, module, mesh):
            for name in (names,) if isinstance(names, str) else names:
                owner_path, _, leaf = name.rpartition(".")
                owner = module.get_submodule(owner_path) if owner_path else module
                param = getattr(owner, leaf)
                if param is not None:
                    owner.register_parameter(leaf, nn.Parameter(distribute_tensor(param.data, mesh, [placement]),
                                                                requires_grad=param.requires_grad))
            module.register_forward_pre_hook(functools.partial(_replicated_input, mesh=mesh, sequence=sequence))
            return module

    return HeadParallel()


def _sequence_norm_style():
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import SequenceParallel

    class SequenceNorm(SequenceParallel):
        """torch's SequenceParallel (the norm on this rank's positions, its weights whole), its output gathered
        whole along the sequence for the column-split layers (or the head) that read it (Megatron's all-gather
        after the norm); in backward the gradient is cut to this rank's positions."""

        @staticmethod
        def _prepare_output_fn(use_local_output, mod, outputs, device_mesh):
            return outputs.redistribute(placements=[Replicate()]).to_local()

    return SequenceNorm()


def _style(kind, module):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleOutput, RowwiseParallel

    if isinstance(kind, tuple) and kind[0] == "heads":
        return _heads_style(*kind[1:])
    # sequence parallelism: between blocks each rank holds its share of the positions (dim 1) of the residual
    # stream; the norms run on it, a row-split layer reduce-scatters its sum into it, a whole embedding is cut to it
    if kind == "sequence_norm":
        return _sequence_norm_style()
    if kind == "rowwise_to_sequence":  # (an embedding's input: the whole token ids)
        return RowwiseParallel(input_layouts=Replicate() if isinstance(module, nn.Embedding) else Shard(-1),
                               output_layouts=Shard(1))
    if kind == "split_sequence":
        return PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))
    if kind == "gather_sequence":  # a module's output on this rank's positions gathered whole (before a head)
        return PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Replicate())
    if kind == "colwise_from_sequence":  # input gathered from this rank's positions (reduce-scatter in backward)
        return ColwiseParallel(input_layouts=Shard(1))
    if kind == "colwise":
        return ColwiseParallel()  # input replicated, output this rank's columns (a plain tensor)
    if kind == "rowwise":  # input this rank's columns (an embedding: the token ids), output summed: whole
        return RowwiseParallel(input_layouts=Replicate()) if isinstance(module, nn.Embedding) else RowwiseParallel()
    raise ValueError(f"unknown tensor-parallel style {kind!r} in the model's tp_plan")


def parallelize(model, module, ctx, tp, mesh=None):
    """Apply `module.tp_plan(model)` to `model` in place on a (dp, tp) mesh (or the given mesh's "tp" dimension).
    Returns (mesh, the names of the parameters whose gradient each TP rank holds only its part of)."""
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = mesh or build_mesh(ctx, tp)
    plan, partial = module.tp_plan(model)
    styles = {path: _style(kind, model.get_submodule(path)) for path, kind in plan.items()}
    parallelize_module(model, mesh["tp"], styles)
    return mesh, partial


def local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class TPGradients:
    """GradientSync's interface under --tp: after the last backward of a step, the partial gradients (parameters
    used on a rank's heads only, by name) summed over the TP ranks; the data-parallel sum is FSDP's (`sharded`: an
    fsdp.ShardedGradients, under --shard_params) or one flat all-reduce over the replicas. Refuses a trainable
    parameter that no optimizer holds or that two hold."""

    def __init__(self, model, optimizers, mesh, partial, sharded=None):
        check_held_once(model, [p for opt in optimizers for g in opt.param_groups for p in g["params"]])
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.mesh, self.partial, self.sharded = mesh, [model.get_parameter(name) for name in partial], sharded
        self._armed = False

    @property
    def armed(self):
        return self._armed

    @armed.setter
    def armed(self, value):
        self._armed = value
        if self.sharded is not None:
            self.sharded.armed = value

    def finish(self):
        if self.sharded is not None:  # FSDP reduce-scattered over the replicas; the blocks' TP sums are left
            self.sharded.finish()
            for p in self.partial:
                if p.grad is not None:
                    dist.all_reduce(local(p.grad), group=self.mesh["tp"].get_group())
            return
        for p in self.params:  # (a parameter no loss reached still takes part: every rank sends the same sizes)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif getattr(p.grad, "placements", None) != getattr(p, "placements", None):
                # a gradient in another layout than its weight's: the row-split embedding's comes back whole
                # (Replicate: kept to this rank's rows, so every rank of the sum below, a --pp stage that never used
                # it included, sends the same sizes), a sequence-parallel norm's as each TP rank's sum over its own
                # positions (Partial: summed over the TP ranks here)
                p.grad = p.grad.redistribute(placements=p.placements)
        tp_group = self.mesh["tp"].get_group()
        for p in self.partial:
            dist.all_reduce(local(p.grad), group=tp_group)
        if self.mesh["dp"].size() > 1:
            grads = [local(p.grad) for p in self.params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=self.mesh["dp"].get_group())
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()


def is_tensor_parallel(p):
    mesh = getattr(p, "device_mesh", None)
    return mesh is not None and "tp" in (mesh.mesh_dim_names or ())


def whole_matrices(param_groups, rank, world_size):
    """Muon's matrix mover for DTensor parameters: WholeMatricesTP where a parameter is tensor-parallel, else
    comm.WholeMatrices (--shard_params alone)."""
    if any(is_tensor_parallel(p) for g in param_groups for p in g["params"]):
        return WholeMatricesTP(param_groups)
    mesh = next(p.device_mesh for g in param_groups for p in g["params"] if hasattr(p, "device_mesh"))
    if mesh.size() != world_size:  # --pp with --shard_params: the sharding is over each stage's data-parallel ranks
        return WholeMatrices(param_groups, mesh.get_local_rank(), mesh.size(), mesh.get_group())
    return WholeMatrices(param_groups, rank, world_size)


class WholeMatricesTP(WholeMatrices):
    """WholeMatrices' interface for tensor-parallel matrices (any placements, on any mesh): every rank gathers each
    matrix whole (DTensor.full_tensor), applies fn to the stack of same-shape matrices, and keeps its own block of
    the result, so Newton–Schulz sees the whole matrix, as on one rank. Its step() is WholeMatrices'."""

    def __init__(self, param_groups):  # (no owners: every rank computes every matrix)
        self.groups = list(same_shape_params(param_groups).items())

    def params(self):
        return [p for _, params in self.groups for p in params]

    def map_owned(self, blocks, fn):
        """blocks: {param: this rank's block of a per-matrix tensor}; fn(stack of whole matrices, group index).
        Returns {param: this rank's block of fn's result}. Collective."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        out = {}
        for (_, g), params in self.groups:
            whole = torch.stack([DTensor.from_local(blocks[p], p.device_mesh, p.placements, run_check=False,
                                                    shape=p.shape, stride=p.stride()).full_tensor() for p in params])
            for p, result in zip(params, fn(whole, g)):
                out[p] = distribute_tensor(result, p.device_mesh, p.placements, src_data_rank=None).to_local()
        return out


def mixed(params):
    """True when params mix DTensors (tensor-parallel blocks) and plain tensors (weights kept whole), or DTensors
    on different meshes (--tp with --shard_params: the split weights on the (dp, tp) mesh, the whole ones on its
    dp part): torch's foreach and fused optimizer and norm kernels refuse such a list."""
    kinds = {getattr(p, "device_mesh", None) for p in params}
    return len(kinds) > 1


def clip_grad_norm_(params, max_norm):
    """torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True), also for a mix of DTensor and plain
    gradients: each gradient's norm (a DTensor's over all its blocks), their norm, and every gradient scaled by
    max_norm / (norm + 1e-6) where that is below 1, as torch computes it."""
    params = [p for p in params if p.grad is not None]
    if not mixed(params):
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    norms = [p.grad.norm() for p in params]
    total = torch.linalg.vector_norm(torch.stack([n.full_tensor() if hasattr(n, "full_tensor") else n
                                                  for n in norms]))
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        local(p.grad).mul_(coef)
    return total
