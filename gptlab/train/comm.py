"""Gradient communication across ranks, kept out of train_gpt.py's research surface.

- MatrixOwners: the matrices of a distributed Muon dealt out in same-shape chunks of world_size, each matrix to
  one owner rank (modded-nanogpt record #26): a reduce-scatter hands each rank the rank-summed gradients of the
  matrices it owns, the optimizer updates only those, and an all-gather hands every rank every updated matrix.
- FlatShards: an elementwise optimizer's (Adam's) parameters flattened and cut into one slice per rank: a
  reduce-scatter hands each rank its slice's summed gradient, it updates that slice, an all-gather shares them.
- ShardedAdam: torch's Adam over FlatShards (ZeRO stage 1): each rank keeps and updates one slice.
- WholeMatrices: Muon under --shard_params, where FSDP2 cuts every matrix into row blocks across ranks: all-to-alls
  bring each matrix whole to one owner rank and its update's row blocks back.
- GradientSync: sums every trainable parameter's gradient over ranks while backward still runs
  (post-accumulate-grad hooks), in one fixed order on every rank; it refuses a model with a trainable parameter
  that no optimizer holds, or that two hold, so a parameter a researcher adds can never silently stay
  unsynchronised (or frozen) across ranks.
"""
import math

import torch
import torch.distributed as dist

from gptlab.core.distributed import is_sharded

# torch 2.13 renamed reduce_scatter_tensor / all_gather_into_tensor (same arguments) and warns on the old names;
# torch 2.11, preinstalled on the GPU machines, has only the old ones (names, looked up at each call)
REDUCE_SCATTER = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"
ALL_GATHER = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"


def _local(tensor):
    """This rank's block of a DTensor parameter or gradient; a plain tensor as it is."""
    return tensor.to_local() if is_sharded(tensor) else tensor


def same_shape_params(param_groups):
    """{(shape, group index): its parameters in order}: the matrices a sharded Muon deals out together. The group
    index, not the dict: load_state_dict replaces those."""
    by_shape = {}
    for g, group in enumerate(param_groups):
        for p in group["params"]:
            by_shape.setdefault((tuple(p.shape), g), []).append(p)
    return by_shape


class MatrixOwners:
    """Who owns which matrix of an optimizer's param_groups, and the collectives that move them.

    chunks: [(param, group index)] of one shape and group, at most world_size long; entry j belongs to rank j.
    Each chunk's communication buffers are allocated once, on the first step."""

    def __init__(self, param_groups, rank=0, world_size=1):
        self.rank, self.world_size = rank, world_size
        self.chunks, self.chunks_by_shape = [], []
        for (_, g), params in same_shape_params(param_groups).items():
            members = [(p, g) for p in params]
            first = len(self.chunks)
            self.chunks += [members[i:i + world_size] for i in range(0, len(members), world_size)]
            self.chunks_by_shape.append(range(first, len(self.chunks)))
        self._buffers = [None] * len(self.chunks)  # per chunk: (world_size stacked matrices, this rank's matrix)
        self._reduced = [None] * len(self.chunks)  # per chunk: (summed gradient of the owned matrix or None, handle)

    def params(self):
        return [p for chunk in self.chunks for p, _ in chunk]

    def _chunk_buffers(self, c):
        """(stacked, mine): stacked (world_size x rows, cols) holds one matrix per rank, rows beyond the chunk's
        members stay zero (padding); mine is this rank's matrix. Flat along dim 0, as gloo and NCCL want them."""
        if self._buffers[c] is None:
            p = self.chunks[c][0][0]
            stacked = torch.zeros((self.world_size * p.size(0),) + tuple(p.shape[1:]), dtype=p.dtype, device=p.device)
            self._buffers[c] = (stacked, torch.empty_like(p))
        return self._buffers[c]

    def start_reduce(self, c):
        """Start summing chunk c's gradients over ranks (each rank receives its own matrix's); idempotent."""
        if self._reduced[c] is not None:
            return
        chunk = self.chunks[c]
        if self.world_size == 1:
            p = chunk[0][0]
            self._reduced[c] = (p.grad if p.grad is not None else torch.zeros_like(p), None)
            return
        stacked, mine = self._chunk_buffers(c)
        slots = stacked.view(self.world_size, *chunk[0][0].shape)
        for j, (p, _) in enumerate(chunk):
            slots[j].copy_(p.grad) if p.grad is not None else slots[j].zero_()
        handle = getattr(dist, REDUCE_SCATTER)(mine, stacked, op=dist.ReduceOp.SUM, async_op=True)
        self._reduced[c] = (mine if self.rank < len(chunk) else None, handle)

    def owned(self):
        """For each shape: (this rank's matrices, their rank-summed gradients, group index), for the optimizer to
        update in place. When the caller moves on to the next shape, this shape's all-gathers start (they overlap
        the next shape's work); after the last, every rank holds every updated matrix."""
        for c in range(len(self.chunks)):  # without GradientSync (or for chunks it did not start)
            self.start_reduce(c)
        gathers = []
        for chunk_ids in self.chunks_by_shape:
            params, grads, group = [], [], None
            for c in chunk_ids:
                grad, handle = self._reduced[c]
                if handle is not None:
                    handle.wait()
                if self.rank < len(self.chunks[c]):
                    p, group = self.chunks[c][self.rank]
                    params.append(p)
                    grads.append(grad)
            if params:
                yield params, grads, group
            if self.world_size > 1:
                gathers += [self._start_gather(c, [p for p, _ in self.chunks[c]]) for c in chunk_ids]
        self._finish_gathers(gathers)
        self._reduced = [None] * len(self.chunks)

    def step(self, look_ahead, orthogonalize, apply):
        """One Muon update of this rank's matrices, the interface every matrix mover shares (WholeMatrices too):
        look_ahead(p, grad) → the tensor to orthogonalise (its rank-summed gradient here), orthogonalize(stack of
        same-shape matrices, group index) → their updates, apply(p, update) in place; then every rank gets every
        updated matrix (the all-gathers of owned())."""
        for params, grads, g in self.owned():  # this rank's matrices of one shape
            stack = torch.stack([look_ahead(p, grad) for p, grad in zip(params, grads)])
            for p, update in zip(params, orthogonalize(stack, g)):
                apply(p, update)

    def _start_gather(self, c, tensors):
        """Start giving every rank rank j's tensors[j] (tensors: one per member of chunk c; an idle rank of a short
        chunk sends its padding slot); _finish_gathers copies them in place."""
        stacked, _ = self._chunk_buffers(c)
        slots = stacked.view(self.world_size, *tensors[0].shape)
        mine = tensors[self.rank] if self.rank < len(tensors) else slots[self.rank]
        return c, tensors, getattr(dist, ALL_GATHER)(stacked, mine.contiguous(), async_op=True)

    def _finish_gathers(self, gathers):
        for c, tensors, handle in gathers:
            handle.wait()
            slots = self._buffers[c][0].view(self.world_size, *tensors[0].shape)
            for j, tensor in enumerate(tensors):
                if j != self.rank:
                    tensor.copy_(slots[j])

    @torch.no_grad()
    def gather(self, tensor_of):
        """Collective: give every rank every owner's tensor_of(param) (e.g. a momentum buffer before a checkpoint)."""
        if self.world_size == 1:
            return
        self._finish_gathers([self._start_gather(c, [tensor_of(p) for p, _ in chunk])
                              for c, chunk in enumerate(self.chunks)])


class FlatShards:
    """The parameters of an elementwise optimizer (Adam) flattened and cut into world_size equal slices, one per
    rank (ZeRO stage 1; modded-nanogpt record #26's DistAdam shards each tensor instead): a reduce-scatter hands
    each rank the rank-summed gradient of its slice, the optimizer keeps state for and updates that slice only,
    and an all-gather hands every rank every updated parameter. An elementwise update of a slice is the update of
    those elements, so the result is the unsharded optimizer's, bit for bit.

    One flat per (param group, dtype), padded with zeros to a multiple of world_size (padding has zero gradient,
    so it stays zero). slices[k]: this rank's part as a leaf tensor for the inner optimizer (its .grad is the
    reduced gradient)."""

    def __init__(self, param_groups, rank=0, world_size=1):
        self.rank, self.world_size = rank, world_size
        members = {}
        for g, group in enumerate(param_groups):
            for p in group["params"]:
                members.setdefault((g, p.dtype), []).append(p)
        self.keys = list(members)  # (group index, dtype) per flat
        self.params = [members[k] for k in self.keys]
        self.sizes = [sum(p.numel() for p in ps) for ps in self.params]
        self.part = [-(-n // world_size) for n in self.sizes]  # elements per rank's slice
        self.slices = [torch.zeros(n, dtype=ps[0].dtype, device=ps[0].device) for n, ps in zip(self.part, self.params)]
        self._flat = [None] * len(self.keys)  # world_size x part: gradients in, parameters out
        self._handles = [None] * len(self.keys)

    def all_params(self):
        return [p for ps in self.params for p in ps]

    def _views(self, k, flat):
        """Views of the flat-k-shaped `flat` (world_size x part elements) shaped like flat k's parameters, in order."""
        views, offset = [], 0
        for p in self.params[k]:
            views.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        return views

    def _fill_my_part(self, k, tensors, out):
        """Copy this rank's slice of flat k, taken from whole per-parameter `tensors`, into `out` (part elements;
        its padding is left as it is)."""
        start = self.rank * self.part[k]
        offset = 0
        for p, t in zip(self.params[k], tensors):
            lo, hi = max(start, offset), min(start + self.part[k], offset + p.numel())
            if lo < hi:
                out[lo - start:hi - start].copy_(t.reshape(-1)[lo - offset:hi - offset])
            offset += p.numel()
        return out

    def _buffer(self, k):
        """Flat k's communication buffer, made once: the gradients in (reduce-scatter), then the parameters out
        (all-gather)."""
        if self._flat[k] is None:
            self._flat[k] = torch.zeros(self.world_size * self.part[k], dtype=self.slices[k].dtype,
                                        device=self.slices[k].device)
        return self._flat[k]

    def start_reduce(self, k):
        """Start the reduce-scatter of flat k's gradients (a missing gradient counts as zero); idempotent."""
        if self._handles[k] is not None:
            return
        if self.slices[k].grad is None:
            self.slices[k].grad = torch.empty_like(self.slices[k])
        mine = self.slices[k].grad
        flat = self._buffer(k)
        for p, piece in zip(self.params[k], self._views(k, flat)):
            piece.copy_(p.grad) if p.grad is not None else piece.zero_()
        if self.world_size == 1:
            mine.copy_(flat)
            self._handles[k] = "done"
            return
        self._handles[k] = getattr(dist, REDUCE_SCATTER)(mine, flat, op=dist.ReduceOp.SUM, async_op=True)

    def wait_reduced(self):
        """Every flat's reduced gradient in its slice's .grad; the slices hold the parameters' current values."""
        for k in range(len(self.keys)):
            self.start_reduce(k)
            if self._handles[k] != "done":
                self._handles[k].wait()
            self._handles[k] = None
            # the slice from the parameters (a resume may have loaded them); its padding stays zero: zero
            # gradient, so Adam never moves it
            self._fill_my_part(k, [p.detach() for p in self.params[k]], self.slices[k].detach())

    @torch.no_grad()
    def gather_params(self):
        """Every rank's updated slice into every rank's parameters (through the gradient buffer, free by now)."""
        for k in range(len(self.keys)):
            for p, piece in zip(self.params[k], self._views(k, self._gathered(k, self.slices[k], self._buffer(k)))):
                p.copy_(piece)

    def _gathered(self, k, mine, out=None):
        """The whole flat k (world_size x part) from every rank's `mine` (its slice of something flat k shapes),
        into `out` or a new tensor."""
        flat = torch.empty(self.world_size * self.part[k], dtype=mine.dtype, device=mine.device) if out is None else out
        if self.world_size == 1:
            flat.copy_(mine)
        else:
            getattr(dist, ALL_GATHER)(flat, mine.detach().contiguous())
        return flat

    def gather_tensors(self, k, mine):
        """Collective: the whole of a per-slice tensor of flat k (e.g. an Adam moment), as new tensors shaped like
        the flat's parameters."""
        return self._views(k, self._gathered(k, mine))

    def my_part(self, k, tensors):
        """This rank's slice of flat k built from full per-parameter tensors (e.g. a checkpoint's moments)."""
        out = torch.zeros(self.part[k], dtype=self.slices[k].dtype, device=self.slices[k].device)
        return self._fill_my_part(k, tensors, out)


def row_split(rows, world_size):
    """Rows of each rank's block of a tensor sharded along dim 0 as FSDP2 cuts it (torch.chunk: ceil(rows / world)
    rows each, the last blocks short or empty)."""
    per = -(-rows // world_size)
    return [max(0, min(per, rows - r * per)) for r in range(world_size)]


class WholeMatrices:
    """Muon under --shard_params: FSDP2 leaves each rank one row block of every matrix (Shard(0)), but Newton–Schulz
    needs the whole matrix. Same-shape matrices are dealt out as MatrixOwners deals them (chunks of world_size,
    entry j of a chunk belongs to rank j); per shape, one all-to-all brings every owner the row blocks of its
    matrices, the owner computes on them whole, and a second all-to-all hands each rank its row blocks of every
    result (torchtitan's and Dion's distributed Muon move matrices the same way). Each matrix is computed exactly as
    on one rank, so the update does not depend on the world size."""

    def __init__(self, param_groups, rank=0, world_size=1, group=None):
        self.rank, self.world_size, self.group = rank, world_size, group  # group: the sharding ranks (default: all)
        # per (shape, group): the params, which of them each rank owns (param i: rank i % world_size), each rank's
        # rows of a matrix, and the elements in one row
        self.groups = [(shape, g, params, [params[r::world_size] for r in range(world_size)],
                        row_split(shape[0], world_size), math.prod(shape[1:]))
                       for (shape, g), params in same_shape_params(param_groups).items()]

    def params(self):
        return [p for group in self.groups for p in group[2]]

    def map_owned(self, blocks, fn):
        """blocks: {param: this rank's row block of some per-matrix tensor (rows_r, cols)}, for every param.
        fn(stack of whole matrices (n, rows, cols), group index) → a stack of the same shape, called for the
        matrices this rank owns. Returns {param: this rank's row block of fn's result}. Collective."""
        if self.world_size == 1:
            out = {}
            for _, g, params, *_ in self.groups:
                out.update(zip(params, fn(torch.stack([blocks[p] for p in params]), g)))
            return out
        started = [self._start_gather(group, blocks) for group in self.groups]
        returns = []
        for group, (received, handle) in zip(self.groups, started):
            handle.wait()
            shape, g, params, owned, split, cols = group
            mine = owned[self.rank]
            if mine:  # received: from each rank s, its row blocks of my matrices, in order
                pieces = received.split([len(mine) * r * cols for r in split])
                whole = torch.cat([piece.view(len(mine), r, *shape[1:]) for piece, r in zip(pieces, split)], dim=1)
                result = fn(whole, g)
            else:
                result = received.new_empty((0, *shape))
            returns.append(self._start_return(group, result))
        out = {}
        for (shape, _, _, owned, split, cols), (received, handle) in zip(self.groups, returns):
            handle.wait()
            rows = split[self.rank]
            offset = 0
            for j in range(self.world_size):  # from owner j: my row block of each of its matrices
                for p in owned[j]:
                    out[p] = received[offset:offset + rows * cols].view(rows, *shape[1:])
                    offset += rows * cols
        return out

    def step(self, look_ahead, orthogonalize, apply):
        """MatrixOwners.step's interface: look_ahead on this rank's row block of every matrix (elementwise, so as on
        the whole), orthogonalize on whole matrices at their owners (map_owned), apply to this rank's blocks."""
        blocks = {}
        for p in self.params():
            grad = _local(p.grad) if p.grad is not None else torch.zeros_like(_local(p))
            blocks[p] = look_ahead(p, grad)
        updates = self.map_owned(blocks, orthogonalize)
        for p in self.params():
            apply(p, updates[p])

    def _start_gather(self, group, blocks):
        shape, _, params, owned, split, cols = group
        mine = len(owned[self.rank])
        # to each owner j: my row block of each of its matrices; from each rank s: its rows of each of mine
        send = torch.cat([blocks[p].reshape(-1) for j in range(self.world_size) for p in owned[j]])
        received = blocks[params[0]].new_empty(mine * shape[0] * cols)
        handle = dist.all_to_all_single(received, send, [mine * r * cols for r in split],
                                        [len(theirs) * split[self.rank] * cols for theirs in owned], group=self.group,
                                        async_op=True)
        return received, handle

    def _start_return(self, group, result):
        shape, _, params, owned, split, cols = group
        # to each rank s: its row block of every result, matrix by matrix; from each owner j: mine of each of its
        send = torch.cat([result[:, sum(split[:s]):sum(split[:s + 1])].reshape(-1) for s in range(self.world_size)])
        received = result.new_empty(len(params) * split[self.rank] * cols)
        handle = dist.all_to_all_single(received, send, [len(theirs) * split[self.rank] * cols for theirs in owned],
                                        [len(owned[self.rank]) * r * cols for r in split], group=self.group,
                                        async_op=True)
        return received, handle


def check_held_once(model, held):
    """Refuse a model with a trainable parameter that no optimizer holds, or that two hold (`held`: every
    optimizer's parameters, concatenated), so a parameter a researcher adds can never silently stay unsynchronised
    (or frozen) across ranks."""
    held = [id(p) for p in held]
    twice = sorted({n for n, p in model.named_parameters() if held.count(id(p)) > 1})
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if twice or missing:
        raise ValueError("every trainable parameter must be in exactly one optimizer group (so its gradient is "
                         "summed over ranks and it is updated): "
                         + (f"in no group: {', '.join(missing)}" if missing else "")
                         + ("; " if twice and missing else "") + (f"in two: {', '.join(twice)}" if twice else "")
                         + "; fix build_optimizers in train_gpt.py")


class GradientSync:
    """Sums gradients over ranks while backward still runs (post-accumulate-grad hooks, as in modded-nanogpt's
    2025 records). During the last micro-batch's backward each parameter reports when its gradient is final; the
    parameters of a sharded optimizer (one whose `movers` is a MatrixOwners, or whose `flat_shards` a FlatShards)
    are reduce-scattered chunk by chunk or flat by flat, every other optimizer's are all-reduced in buckets (each large
    tensor alone, the small ones flattened into one preallocated buffer per dtype), each as soon as it is
    complete. Collectives must start in the same order on every rank, so they start in one fixed order (the
    expected backward order: parameters registered last first), each only when everything before it is ready,
    as DistributedDataParallel does with its buckets. Under torch.compile the whole backward is one graph and the
    hooks fire when it ends: no overlap then, but the same result."""

    SMALL_NUMEL = 1 << 15  # all-reduced tensors below this share a flat bucket per dtype (scalars: lambdas, skips)

    def __init__(self, model, optimizers, world_size):
        self.world_size = world_size
        owned = [opt.movers for opt in optimizers if isinstance(getattr(opt, "movers", None), MatrixOwners)]
        flats = [opt.flat_shards for opt in optimizers if isinstance(getattr(opt, "flat_shards", None), FlatShards)]
        reduced = [p for opt in optimizers if not isinstance(getattr(opt, "movers", None), MatrixOwners)
                   and not isinstance(getattr(opt, "flat_shards", None), FlatShards)
                   for g in opt.param_groups for p in g["params"]]
        check_held_once(model, reduced + [p for owners in owned for p in owners.params()]
                        + [p for flat in flats for p in flat.all_params()])
        position = {p: i for i, p in enumerate(model.parameters())}
        small = {}  # dtype → its small tensors: one flat buffer each (a bf16 buffer would sum fp32 gradients in bf16)
        for p in reduced:
            if p.numel() < self.SMALL_NUMEL:
                small.setdefault(p.dtype, []).append(p)
        self.buckets = [[p] for p in reduced if p.numel() >= self.SMALL_NUMEL] + list(small.values())
        units = [(max(position[p] for p in bucket), "bucket", b, None) for b, bucket in enumerate(self.buckets)]
        units += [(min(position[p] for p, _ in chunk), "chunk", c, owners)
                  for owners in owned for c, chunk in enumerate(owners.chunks)]
        units += [(max(position[p] for p in params), "flat", k, flat)
                  for flat in flats for k, params in enumerate(flat.params)]
        self.units = [(kind, item, mover) for _, kind, item, mover in sorted(units, key=lambda u: -u[0])]
        self.unit_of = {}  # param → its unit
        for u, (kind, item, mover) in enumerate(self.units):
            for p in self._unit_params(kind, item, mover):
                self.unit_of[p] = u
        self.members = [len(self._unit_params(kind, item, mover)) for kind, item, mover in self.units]
        self.flat = {}  # bucket index → its preallocated flat buffer (buckets of several tensors)
        self.armed = False  # True during the backward of the last micro-batch of a step
        self._reset()
        if world_size > 1:
            for p in self.unit_of:
                p.register_post_accumulate_grad_hook(self._grad_ready)

    def _unit_params(self, kind, item, mover):
        if kind == "bucket":
            return self.buckets[item]
        return [p for p, _ in mover.chunks[item]] if kind == "chunk" else mover.params[item]

    def _reset(self):
        self.ready = [0] * len(self.units)
        self.next_unit = 0  # units before this one have started
        self.handles = []

    def _grad_ready(self, p):
        if not self.armed:
            return
        self.ready[self.unit_of[p]] += 1
        while self.next_unit < len(self.units) and self.ready[self.next_unit] == self.members[self.next_unit]:
            self._start(self.next_unit)

    def _start(self, u):
        kind, item, mover = self.units[u]
        if kind in ("chunk", "flat"):  # the optimizer that owns them waits in its step
            mover.start_reduce(item)
        else:
            bucket = self.buckets[item]
            for p in bucket:
                if p.grad is None:  # no gradient this step: counts as zero
                    p.grad = torch.zeros_like(p)
            if len(bucket) == 1:
                self.handles.append((None, dist.all_reduce(bucket[0].grad, async_op=True)))
            else:
                if item not in self.flat:
                    self.flat[item] = torch.empty(sum(p.numel() for p in bucket), dtype=bucket[0].dtype,
                                                  device=bucket[0].device)
                flat = self.flat[item]
                torch.cat([p.grad.view(-1) for p in bucket], out=flat)
                self.handles.append((item, dist.all_reduce(flat, async_op=True)))
        self.next_unit = u + 1

    def finish(self):
        """After the last backward: start what has not started (e.g. parameters without a gradient), wait for the
        all-reduces and unflatten their buckets (a sharded optimizer waits for its own in its step)."""
        self.armed = False
        if self.world_size > 1:
            while self.next_unit < len(self.units):
                self._start(self.next_unit)
            for item, handle in self.handles:
                handle.wait()
                if item is not None:
                    offset = 0
                    for p in self.buckets[item]:
                        p.grad.view(-1).copy_(self.flat[item][offset:offset + p.numel()])
                        offset += p.numel()
        self._reset()


class ShardedAdam(torch.optim.Adam):
    """torch's Adam with its state and update sharded across ranks (ZeRO stage 1; record #26 shards Adam too):
    gptlab.train.comm.FlatShards gives each rank one slice of each group's flattened parameters, reduce-scattered
    gradients in, all-gathered parameters out, and an inner torch Adam updates the slices. Adam is elementwise, so
    the update is the unsharded one, bit for bit. state_dict() is torch Adam's for the whole parameters (after the
    collective gather_state()), so a checkpoint resumes on any world size, with or without sharding."""

    def __init__(self, param_groups, rank=0, world_size=1, **adam_kwargs):
        super().__init__(param_groups, **adam_kwargs)
        self.flat_shards = FlatShards(self.param_groups, rank, world_size)
        self.inner = torch.optim.Adam([dict(self._settings(g), params=[piece]) for (g, _), piece in
                                       zip(self.flat_shards.keys, self.flat_shards.slices)], **adam_kwargs)
        self._gathered = None  # whole-parameter state from gather_state(), until the next step

    def _settings(self, g):
        return {k: v for k, v in self.param_groups[g].items() if k != "params"}

    @torch.no_grad()
    def step(self):
        self.flat_shards.wait_reduced()
        for (g, _), inner_group in zip(self.flat_shards.keys, self.inner.param_groups):
            inner_group.update(self._settings(g))  # the schedule sets the outer groups' lr
        self.inner.step()
        self.flat_shards.gather_params()
        self._gathered = None

    def gather_state(self):
        """Collective: every rank's slices of the moments, as torch Adam's per-parameter state (for state_dict)."""
        shards, whole = self.flat_shards, {}
        for k, piece in enumerate(shards.slices):
            state = self.inner.state.get(piece)
            if state:
                moments = zip(shards.gather_tensors(k, state["exp_avg"]), shards.gather_tensors(k, state["exp_avg_sq"]))
                for p, (exp_avg, exp_avg_sq) in zip(shards.params[k], moments):
                    whole[p] = {"step": state["step"].clone(), "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        self._gathered = whole

    def state_dict(self):
        if self._gathered is None:
            if self.flat_shards.world_size > 1 and any(self.inner.state.values()):
                raise RuntimeError("ShardedAdam.state_dict() needs gather_state() (a collective) after the last step")
            self.gather_state()
        self.state.clear()
        self.state.update(self._gathered)
        try:
            return super().state_dict()
        finally:
            self.state.clear()

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)  # whole-parameter state, cast as torch Adam casts it
        shards = self.flat_shards
        for k, piece in enumerate(shards.slices):
            states = [self.state.get(p) for p in shards.params[k]]
            self.inner.state.pop(piece, None)
            if any(states):
                if not all(states):
                    raise ValueError("the Adam state covers only some parameters of a group")
                self.inner.state[piece] = {"step": states[0]["step"].clone(),
                                           "exp_avg": shards.my_part(k, [st["exp_avg"] for st in states]),
                                           "exp_avg_sq": shards.my_part(k, [st["exp_avg_sq"] for st in states])}
        self.state.clear()  # (the inner groups take the loaded settings at each step)
        self._gathered = None
