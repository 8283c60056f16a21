"""--tp / --pp / --pp_microbatches: a layout that does not divide the heads, the MLP, the vocabulary padding, the
layers or the ranks, or too few micro-batches, is one UserError before any process group (WORLD_SIZE says 4 ranks
here, but no rendezvous exists: reaching dist_utils.setup would fail differently); and the data-parallel view of
a rank under --tp (issue 45)."""
import types

import pytest

from helpers.tiny_runs import run_main_expecting
from gptlab.core.distributed import DistContext
from gptlab.core.errors import UserError
from gptlab.train.config import check_layout
from gptlab.train.tensor_parallel import data_parallel


@pytest.mark.parametrize("world, flags, parts", [
    ("3", dict(tp=2), ["--tp 2 x --pp 1 = 2", "does not divide the 3 rank(s)"]),
    ("4", dict(tp=4), ["--tp 4 does not divide --num_heads 2", "1, 2"]),  # tiny: 2 heads
    # 3 heads of 32: 3 divides the heads and the MLP (384), not the vocabulary's padding to 128 rows
    ("3", dict(tp=3, num_heads=3, model_dim=96), ["--tp 3 does not divide the vocabulary's padding 128"]),
    ("4", dict(tp=2, num_heads=2, model_dim=64, mlp_ratio=1.578125), ["--tp 2 does not divide the MLP width", "101"]),
    ("2", dict(pp=2, num_layers=3), ["--pp 2 does not divide --num_layers 3"]),
    ("2", dict(pp=2, pp_microbatches=1), ["--pp_microbatches 1 is fewer than the --pp 2 stages", "at least 2"]),
    ("1", dict(pp_microbatches=4), ["--pp_microbatches 4 is a setting of pipeline parallelism", "--pp is 1"]),
    # (dp, pp, tp) = (1, 2, 2): nothing left for --shard_params to shard over (8 ranks run it: the e2e test)
    ("4", dict(pp=2, tp=2, shard_params=True), ["--shard_params shards over the data-parallel ranks", "uses all 4"]),
    # tiny: 1024-token steps of 128-token rows, 8 rows for the one replica of 2 stages
    ("2", dict(pp=2, pp_microbatches=3), ["--pp_microbatches 3 does not divide the 8 rows"]),
    ("2", dict(tp=2, shard_params=True), ["--shard_params shards over the data-parallel ranks", "uses all 2"]),
    ("4", dict(tp=4, arch="gpt2", num_layers=None, window_size=None),  # gpt2.py's own tp_sizes
     ["--tp 4 does not divide --num_heads 2"]),
    # llama.py and gpt2.py split the rows' positions over the TP ranks (sequence parallelism)
    ("2", dict(tp=2, arch="llama", window_size=None, num_kv_heads=2, multiple_of=32, train_seq_len=127,
               val_seq_len=128), ["--train_seq_len 127 does not divide by --tp 2", "e.g. 128"]),
    ("2", dict(tp=2, arch="gpt2", num_layers=None, window_size=None, val_seq_len=65),
     ["--val_seq_len 65 does not divide by --tp 2"]),
])
def test_a_bad_layout_is_one_error_before_any_process_group(tiny, tmp_path, monkeypatch, world, flags, parts):
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    run_main_expecting(tiny, tmp_path, parts, **flags)


def test_the_tp_ranks_of_a_replica_share_its_data_rank():
    # init_device_mesh lays ranks out row-major over (dp, tp): rank 5 of 8 with --tp 2 is replica 2's second rank
    ctx = DistContext(rank=5, local_rank=5, world_size=8, device=None, backend="gloo")
    view = data_parallel(ctx, 2)
    assert (view.rank, view.world_size, view.backend) == (2, 4, "gloo")
    assert data_parallel(ctx, 1) is ctx


def test_pp_on_a_module_without_stages_is_refused():
    """An architecture module without pp_stage (an older checkpoint's gpt2.py or llama.py, a researcher's model.py)
    cannot be pipelined: one UserError naming the fix (every current module has one: the e2e tests run them)."""
    import gpt2

    bare = types.SimpleNamespace(GPTConfig=gpt2.GPTConfig)  # no pp_stage, no tp_plan
    args = types.SimpleNamespace(pp=2, arch="gpt2", num_layers=2)
    with pytest.raises(UserError, match=r"--pp 2: this architecture \(gpt2\) has no pipeline stages .*drop --pp"):
        check_layout(args, 2, bare)
    assert check_layout(args, 2, gpt2) == (1, 1, 2)  # gpt2.py itself has them
