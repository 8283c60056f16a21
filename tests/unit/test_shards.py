"""The shard format and the manifest reader: llm.c / modded-nanogpt compatibility and broken-file detection."""
import json
import os

import numpy as np
import pytest

from helpers.faults import full_disk_atomic_write

from gptlab.dataset import shards
from gptlab.core.errors import UserError


def modded_nanogpt_load(path):
    """Read a shard exactly the way modded-nanogpt's `_load_data_shard` does (numpy instead of torch)."""
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520, "magic number mismatch in the data .bin file"
    assert header[1] == 1, "unsupported version"
    num_tokens = int(header[2])
    with open(path, "rb") as f:
        f.seek(256 * 4)
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    assert tokens.size == num_tokens, "number of tokens read does not match header"
    return tokens


def test_version1_shard_reads_like_modded_nanogpt(tmp_path):
    tokens = np.array([0, 1, 65535, 513, 7], dtype=np.int64)
    path = shards.write_shard(str(tmp_path / "train_000001.bin"), tokens, version=1)
    assert os.path.getsize(path) == 1024 + 2 * tokens.size
    np.testing.assert_array_equal(modded_nanogpt_load(path), tokens)
    np.testing.assert_array_equal(shards.read_shard(path), tokens)
    np.testing.assert_array_equal(shards.read_shard(path, mmap=False), tokens)
    assert shards.read_header(path) == (1, tokens.size)


def test_version2_holds_large_ids_and_version1_refuses_them(tmp_path):
    assert shards.version_for_vocab(65536) == 1 and shards.version_for_vocab(65537) == 2
    tokens = np.array([70000, 3, 2**32 - 1], dtype=np.int64)
    with pytest.raises(UserError, match="do not fit shard version 1"):
        shards.write_shard(str(tmp_path / "a.bin"), tokens, version=1)
    assert not os.listdir(tmp_path)
    path = shards.write_shard(str(tmp_path / "b.bin"), tokens, version=2)
    np.testing.assert_array_equal(shards.read_shard(path), tokens)


def test_write_refuses_to_replace_without_overwrite(tmp_path):
    path = shards.write_shard(str(tmp_path / "x.bin"), [1, 2, 3])
    with pytest.raises(UserError, match="already exists"):
        shards.write_shard(path, [4])
    np.testing.assert_array_equal(shards.read_shard(path), [1, 2, 3])
    shards.write_shard(path, [4], overwrite=True)
    np.testing.assert_array_equal(shards.read_shard(path), [4])


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "atomic_write", full_disk_atomic_write(shards.atomic_write, "x.bin"))
    with pytest.raises(OSError, match="No space left"):
        shards.write_shard(str(tmp_path / "x.bin"), np.arange(100))
    assert os.listdir(tmp_path) == []


def _corrupt(path, how):
    raw = bytearray(open(path, "rb").read())
    header = np.frombuffer(raw[:1024], dtype="<i4").copy()
    if how == "truncated":
        raw = raw[:-3]
    elif how == "short_header":
        raw = raw[:100]
    elif how == "magic":
        header[0] = 1234
    elif how == "version":
        header[1] = 7
    elif how == "count":
        header[2] += 5
    elif how == "negative":
        header[2] = -1
    elif how == "appended":  # longer than the header says: one token too many
        raw += b"\x07\x00"
    elif how == "count_smaller":
        header[2] -= 1
    if how in ("magic", "version", "count", "negative", "count_smaller"):
        raw[:1024] = header.tobytes()
    with open(path, "wb") as f:
        f.write(raw)


@pytest.mark.parametrize("how, message", [
    ("truncated", "truncated"), ("short_header", "shorter than"), ("magic", "magic"),
    ("version", "unsupported version 7"), ("count", "header says"), ("negative", "header says"),
    # the size is checked both ways: a file longer than its header says is as broken as a shorter one
    ("appended", "header says 1000 tokens (3024 bytes) but the file has 3026 bytes"),
    ("count_smaller", "header says 999 tokens (3022 bytes) but the file has 3024 bytes"),
])
def test_reader_names_broken_shards(tmp_path, how, message):
    path = shards.write_shard(str(tmp_path / "train_000001.bin"), np.arange(1000) % 500)
    _corrupt(path, how)
    with pytest.raises(UserError) as err:
        shards.read_shard(path)
    assert message in str(err.value) and "train_000001.bin" in str(err.value)


def test_reader_names_missing_shard(tmp_path):
    with pytest.raises(UserError, match="cannot read shard"):
        shards.read_header(str(tmp_path / "nope.bin"))


def _manifest(rank, world_size, shard_list, **overrides):
    m = {"format": shards.MANIFEST_FORMAT, "format_version": 1, "dataset": "local_x", "source": {"kind": "local"},
         "seed": 0, "shuffle_buffer": 0, "tokenizer": {"name": "t", "ranks_sha256": "ab" * 32},
         "shard_version": 1, "dtype": "uint16", "shard_size": 10, "val_tokens": 5, "rank": rank,
         "world_size": world_size, "shards": shard_list, "complete": True}
    m.update(overrides)
    return m


def test_manifest_parts_merge_and_check(tmp_path):
    d = str(tmp_path)
    shards.write_shard(os.path.join(d, "val_000000.bin"), [1, 2, 3, 4, 5])
    shards.write_shard(os.path.join(d, "train_000001.bin"), range(10))
    shards.write_shard(os.path.join(d, "train_000002.bin"), range(10))
    entry = lambda name, n: {"name": name, "split": name[:-11], "tokens": n, "docs": 1, "bytes": 1024 + 2 * n}
    shards.write_manifest(d, _manifest(0, 2, [entry("val_000000.bin", 5), entry("train_000001.bin", 10)]))
    with pytest.raises(UserError, match="tokenizer"):  # rank 1 part missing: loads, but incomplete
        shards.check_manifest(d, "cd" * 32)
    assert not shards.load_manifest(d)["complete"]
    shards.write_manifest(d, _manifest(1, 2, [entry("train_000002.bin", 10)]))
    merged = shards.check_manifest(d, "ab" * 32)
    assert merged["complete"] and merged["parts"] == ["manifest.rank0.json", "manifest.rank1.json"]
    # stream order, rank by rank (this folder has an older version's interleaved names)
    assert [s["name"] for s in merged["shards"]] == ["val_000000.bin", "train_000001.bin", "train_000002.bin"]
    # a shard that no longer matches its manifest entry is found
    shards.write_shard(os.path.join(d, "train_000002.bin"), range(9), overwrite=True)
    with pytest.raises(UserError, match="does not match its manifest"):
        shards.check_manifest(d, "ab" * 32)
    # parts of two different runs are refused
    shards.write_manifest(d, _manifest(1, 2, [], seed=5))
    with pytest.raises(UserError, match="disagree on seed"):
        shards.load_manifest(d)


def test_merged_manifest_lists_shards_rank_by_rank_in_stream_order(tmp_path):
    """The reading order of a split job's folder: rank 0's part (validation first), then rank 1's, ... by rank
    number (manifest.rank10.json sorts before manifest.rank2.json by name), each part's shards by number."""
    d = str(tmp_path)
    entry = lambda name: {"name": name, "split": name.split("_")[0], "tokens": 10, "docs": 1, "bytes": 1044}
    for rank in range(11):
        names = [f"train_r{rank:03d}_{k:06d}.bin" for k in (2, 1)] + (["val_000000.bin"] if rank == 0 else [])
        shards.write_manifest(d, _manifest(rank, 11, [entry(n) for n in names]))
    expected = ["val_000000.bin"] + [f"train_r{r:03d}_{k:06d}.bin" for r in range(11) for k in (1, 2)]
    assert [s["name"] for s in shards.load_manifest(d)["shards"]] == expected
    assert expected[1:] == sorted(expected[1:])  # the same as sorted file names
    assert shards.shard_filename("train", 7, 3, 11) == "train_r003_000007.bin"
    assert shards.shard_filename("train", 7, 3, 1001) == "train_r0003_000007.bin"  # 4 digits: sorts up to r1000
    assert shards.shard_filename("train", 7) == "train_000007.bin" and shards.shard_filename("val", 0, 0, 4) == \
        "val_000000.bin"


def test_manifest_errors_are_clear(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        shards.load_manifest(str(tmp_path / "missing"))
    with pytest.raises(UserError, match="no manifest.json"):
        shards.load_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="not a readable shard manifest"):
        shards.load_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(UserError, match="not a gptlab shard manifest"):
        shards.load_manifest(str(tmp_path))


def test_local_inputs_compare_by_name_and_size_not_folder():
    source = lambda *inputs: {"kind": "local", "inputs": [{"path": p, "bytes": n} for p, n in inputs]}
    here = _manifest(0, 1, [], source=source(("/old/repo/data/a.jsonl", 100), ("/old/repo/data/b.jsonl", 7)))
    moved = _manifest(0, 1, [], source=source(("/new/clone/data/a.jsonl", 100), ("/new/clone/data/b.jsonl", 7)))
    assert shards.settings_difference(here, moved) == []
    assert shards.comparable_setting(moved, "source") == \
        {"kind": "local", "inputs": [{"name": "a.jsonl", "bytes": 100}, {"name": "b.jsonl", "bytes": 7}]}
    for other in (source(("/old/repo/data/a.jsonl", 101), ("/old/repo/data/b.jsonl", 7)),  # other size
                  source(("/old/repo/data/b.jsonl", 7), ("/old/repo/data/a.jsonl", 100)),  # other order
                  source(("/old/repo/data/a.jsonl", 100),),  # a file fewer
                  source(("/old/repo/data/c.jsonl", 100), ("/old/repo/data/b.jsonl", 7))):  # other name
        assert shards.settings_difference(here, _manifest(0, 1, [], source=other)) == ["source"]
    hub = {"kind": "hub", "repo_id": "HuggingFaceFW/fineweb", "config": "sample-10BT"}
    assert shards.settings_difference(_manifest(0, 1, [], source=hub), _manifest(0, 1, [], source=dict(hub))) == []
    assert shards.settings_difference(_manifest(0, 1, [], source=hub), here) == ["source"]
