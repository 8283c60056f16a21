"""--pp N: pipeline parallelism with torch.distributed.pipelining, on a (dp, pp, tp) device mesh.

    pipe = Pipeline(model, module, ctx, cfg, eot, use_flex, autocast)   # this rank's stage: module.pp_stage(...)
    loss, pairs = pipe.run(batches, windows, use_flex, autocast, count_pairs)   # one step's forward/backward

The architecture module says how it splits (pp_stage(model, stage, n_stages): a module with a mask_args attribute,
or a function forward(mask_args, *inputs), whose outputs are the next stage's inputs); nothing here names a
submodule. Schedule: 1F1B (torch's Schedule1F1B: after a warm-up of one forward per later stage, each stage
alternates one forward and one backward, so at most `pp` micro-batches' activations are alive on a stage), over
--pp_microbatches micro-batches that split this replica's rows of the step.

What it splits: the forward and backward work and the activations, stage by stage. What it does not: the weights
and optimizer state. Every rank holds the whole model (as plain data parallelism does); a stage's backward fills
the gradients of the weights it used, the others stay empty, and the usual gradient sum over ALL ranks
(comm.GradientSync, after the schedule) adds the stages' parts and the replicas' batches together. So every rank
takes the same optimizer step, weights tied across stages (value embeddings, U-net skip weights) need nothing
special, checkpoints are the plain ones (any layout resumes them) and the curve is the 1-rank one to round-off.
Ranks r = (dp_rank x pp + stage) x tp + tp_rank (row-major over a (dp, pp, tp) mesh); the stages of one replica
read the same rows. With --tp each stage runs its blocks tensor-parallel over its TP ranks (gptlab/train/
tensor_parallel.py): what crosses a stage boundary is whole on every TP rank, or under sequence parallelism its
share of the positions, so each TP rank of a stage sends to the same TP rank of the next, and TPGradients' sum
over the ranks of one TP rank (its (dp, tp) mesh's "dp": every replica and every stage) is the all-ranks sum above.
With --shard_params (FSDP2 over the mesh's "dp" dimension: each stage's ranks hold the same row blocks) the design is
the same: during the schedule FSDP accumulates whole gradients (no reduce-scatter; the root's weights, which no
stage's forward all-gathers, are all-gathered here), after it one reduce-scatter over "dp" per unit and a sum of
the row blocks over "pp" add the replicas' and the stages' parts. With --tp as well the row blocks are of TP's
blocks (one (dp, pp, tp) mesh for both: gptlab/train/parallel.py), and TPGradients then sums the partial ones over "tp".
"""
import torch

from gptlab.core.errors import UserError


class _FunctionStage(torch.nn.Module):
    """A stage given as a function forward(mask_args, *inputs) (gpt2.py's, llama.py's pp_stage) as the module
    torch's PipelineStage runs; it owns no parameters (the model's are used, and summed as the docstring says)."""

    def __init__(self, forward):
        super().__init__()
        self.run, self.mask_args = forward, None

    def forward(self, *inputs):
        return self.run(self.mask_args, *inputs)


def _as_module(stage):
    """pp_stage's result as a module with a settable mask_args: model.py's is one already."""
    return stage if isinstance(stage, torch.nn.Module) else _FunctionStage(stage)


def _fsdp_state(model):
    """The root FSDP2 state of a --shard_params model (None otherwise)."""
    get = getattr(model, "_get_fsdp_state", None)
    return get() if get is not None else None


class Pipeline:
    def __init__(self, model, module, ctx, cfg, eot, use_flex, autocast):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        self.model, self.pp = model, cfg.pp
        tp = getattr(cfg, "tp", 1)
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size // (cfg.pp * tp), cfg.pp, tp),
                                mesh_dim_names=("dp", "pp", "tp"))
        self.stage_index = ctx.rank // tp % cfg.pp
        self.pp_group, self.fsdp = mesh["pp"].get_group(), _fsdp_state(model)
        if self.fsdp is not None:  # the root is the model, not the first block a stage runs
            self.fsdp._lazy_init()
            model.unshard()
        stages = [_as_module(module.pp_stage(model, s, cfg.pp)) for s in range(cfg.pp)]
        self.stage_module = stages[self.stage_index]
        # the tensors crossing this stage's boundaries, from the stages before it run here on a micro-batch of
        # <|endoftext|> rows: torch would otherwise infer them by running this stage on uninitialised token ids
        rows = cfg.grad_acc_steps * cfg.device_batch_size // cfg.train_seq_len
        if rows % cfg.pp_microbatches:  # (resolve_config checked a given split; this is --device_batch_size auto's)
            raise UserError(f"--pp_microbatches {cfg.pp_microbatches} does not divide the {rows} rows each replica "
                            "takes per step; pass --device_batch_size or --grad_acc_steps so that it does")
        rows //= cfg.pp_microbatches
        inputs = (torch.full((rows, cfg.train_seq_len), eot, dtype=torch.long, device=ctx.device),)
        with torch.no_grad(), autocast():
            for s in stages[:self.stage_index + 1]:
                s.mask_args = (eot, model.final_windows(), use_flex)
                examples, inputs = inputs, s(*inputs)
        if self.fsdp is not None:
            model.reshard()
        # (floats carry gradients across the boundary: the example tensors must say so)
        examples, outputs = ([t.requires_grad_(t.is_floating_point()) for t in ts]
                             for ts in (examples, inputs if isinstance(inputs, tuple) else (inputs,)))
        stage = PipelineStage(self.stage_module, self.stage_index, cfg.pp, ctx.device, input_args=tuple(examples),
                              output_args=tuple(outputs) if len(outputs) > 1 else outputs[0],
                              group=mesh["pp"].get_group())
        self.batch_size = cfg.batch_size
        # scale_grads=False: the loss is already divided by the global batch (a sum over micro-batches)
        self.schedule = Schedule1F1B(stage, n_microbatches=cfg.pp_microbatches, loss_fn=self._loss,
                                     scale_grads=False)

    @property
    def first(self):
        return self.stage_index == 0

    @property
    def last(self):
        return self.stage_index == self.pp - 1

    def _loss(self, hidden, targets):
        return self.model.cross_entropy_sum(hidden, targets) / self.batch_size

    def run(self, batches, windows, eot, use_flex, autocast, attention_pairs):
        """Forward and backward of this replica's rows (batches: the loader's micro-batches, (x, y) on the device,
        joined and re-split into the schedule's micro-batches). Returns (summed loss / global batch, allowed
        attention pairs (long, short)): counted on the last stage only, so a sum over ranks counts each once."""
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        self.stage_module.mask_args = (eot, windows, use_flex)
        losses = []
        if self.fsdp is not None:  # the root's own weights (head, scalars), whole until the gradients are summed
            self.model.unshard()
            self.model.set_reshard_after_backward(False, recurse=False)
        with autocast():
            if self.first:
                self.schedule.step(x)
            elif self.last:
                self.schedule.step(target=y, losses=losses)
            else:
                self.schedule.step()
        if self.fsdp is not None:
            self._sum_sharded_gradients()
        if not self.last:
            return x.new_zeros((), dtype=torch.float32), x.new_zeros(2)
        pairs = torch.stack([attention_pairs(x, eot, blocks) for blocks in windows])
        return torch.stack([loss.detach().float() for loss in losses]).sum(), pairs

    def _sum_sharded_gradients(self):
        """--shard_params: FSDP's reduce-scatter over "dp" of the gradients accumulated whole during the schedule
        (its own end-of-backward step, run once here), then the sum of each row block over the stages."""
        import torch.distributed as dist

        model = self.model
        model.set_reshard_after_backward(True, recurse=False)
        model.set_requires_gradient_sync(True)
        model.set_is_last_backward(True)
        self.fsdp._root_post_backward_final_callback()
        model.set_requires_gradient_sync(False)  # (as train_step's ShardedGradients.armed = False left it)
        for p in model.parameters():
            if p.requires_grad:
                if p.grad is None:  # a block of another stage
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad, group=self.pp_group)
