"""gptlab/dataloader.py: BOS alignment, rank disjointness, world-size invariance, exact resume, bad data."""
import numpy as np
import pytest

from gptlab.dataloader import BOSAlignedLoader, ValidationSet, expand_shard_files
from gptlab.errors import UserError
from gptlab.shards import write_shard

EOT = 1000


def make_docs_shards(tmp_path, n_shards=2, n_docs=120, seed=0, max_len=90):
    """Shards of documents <EOT> + tokens; each document's tokens encode (document number, position) uniquely."""
    rng = np.random.default_rng(seed)
    paths, doc = [], 0
    for s in range(n_shards):
        tokens = []
        for _ in range(n_docs):
            length = int(rng.integers(5, max_len))
            tokens.append(EOT)
            tokens.extend(int(t) for t in rng.integers(0, EOT, length))
            doc += 1
        path = str(tmp_path / f"train_{s:06d}.bin")
        write_shard(path, np.array(tokens))
        paths.append(path)
    return paths


def all_rows(loader, steps):
    """Every (inputs, targets) row this loader yields over `steps` steps, in micro-batch order."""
    rows = []
    for _ in range(steps):
        for x, y in loader.next_batch():
            rows.extend(np.concatenate([x, y[:, -1:]], axis=1).tolist())
    return rows


def test_rows_start_at_bos_where_possible_and_targets_are_shifted(tmp_path):
    paths = make_docs_shards(tmp_path, max_len=60)
    loader = BOSAlignedLoader(paths, seq_len=64, batch_size=256, bos_id=EOT)
    starts_at_bos = 0
    for _ in range(20):
        (x, y), = loader.next_batch()
        assert x.shape == y.shape == (4, 64) and x.dtype == np.int64
        assert np.array_equal(x[:, 1:], y[:, :-1])
        starts_at_bos += int((x[:, 0] == EOT).sum())
    # documents are shorter than a row here, so every row can (and must) start at a document
    assert starts_at_bos == 80


def test_long_documents_continue_instead_of_being_skipped(tmp_path):
    path = str(tmp_path / "long.bin")
    write_shard(path, np.array([EOT] + list(range(1, 600))))  # one document, 600 tokens
    loader = BOSAlignedLoader([path], seq_len=128, batch_size=256, bos_id=EOT)
    (x, _), = loader.next_batch()
    assert x[0, 0] == EOT and x[1, 0] == 128  # the second row continues the same document


def test_ranks_are_disjoint_and_their_union_is_world_size_independent(tmp_path):
    paths = make_docs_shards(tmp_path)
    reference = all_rows(BOSAlignedLoader(paths, 64, 512, EOT, grad_acc_steps=1), steps=6)  # 8 rows / step
    for world, acc in [(2, 1), (2, 2), (4, 1), (4, 2), (1, 8)]:
        per_rank = [all_rows(BOSAlignedLoader(paths, 64, 512, EOT, rank=r, world_size=world, grad_acc_steps=acc), 6)
                    for r in range(world)]
        flat = [tuple(row) for rows in per_rank for row in rows]
        assert len(flat) == len(set(flat)) == len(reference)  # disjoint, nothing lost
        assert sorted(flat) == sorted(tuple(r) for r in reference)


def test_state_dict_resumes_exactly_across_epochs(tmp_path):
    paths = make_docs_shards(tmp_path, n_docs=30)
    straight = BOSAlignedLoader(paths, 64, 256, EOT, seed=3)
    expected = all_rows(straight, 40)  # several passes over the data: exercises the epoch wrap-around
    assert straight.state_dict()["epoch"] >= 2
    first = BOSAlignedLoader(paths, 64, 256, EOT, seed=3)
    all_rows(first, 17)
    state = first.state_dict()
    resumed = BOSAlignedLoader(paths, 64, 256, EOT, seed=3, rank=1, world_size=2)
    resumed.load_state_dict(state)
    other = BOSAlignedLoader(paths, 64, 256, EOT, seed=3, rank=0, world_size=2)
    other.load_state_dict(state)
    rest = [row for _ in range(23) for row in all_rows(other, 1) + all_rows(resumed, 1)]
    assert sorted(map(tuple, rest)) == sorted(map(tuple, expected[17 * 4:]))


def test_deterministic_given_seed(tmp_path):
    paths = make_docs_shards(tmp_path, n_docs=30)
    a = all_rows(BOSAlignedLoader(paths, 64, 256, EOT, seed=1), 40)
    b = all_rows(BOSAlignedLoader(paths, 64, 256, EOT, seed=1), 40)
    c = all_rows(BOSAlignedLoader(paths, 64, 256, EOT, seed=2), 40)
    assert a == b and a != c


def test_resume_with_other_batch_geometry_is_refused(tmp_path):
    paths = make_docs_shards(tmp_path)
    state = BOSAlignedLoader(paths, 64, 256, EOT).state_dict()
    with pytest.raises(UserError, match="rows_per_step"):
        BOSAlignedLoader(paths, 64, 512, EOT).load_state_dict(state)


def test_validation_rows_are_fixed_and_split_across_ranks(tmp_path):
    paths = make_docs_shards(tmp_path)
    one_rows = sorted(tuple(r) for x, y in ValidationSet(paths, 64, 10).batches(3) for r in np.c_[x, y[:, -1]].tolist())
    assert len(one_rows) == len(set(one_rows)) == 10
    for world in (2, 3):
        rows = []
        for r in range(world):
            vs = ValidationSet(paths, 64, 10, rank=r, world_size=world)
            rows += [tuple(row) for x, y in vs.batches(2) for row in np.c_[x, y[:, -1]].tolist()]
        assert sorted(rows) == one_rows


def test_bad_data_is_named(tmp_path):
    paths = make_docs_shards(tmp_path, n_shards=1, n_docs=5)
    with pytest.raises(UserError, match="fewer than one global batch"):
        BOSAlignedLoader(paths, 64, 4096, EOT)
    with pytest.raises(UserError, match="no training shard holds one row"):
        BOSAlignedLoader(paths, 1024, 1024, EOT)
    with pytest.raises(UserError, match="world_size 3"):
        BOSAlignedLoader(paths, 64, 128, EOT, world_size=3)
    with pytest.raises(UserError, match="validation needs 1000 rows"):
        ValidationSet(paths, 64, 1000)
    with pytest.raises(UserError, match="matches no shard"):
        expand_shard_files(str(tmp_path / "nope_*.bin"))
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\0" * 2000)
    with pytest.raises(UserError, match="bad.bin"):
        expand_shard_files([paths[0], str(bad)])
