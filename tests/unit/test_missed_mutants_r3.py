"""Tests written for the one-line mutants of bench/mutants.py (round 3 of issue 27) that the suite let through:
each expectation comes from a hand computation, a published value or an independent reference implementation."""
import json
from collections import Counter

import pytest
import regex

from conftest import FINEWEB_150
from gptlab.tokenizer.format import PATTERNS
from gptlab.tokenizer.pretokenize import pretokenize


def _fineweb_texts(n=None):
    with open(FINEWEB_150) as f:
        texts = [json.loads(line)["text"] for line in f]
    return texts[:n] if n else texts


# ---------------------------------------------------------------------------------------------- BPE engines
@pytest.mark.parametrize("workers", [2, 3])
def test_regex_pretokenize_on_workers_sums_every_workers_table(workers):
    # the regex path merges the workers' Counters itself (the native one adds packed tables in C): every chunk of
    # every worker must count. Reference: regex.findall over each document, counted here.
    texts = _fineweb_texts(60)
    expected = Counter(piece.encode() for text in texts for piece in regex.findall(PATTERNS["gpt2"], text))
    table, chars, docs = pretokenize(iter(texts), PATTERNS["gpt2"], workers=workers, chunk_chars=1,
                                     pretokenizer="regex")
    assert table == expected and docs == len(texts)


# ---------------------------------------------------------------------------------------------- tokenizer format
def test_ranks_sha256_tells_apart_two_vocabularies_that_give_the_same_bytes_other_ids():
    from gptlab.tokenizer.format import ranks_sha256

    base = {bytes([i]): i for i in range(256)}
    a = {**base, b"ab": 256, b"cd": 257}
    swapped = {**base, b"ab": 257, b"cd": 256}  # the same tokens, other ids: other token ids in every shard
    assert ranks_sha256(a) != ranks_sha256(swapped)
    assert ranks_sha256(a) == ranks_sha256(dict(reversed(list(a.items()))))  # insertion order is no content


def test_a_vocabulary_without_byte_255_is_refused_as_damaged(tmp_path):
    # byte-level BPE encodes any text only with all 256 single bytes; b"\xff" (never in valid UTF-8, but tiktoken
    # encodes bytes) is the last of them
    import pickle

    from gptlab.core.errors import UserError
    from gptlab.tokenizer.format import EOT, load_tokenizer

    path = tmp_path / "no_ff.pkl"
    path.write_bytes(pickle.dumps({"pat_str": PATTERNS["gpt4"], "mergeable_ranks": {bytes([i]): i for i in range(255)},
                                   "special_tokens": {EOT: 256}}))
    with pytest.raises(UserError, match=r"lacks 1 of the 256 single bytes \(first: b'\\xff'\)"):
        load_tokenizer(str(path))


# ---------------------------------------------------------------------------------------------- optimizers
def test_adam_and_muon_settings_are_modded_nanogpts():
    # modded-nanogpt's FlexAttention-era records (train_gpt.py): Adam betas (0.8, 0.95), eps 1e-10, lr 0.22 for the
    # head, 0.6 for the embeddings, 0.04 for the scalars; Muon lr 0.05, momentum 0.95, 5 Newton-Schulz steps
    import model as arch
    import train_gpt

    gpt = arch.GPT(arch.GPTConfig(vocab_size=128, num_layers=2, num_heads=1, model_dim=64, window_size=128))
    adam, muon = train_gpt.build_optimizers(gpt)
    assert {g["name"]: g["lr"] for g in adam.param_groups} == {"head": 0.22, "embeddings": 0.6, "scalars": 0.04}
    for group in adam.param_groups:
        assert group["betas"] == (0.8, 0.95) and group["eps"] == 1e-10 and group["weight_decay"] == 0
    assert [(g["lr"], g["momentum"], g["ns_steps"]) for g in muon.param_groups] == [(0.05, 0.95, 5)]


# ---------------------------------------------------------------------------------------------- shards
def test_rank_digits_grow_only_past_1000_ranks():
    # ranks 0..999 fit 3 digits; a 1001st rank (number 1000) needs a 4th, and then every rank gets 4 so that names
    # sort by rank (shards.py's docstring)
    from gptlab.data.shards import rank_digits, shard_filename

    assert [rank_digits(w) for w in (1, 2, 999, 1000, 1001, 10000, 10001)] == [3, 3, 3, 3, 4, 4, 5]
    assert shard_filename("train", 7, 999, 1000) == "train_r999_000007.bin"
    assert shard_filename("train", 7, 5, 1001) == "train_r0005_000007.bin"


def test_a_writer_resumed_mid_document_records_positions_inside_that_document(tmp_path):
    # resume at document 5, token 2: the chunk starts with all of document 5 ([eot] f g h i j) and the writer drops
    # its first 2 tokens. Shards of 3 tokens: g h i | j [eot] k | l. By hand, the next token after each shard is
    # j = document 5's token 5, l = document 6's token 2, then document 7's start.
    import numpy as np

    from gptlab.data import shards as shard_format
    from gptlab.data.fineweb import ShardWriter

    eot = 256
    docs = ["fghij", "kl"]
    tokens = np.array([t for d in docs for t in [eot] + list(d.encode())], dtype=np.uint32)
    manifest = {"shard_version": 1, "shards": [], "rank": 0, "world_size": 1}
    plan = [("train", f"train_00000{k}.bin") for k in (2, 3, 4)]
    writer = ShardWriter(str(tmp_path), manifest, plan, (5, 2), eot, np.uint16, shard_size=3, val_tokens=0,
                         progress=None)
    writer.consume(tokens, np.array([len(d) + 1 for d in docs]))
    writer.flush()
    assert [(s["start"], s["end"]) for s in manifest["shards"]] == [([5, 2], [5, 5]), ([5, 5], [6, 2]),
                                                                     ([6, 2], [7, 0])]
    assert shard_format.read_shard(str(tmp_path / "train_000002.bin")).tolist() == list(b"ghi")


# ---------------------------------------------------------------------------------------------- loader
def test_each_ranks_validation_rows_are_the_tokens_at_its_listed_locations(tmp_path):
    # my_rows() names (shard, start) of this rank's rows: every world_size-th row from the rank's own index. The
    # rows batches() yields must be the shard's tokens there (read back here with numpy), in that order.
    import numpy as np

    from gptlab.data.loader import ValidationSet
    from gptlab.data.shards import write_shard

    paths = []
    for k in range(2):
        path = str(tmp_path / f"val_{k:06d}.bin")
        write_shard(path, np.arange(1000 * k, 1000 * k + 90) % 65536)
        paths.append(path)
    seq_len, n_rows = 8, 19  # shard 0 holds 11 rows ((90 - 1) // 8), shard 1 the other 8
    everything = ValidationSet(paths, seq_len, n_rows).my_rows()
    for world in (2, 3):
        for rank in range(world):
            vs = ValidationSet(paths, seq_len, n_rows, rank=rank, world_size=world)
            assert vs.my_rows() == everything[rank::world]
            rows = [np.r_[x_row, y_row[-1]] for x, y in vs.batches(4) for x_row, y_row in zip(x, y)]
            expected = [np.fromfile(p, dtype="<u2", offset=1024)[s:s + seq_len + 1] for p, s in vs.my_rows()]
            assert len(rows) == len(expected) and all((a == b).all() for a, b in zip(rows, expected))
