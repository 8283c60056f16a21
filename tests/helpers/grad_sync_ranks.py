"""One training step of train_gpt.make_train_step on each rank (gloo), recording the gradients the optimizers use.

    torchrun --nproc_per_node=2 tests/helpers/grad_sync_ranks.py OUT MICRO_BATCHES [shard]

Every rank builds the same random model (random_model, also used by the test's single-process reference) and takes
its MICRO_BATCHES micro-batches of rows(): rank r, micro-batch m gets row r * MICRO_BATCHES + m. Each rank writes
OUT.rank{r} (torch.save): {"adam": {name: gradient at Adam's step}, "muon": {name: the rank-summed gradient Muon's
owner received}}; Muon's matrices are split between the ranks, each recorded by its owner. With `shard` the model
is sharded (--shard_params: FSDP2, gptlab.train.fsdp) and every rank records every whole gradient as Adam steps."""
import os
import sys
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

SEQ_LEN, VOCAB, EOT, TRAIN_STEPS, WINDOW = 128, 300, 299, 10, 256


def random_model():
    import torch

    import model as arch

    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=VOCAB, num_layers=2, num_heads=2, model_dim=64, num_val_emb=1,
                                    window_size=WINDOW))
    with torch.no_grad():  # a fresh model's head and output projections are zero: give every weight a gradient
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return model


def rows(n):
    """n rows of SEQ_LEN + 1 tokens with a few <|endoftext|> (several documents per row)."""
    import numpy as np

    data = np.random.default_rng(0).integers(0, VOCAB - 1, size=(n, SEQ_LEN + 1))
    data[:, ::40] = EOT
    return data


def main():
    import torch

    import train_gpt
    from gptlab.core import distributed as dist_utils
    from gptlab.train import fsdp
    from gptlab.train.comm import GradientSync

    out, micro_batches, shard = sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["shard"]
    ctx = dist_utils.setup("cpu")
    try:
        model = random_model()
        if shard:
            fsdp.shard_model(model, ctx)
        names = {p: n for n, p in model.named_parameters()}
        adam, muon = optimizers = train_gpt.build_optimizers(model, ctx.rank, ctx.world_size)
        grad_sync = (fsdp.ShardedGradients(model, optimizers) if shard else
                     GradientSync(model, optimizers, ctx.world_size))
        data = rows(ctx.world_size * micro_batches)
        mine = [data[ctx.rank * micro_batches + m] for m in range(micro_batches)]

        class Loader:
            def next_batch(self):
                return [(row[None, :-1], row[None, 1:]) for row in mine]

        recorded = {"adam": {}, "muon": {}}
        if shard:  # every gradient, whole (collective), as the optimizers are about to use them
            adam_step = adam.step
            muon_params = {p for group in muon.param_groups for p in group["params"]}

            def recording_sharded_step():
                for name, p in model.named_parameters():
                    recorded["muon" if p in muon_params else "adam"][name] = p.grad.full_tensor().clone()
                return adam_step()
            adam.step = recording_sharded_step
        elif hasattr(adam, "flat_shards"):  # Adam sharded over ranks: each rank's slice holds its part of the sum
            flats = adam.flat_shards
            wait_reduced = flats.wait_reduced

            def recording_wait_reduced():
                wait_reduced()
                for k, piece in enumerate(flats.slices):  # collective: every rank's part, as whole gradients
                    for p, grad in zip(flats.params[k], flats.gather_tensors(k, piece.grad)):
                        recorded["adam"][names[p]] = grad.clone()
            flats.wait_reduced = recording_wait_reduced
        else:
            adam_step = adam.step

            def recording_adam_step():
                for group in adam.param_groups:
                    for p in group["params"]:
                        recorded["adam"][names[p]] = p.grad.clone()
                return adam_step()
            adam.step = recording_adam_step
        if not shard:
            owned = muon.movers.owned

            def recording_owned():
                for params, grads, group in owned():
                    for p, g in zip(params, grads):
                        recorded["muon"][names[p]] = g.clone()
                    yield params, grads, group
            muon.movers.owned = recording_owned

        cfg = SimpleNamespace(batch_size=ctx.world_size * micro_batches * SEQ_LEN, train_steps=TRAIN_STEPS,
                              window_size=WINDOW, cooldown_frac=0.5, lr_scale=1.0)
        train_step = train_gpt.make_train_step(cfg, model, model, optimizers, grad_sync, Loader(), EOT, False,
                                               train_gpt.contextlib.nullcontext, ctx.device)
        train_step(0)
        torch.save(recorded, f"{out}.rank{ctx.rank}")
    finally:
        dist_utils.cleanup(ctx)


if __name__ == "__main__":
    main()
