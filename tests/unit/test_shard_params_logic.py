"""The CPU-checkable logic of --shard_params without a process group: how FSDP2 cuts rows, the validation
lockstep, and the gradient switch (tests/e2e/test_shard_params.py runs it on gloo ranks)."""
import numpy as np
import pytest
import torch

from gptlab.evals.bpb import evaluate_val
from gptlab.train.comm import row_split
from gptlab.train.fsdp import ShardedGradients


@pytest.mark.parametrize("rows, world, expected", [
    (10, 3, [4, 4, 2]),     # ceil(10 / 3) = 4 rows each, the last gets the 2 left
    (3, 2, [2, 1]),
    (5, 4, [2, 2, 1, 0]),   # torch.chunk gives only 3 chunks: the fourth rank holds no row
    (1, 2, [1, 0]),
    (8, 2, [4, 4]),
])
def test_row_split_is_torch_chunks_rows(rows, world, expected):
    assert row_split(rows, world) == expected
    chunks = torch.arange(rows).chunk(world)  # the reference: how FSDP2's Shard(0) cuts a parameter
    assert [len(c) for c in chunks] + [0] * (world - len(chunks)) == expected


class FakeValidation:
    """n_rows rows; this rank's share as ValidationSet gives it (rows rank, rank + world, ...)."""

    def __init__(self, n_rows, rank, world, seq_len=4):
        self.n_rows = n_rows
        self.rows = [np.full(seq_len + 1, i, dtype=np.int64) for i in range(n_rows)][rank::world]

    def batches(self, rows_per_batch):
        for i in range(0, len(self.rows), rows_per_batch):
            rows = np.stack(self.rows[i:i + rows_per_batch])
            yield rows[:, :-1], rows[:, 1:]


class Ctx:
    def __init__(self, rank, world):
        self.rank, self.world_size, self.device, self.is_distributed = rank, world, torch.device("cpu"), False


@pytest.mark.parametrize("n_rows, world, per_batch, calls", [
    # 5 rows on 2 ranks, 1 per batch: rank 0 has rows 0, 2, 4 (3 calls), rank 1 rows 1, 3 (2 calls + 1 repeat)
    (5, 2, 1, [3, 3]),
    # 7 rows on 3 ranks, 2 per batch: 3, 2, 2 rows → 2, 1, 1 batches; lockstep: 2 calls each
    (7, 3, 2, [2, 2, 2]),
    (6, 3, 1, [2, 2, 2]),   # even shares: no repeat
])
def test_lockstep_validation_calls_the_model_equally_often_and_counts_each_row_once(n_rows, world, per_batch, calls):
    byte_lengths = torch.ones(64, dtype=torch.int64)
    for rank in range(world):
        seen = []

        def loss_fn(x, y):
            seen.append(int(x[0, 0]))
            return torch.tensor(float(x.numel()))  # 1 nat per token: the mean loss is exactly 1

        loss, _ = evaluate_val(loss_fn, FakeValidation(n_rows, rank, world), per_batch, byte_lengths,
                               Ctx(rank, world), lockstep=True)
        assert len(seen) == calls[rank], (rank, seen)
        assert loss == 1.0  # the repeated batch is not counted: every row once
        seen.clear()
        evaluate_val(loss_fn, FakeValidation(n_rows, rank, world), per_batch, byte_lengths, Ctx(rank, world))
        assert len(seen) == -(-len(range(rank, n_rows, world)) // per_batch)  # without lockstep: its own share


def test_sharded_gradients_switch_fsdp_sync_only_when_the_micro_batch_changes_it():
    calls = []

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

        def set_requires_gradient_sync(self, value):
            calls.append(value)

    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sync = ShardedGradients(model, [opt])
    for armed in (False, False, True, False, True, True):
        sync.armed = armed
    assert calls == [False, True, False, True]
    with pytest.raises(ValueError, match="in no group: w"):
        ShardedGradients(model, [torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)])


def test_the_gpt_1b_preset_is_about_a_billion_parameters_and_sharded():
    import model as arch
    import train_gpt
    from gptlab.train.config import parameter_count
    from gptlab.train.flags import parse_flags

    args, _ = parse_flags(train_gpt.build_parser, ["--preset", "gpt-1b"], presets=train_gpt.PRESETS)
    assert args.shard_params is True
    d, layers = args.model_dim, args.num_layers
    # by hand: 12 d^2 per block (q, k, v, out: 4 d^2; MLP 4d and back: 8 d^2), and three 50304 x d tables (token
    # embedding, 2 value embeddings) plus the head
    hand = layers * 12 * d * d + 4 * 50304 * d
    assert hand == 988_545_024
    got = parameter_count(arch, dict(vocab_size=50304, num_layers=layers, num_heads=args.num_heads, model_dim=d))
    assert got == pytest.approx(hand, rel=1e-5)  # (the rest: per-layer scalars and skip weights)
