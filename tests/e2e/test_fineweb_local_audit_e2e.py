"""download_fineweb.py --input, checked from outside the product: the shards are read by a reader written from
docs/data.md's format text (not gptlab.dataset.shards), the tokens compared with tiktoken's own encode_ordinary of
the documents (the tokenizer pickle loaded as a tiktoken Encoding here), the documents taken from pyarrow's JSON
reader or json.loads."""
import glob
import hashlib
import json
import os
import pickle
import struct

import numpy as np
import pytest
import tiktoken

from conftest import FINEWEB_150, REPO, run_script
from helpers.tiny_data import save_tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    texts = [json.loads(line)["text"] for line in open(FINEWEB_150)][:20]
    return save_tiny_tokenizer(str(tmp_path_factory.mktemp("tok") / "audittok_v296_n20.pkl"), texts, n_merges=40)


def reference_tokens(tokenizer_path, docs):
    """<|endoftext|> + encode_ordinary(doc) for each document, by tiktoken itself."""
    with open(tokenizer_path, "rb") as f:
        data = pickle.load(f)
    enc = tiktoken.Encoding(name="audit", pat_str=data["pat_str"], mergeable_ranks=data["mergeable_ranks"],
                            special_tokens=data["special_tokens"])
    eot = data["special_tokens"]["<|endoftext|>"]
    return [t for doc in docs for t in [eot] + enc.encode_ordinary(doc)]


def read_doc_shard(path):
    """docs/data.md: 256 little-endian int32 ([0] = 20240520, [1] = version, [2] = tokens), then the tokens
    (version 1: uint16, version 2: uint32), nothing else."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, ntok = struct.unpack("<3i", data[:12])
    assert magic == 20240520 and version in (1, 2), (path, magic, version)
    dtype = "<u2" if version == 1 else "<u4"
    assert len(data) == 1024 + ntok * np.dtype(dtype).itemsize, (path, len(data), ntok)
    return np.frombuffer(data, dtype=dtype, offset=1024).astype(np.int64)


def folder_tokens(folder):
    """val first, then the train shards by name; each checked against its manifest entry (tokens, bytes, sha256)."""
    with open(os.path.join(folder, "manifest.json")) as f:
        listed = {s["name"]: s for s in json.load(f)["shards"]}
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.bin")))
    names = [n for n in names if n.startswith("val_")] + [n for n in names if n.startswith("train_")]
    assert sorted(listed) == sorted(names)
    tokens = []
    for name in names:
        path = os.path.join(folder, name)
        shard = read_doc_shard(path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        assert (listed[name]["tokens"], listed[name]["bytes"], listed[name]["sha256"]) == \
            (shard.size, os.path.getsize(path), digest), name
        tokens += shard.tolist()
    return tokens


def shard_run(tmp_path, tokenizer_path, inputs, *extra):
    proc = run_script([os.path.join(REPO, "download_fineweb.py"), "--quiet", "--tokenizer", tokenizer_path,
                       "--out", tmp_path / "out", "--shuffle_buffer", 0, "--shard_size", 7, "--num_shards", 1000,
                       "--input", *inputs, *extra])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (folder,) = glob.glob(str(tmp_path / "out" / "local_*"))
    return folder


def test_a_jsonl_with_a_byte_order_mark_crlf_and_blank_lines_reads_as_pyarrow_reads_it(tmp_path, tokenizer_path):
    # a BOM (Windows editors write one), CRLF line ends, blank lines, a last line without a newline
    raw = ('\ufeff{"text": "first doc"}\r\n\r\n{"text": "line\\r\\nbreak <|endoftext|> kept"}\r\n  \n'
           '{"text": "last, no newline"}').encode("utf-8")
    path = tmp_path / "bom.jsonl"
    path.write_bytes(raw)
    import pyarrow.json  # what HF datasets reads JSON Lines with: it skips the BOM
    docs = pyarrow.json.read_json(str(path)).column("text").to_pylist()
    assert docs == ["first doc", "line\r\nbreak <|endoftext|> kept", "last, no newline"]
    folder = shard_run(tmp_path, tokenizer_path, [path], "--val_tokens", 4)
    assert folder_tokens(folder) == reference_tokens(tokenizer_path, docs)


def test_one_file_named_three_ways_is_read_once(tmp_path, tokenizer_path):
    docs = ["only once", "and this one too"]
    path = tmp_path / "data" / "docs.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    os.symlink(path, tmp_path / "data" / "alias.jsonl")
    spellings = [path, tmp_path / "data" / ".." / "data" / "docs.jsonl", tmp_path / "data" / "alias.jsonl",
                 str(tmp_path / "data" / "*.jsonl")]  # the glob matches both names again
    folder = shard_run(tmp_path, tokenizer_path, spellings, "--val_tokens", 0)
    assert folder_tokens(folder) == reference_tokens(tokenizer_path, docs)


@pytest.mark.parametrize("new_text, message", [("", "the input has no documents"),
                                               ("{not json\n", "is not valid JSON")])
def test_overwrite_with_an_input_that_fails_at_once_keeps_the_old_folder(tmp_path, tokenizer_path, new_text, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "the old corpus"}\n{"text": "two documents"}\n')
    folder = shard_run(tmp_path, tokenizer_path, [path], "--val_tokens", 0)
    before = {p: open(p, "rb").read() for p in glob.glob(os.path.join(folder, "*"))}
    assert len(before) >= 2  # a manifest and shards
    path.write_text(new_text)  # the same file name, now empty or broken: the same folder
    proc = run_script([os.path.join(REPO, "download_fineweb.py"), "--quiet", "--tokenizer", tokenizer_path, "--out",
                       tmp_path / "out", "--shuffle_buffer", 0, "--val_tokens", 0, "--input", path, "--overwrite"])
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert {p: open(p, "rb").read() for p in glob.glob(os.path.join(folder, "*"))} == before
