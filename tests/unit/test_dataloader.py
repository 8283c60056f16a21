"""gptlab/dataset/loader.py: BOS alignment, rank disjointness, world-size invariance, exact resume, bad data."""
import numpy as np
import pytest

from gptlab.dataset.loader import BOSAlignedLoader, ValidationSet

from gptlab.dataset.selection import expand_shard_files
from gptlab.core.errors import UserError
from gptlab.dataset.shards import write_shard

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


# ---------------------------------------------------------------------------------- the BOS contract, by hand
BOS_CODED = 60000  # <|endoftext|> of the position-coded shards below (positions stay under it)


def row_starts(loader, steps):
    """Where each row of `steps` steps starts in the shard, read from position-coded tokens (token = position + 1,
    BOS excepted): a row's first non-BOS token t at index j means the row starts at t - 1 - j."""
    starts = []
    for _ in range(steps):
        for x, _ in loader.next_batch():
            for row in x:
                j = int(np.flatnonzero(row != BOS_CODED)[0])
                starts.append(int(row[j]) - 1 - j)
    return starts



def coded_shard(tmp_path, doc_lengths, name="coded.bin"):
    """One shard of documents <BOS> + tokens of the given lengths (BOS included), every non-BOS token being its
    position + 1; returns (path, BOS positions)."""
    tokens, bos = [], []
    for length in doc_lengths:
        bos.append(len(tokens))
        tokens.append(BOS_CODED)
        tokens.extend(range(len(tokens) + 1, len(tokens) + length))
    path = str(tmp_path / name)
    write_shard(path, np.array(tokens))
    return path, bos


def test_each_row_starts_at_the_first_bos_at_or_after_the_previous_row_end(tmp_path):
    # documents at 0 (4 tokens), 4 (12: longer than a row of 8), 16 (3), 19 (6), 25 (9), 34 (2), 36 (30)
    path, bos = coded_shard(tmp_path, [4, 12, 3, 6, 9, 2, 30])
    assert bos == [0, 4, 16, 19, 25, 34, 36]
    loader = BOSAlignedLoader([path], seq_len=8, batch_size=16, bos_id=BOS_CODED)
    # worked out by hand: row r ends (exclusive of its extra target token) at start + 8; the next row starts at
    # the first BOS at or after that end when one lies within 8 tokens, else right at the end (the long document
    # continues):
    #   0 → end 8: no BOS in [8, 16) → 8 → end 16: BOS 16 → 16 → end 24: BOS 25 → 25
    #   → end 33: BOS 34 → 34    #   → end 42: no BOS in [42, 50) → 42 → end 50: no BOS in [50, 58) → 50
    assert row_starts(loader, 3) == [0, 8, 16, 25, 34, 42]


def test_every_document_start_is_in_some_row(tmp_path):
    """Documents shorter than a row each begin a row or sit inside one: none is skipped over. Long documents
    are read on (a row starts right where the previous one ended)."""
    rng = np.random.default_rng(5)
    lengths = [int(n) for n in rng.integers(1, 40, 300)] + [200, 3, 150, 1, 1, 1, 64]
    path, bos = coded_shard(tmp_path, lengths)
    seq_len = 32
    n_tokens = sum(lengths)
    loader = BOSAlignedLoader([path], seq_len=seq_len, batch_size=4 * seq_len, bos_id=BOS_CODED)
    starts = row_starts(loader, int(0.7 * n_tokens / (4 * seq_len)))  # within the first pass over the shard
    assert loader.epoch == 0
    bos_set = set(bos)
    end = 0
    for start in starts:  # the contract, from the module docstring, checked row by row
        following = [b for b in bos if end <= b < end + seq_len]
        assert start == (following[0] if following else end), (start, end)
        end = start + seq_len
    covered = set()
    for start in starts:
        covered.update(p for p in range(start, start + seq_len) if p in bos_set)
    assert [b for b in bos if b < end - seq_len] == sorted(b for b in covered if b < end - seq_len)
    assert sum(start in bos_set for start in starts) > 0.8 * len(starts)  # most rows begin a document


def test_no_shard_folder_for_the_tokenizer_says_how_to_make_one(tmp_path):
    from gptlab.dataset.selection import default_shard_folder

    (tmp_path / "local_docs_other_v300").mkdir()  # another tokenizer's folder only
    with pytest.raises(UserError) as err:
        default_shard_folder("qs_v300", data_dir=str(tmp_path))
    assert f"no shard folder {tmp_path}/*_qs_v300/ exists; create one with download_fineweb.py --tokenizer " \
           "qs_v300" in str(err.value)
    assert "ambiguous" not in str(err.value)


def test_allow_new_data_on_shards_of_other_names_starts_at_their_beginning(tmp_path):
    # --allow_new_data with a third shard added: the old position (shard 1 of 2, mid-pass) has no meaning in the
    # new list, so the loader starts at its beginning: the rows a fresh loader on those shards gives first
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = make_docs_shards(tmp_path / "old", n_shards=2)
    loader = BOSAlignedLoader(old, 64, 256, EOT)
    all_rows(loader, steps=30)
    state = loader.state_dict()
    assert state["order_pos"] == 1  # mid-pass, in the second shard (120 documents of ~47 tokens fill ~22 steps)
    new = make_docs_shards(tmp_path / "new", n_shards=3, seed=1)
    with pytest.raises(UserError, match="--allow_new_data"):
        BOSAlignedLoader(new, 64, 256, EOT).load_state_dict(state)
    resumed = BOSAlignedLoader(new, 64, 256, EOT)
    note = resumed.load_state_dict(state, new_data=True)
    assert "starts at their beginning" in note
    assert all_rows(resumed, steps=3) == all_rows(BOSAlignedLoader(new, 64, 256, EOT), steps=3)
    # the same names keep the position (a folder rebuilt in place): no note
    same = BOSAlignedLoader(old, 64, 256, EOT)
    assert same.load_state_dict(state, new_data=True) is None and same.order_pos == 1
