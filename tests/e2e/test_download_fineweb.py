"""download_fineweb.py end to end on local inputs: lossless shards, resume after a crash, split jobs, bad input."""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import FINEWEB_150, REPO, free_port, run_script, unreadable_file
from helpers import faults
from helpers.tiny_data import save_tiny_tokenizer

from gptlab.dataset import shards
from gptlab.core.errors import UserError
from gptlab.dataset.fineweb import buffered_shuffle, encode_document
from gptlab.text.sources import iter_local_documents
from gptlab.tokenizer.format import EOT, PATTERNS, load_tokenizer, save_tokenizer

TRICKY_DOCS = ["Hello 🌍 world 👩‍👩‍👧 emoji", "line one\r\nline two\r\n\r\n", "", "   ", "tabs\tand\u00a0nbsp",
               "literal <|endoftext|> inside a document", "日本語のテキスト。", "\n", "ends without newline",
               "x" * 5000, "naïve café — “quotes”"]


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    texts = [json.loads(line)["text"] for line in open(FINEWEB_150)][:20]
    return save_tiny_tokenizer(str(tmp_path_factory.mktemp("tok") / "testtok_v296_n20.pkl"), texts, n_merges=40)


def cli(args, **kwargs):
    return run_script([os.path.join(REPO, "download_fineweb.py"), "--quiet"] + [str(a) for a in args], **kwargs)


def run_main(args):
    import download_fineweb
    return download_fineweb.main(["--quiet"] + [str(a) for a in args])


def shard_paths(out_dir):
    """val first, then train shards by number: the stream order for a single writer."""
    return sorted(glob.glob(os.path.join(out_dir, "val_*.bin"))) + \
        sorted(glob.glob(os.path.join(out_dir, "train_*.bin")))


def decode_documents(paths, tokenizer_path):
    """All documents in the shards, in order: split on the <|endoftext|> id, decode each piece strictly."""
    enc = load_tokenizer(tokenizer_path)
    tokens = np.concatenate([shards.read_shard(p) for p in paths]).astype(np.int64)
    assert tokens.size and tokens[0] == enc.eot_token, "every document starts with <|endoftext|>"
    starts = np.flatnonzero(tokens == enc.eot_token)
    ends = list(starts[1:]) + [tokens.size]
    return [enc.decode_bytes(tokens[s + 1:e].tolist()).decode("utf-8") for s, e in zip(starts, ends)]


def write_jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
    return str(path)


def test_lossless_in_stream_order_and_layout(tmp_path, tokenizer_path):
    out_dir = run_main(["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--out", tmp_path, "--num_shards", 50,
                        "--shard_size", 20_000, "--val_tokens", 30_000, "--shuffle_buffer", 0, "--workers", 2])
    stem = os.path.splitext(os.path.basename(tokenizer_path))[0]
    assert out_dir == os.path.join(str(tmp_path), f"local_fineweb_edu_150docs_{stem}")
    docs = list(iter_local_documents([FINEWEB_150]))
    assert decode_documents(shard_paths(out_dir), tokenizer_path) == docs
    manifest = shards.check_manifest(out_dir, json.load(open(os.path.join(out_dir, "manifest.json")))
                                     ["tokenizer"]["ranks_sha256"])
    by_name = {s["name"]: s for s in manifest["shards"]}
    val, trains = by_name.pop("val_000000.bin"), sorted(by_name)
    assert val["tokens"] >= 30_000 and val["end"][1] == 0  # whole documents only
    assert all(by_name[n]["tokens"] == 20_000 for n in trains[:-1]) and 0 < by_name[trains[-1]]["tokens"] <= 20_000
    assert sum(s["docs"] for s in manifest["shards"]) == len(docs) and manifest["complete"]
    # the val documents are the first of the stream and none of them is in train
    val_docs = decode_documents([os.path.join(out_dir, "val_000000.bin")], tokenizer_path)
    assert val_docs == docs[:len(val_docs)]
    train_tokens = np.concatenate([shards.read_shard(os.path.join(out_dir, n)) for n in trains])
    assert train_tokens[0] == load_tokenizer(tokenizer_path).eot_token
    # same ids as tiktoken's encode_ordinary
    enc = load_tokenizer(tokenizer_path)
    assert list(shards.read_shard(os.path.join(out_dir, "val_000000.bin"))[1:1 + 50]) == \
        enc.encode_ordinary(docs[0])[:50]


def test_lossless_tricky_texts_and_shuffle(tmp_path, tokenizer_path):
    inp = write_jsonl(tmp_path / "tricky.jsonl", TRICKY_DOCS * 3)
    args = ["--input", inp, "--tokenizer", tokenizer_path, "--out", tmp_path / "o", "--num_shards", 100,
            "--shard_size", 997, "--val_tokens", 50, "--seed", 0, "--shuffle_buffer", 8]
    out_dir = run_main(args)
    expected = list(buffered_shuffle(iter(TRICKY_DOCS * 3), 0, 8))
    assert expected != TRICKY_DOCS * 3 and sorted(expected) == sorted(TRICKY_DOCS * 3)
    assert decode_documents(shard_paths(out_dir), tokenizer_path) == expected
    enc = load_tokenizer(tokenizer_path)
    for doc in TRICKY_DOCS:
        assert encode_document(enc, doc).tolist() == enc.encode_ordinary(doc)


def test_txt_input_and_invalid_utf8_is_counted(tmp_path, tokenizer_path):
    inp = tmp_path / "docs.txt"
    inp.write_bytes("first doc 🌍\r\n".encode() + b"<|endoftext|>bad \xff\xfe bytes<|endoftext|>third")
    proc = cli(["--input", inp, "--tokenizer", tokenizer_path, "--out", tmp_path, "--num_shards", 1,
                "--shard_size", 1000, "--val_tokens", 5, "--shuffle_buffer", 0], check=True)
    assert "1 document(s) with invalid UTF-8 replaced" in proc.stderr
    out_dir = os.path.join(str(tmp_path), "local_docs_" + os.path.splitext(os.path.basename(tokenizer_path))[0])
    assert decode_documents(shard_paths(out_dir), tokenizer_path) == \
        ["first doc 🌍\r\n", "bad \ufffd\ufffd bytes", "third"]
    assert json.load(open(os.path.join(out_dir, "manifest.json")))["stats"]["replaced_utf8_docs"] == 1


def test_parquet_input_reads_the_text_column_losslessly(tmp_path, tokenizer_path):
    """A valid .parquet (column text, another column beside it, several row groups) gives the documents in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(FINEWEB_150) as f:
        docs = [json.loads(line)["text"] for line in f]
    table = pa.table({"id": list(range(len(docs))), "text": docs})
    pq.write_table(table, tmp_path / "docs.parquet", row_group_size=40)
    assert pq.ParquetFile(tmp_path / "docs.parquet").num_row_groups == 4
    out_dir = run_main(["--input", tmp_path / "docs.parquet", "--tokenizer", tokenizer_path, "--out", tmp_path / "o",
                        "--num_shards", 50, "--shard_size", 50_000, "--val_tokens", 10_000, "--shuffle_buffer", 0])
    assert decode_documents(shard_paths(out_dir), tokenizer_path) == docs


def test_large_vocab_uses_uint32_shards(tmp_path):
    path = str(tmp_path / "big_v256_n0.pkl")
    save_tokenizer(path, pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=[],
                   mergeable_ranks={bytes([i]): i for i in range(256)}, special_tokens={EOT: 70_000},
                   metadata={}, script_content="")
    inp = write_jsonl(tmp_path / "a.jsonl", ["héllo", "world"])
    out_dir = run_main(["--input", inp, "--tokenizer", path, "--out", tmp_path, "--val_tokens", 0,
                        "--shard_size", 100])
    shard = os.path.join(out_dir, "train_000001.bin")
    assert shards.read_header(shard)[0] == 2
    assert json.load(open(os.path.join(out_dir, "manifest.json")))["dtype"] == "uint32"
    assert decode_documents([shard], path) == ["héllo", "world"]


def test_crash_and_resume_gives_identical_shards(tmp_path, tokenizer_path):
    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 12, "--shard_size", 25_000,
              "--val_tokens", 20_000, "--seed", 3]
    reference = run_main(common + ["--out", tmp_path / "ref"])
    crashed = cli(common + ["--out", tmp_path / "run"], env_extra=faults.env(die_after_shards=3))
    assert crashed.returncode == 1
    out_dir = os.path.join(str(tmp_path / "run"), os.path.basename(reference))
    assert len(glob.glob(os.path.join(out_dir, "*.bin"))) == 3
    # a killed run can also leave a half-written temporary file behind
    open(os.path.join(out_dir, "train_000003.bin.tmp.999999"), "wb").write(b"partial")
    cli(common + ["--out", tmp_path / "run"], check=True)
    names = sorted(os.listdir(reference))
    assert sorted(os.listdir(out_dir)) == names and len(names) >= 8
    for name in names:
        if name.endswith(".bin"):
            assert open(os.path.join(out_dir, name), "rb").read() == open(os.path.join(reference, name), "rb").read()
    strip = lambda m: [{k: v for k, v in s.items()} for s in m["shards"]]
    assert strip(shards.load_manifest(out_dir)) == strip(shards.load_manifest(reference))
    # a deleted (or broken) shard is rewritten identically by re-running; the others are kept
    os.remove(os.path.join(out_dir, "train_000004.bin"))
    with open(os.path.join(out_dir, "train_000006.bin"), "r+b") as f:
        f.truncate(2000)
    proc = cli(common + ["--out", tmp_path / "run"], check=True)
    assert "rewriting" in proc.stderr and "delete it" not in proc.stderr  # says what it does, not what to do
    for name in names:
        assert open(os.path.join(out_dir, name), "rb").read() == open(os.path.join(reference, name), "rb").read() \
            or name.startswith("manifest")


def test_sigkill_mid_run_then_resume(tmp_path, tokenizer_path):
    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 60, "--shard_size", 2_000,
              "--val_tokens", 5_000, "--workers", 1, "--out"]
    reference = run_main(common + [tmp_path / "ref"])
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "download_fineweb.py"), "--quiet"] +
                            [str(a) for a in common + [tmp_path / "run"]], env=env, cwd=REPO,
                            stderr=subprocess.DEVNULL)
    out_dir = os.path.join(str(tmp_path / "run"), os.path.basename(reference))
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(out_dir, "train_000001.bin")):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    assert len(glob.glob(os.path.join(out_dir, "*.bin"))) < len(glob.glob(os.path.join(reference, "*.bin")))
    cli(common + [tmp_path / "run"], check=True)
    for name in os.listdir(reference):
        if name.endswith(".bin"):
            assert open(os.path.join(out_dir, name), "rb").read() == open(os.path.join(reference, name), "rb").read()
    assert sorted(os.listdir(out_dir)) == sorted(os.listdir(reference))


def test_disk_full_removes_partial_shard_and_keeps_finished_ones(tmp_path, tokenizer_path):
    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 4, "--shard_size", 30_000,
              "--val_tokens", 10_000, "--out", tmp_path]
    proc = cli(common, env_extra=faults.env(full_disk="train_000002.bin"))
    assert proc.returncode == 2 and "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
    out_dir = glob.glob(os.path.join(str(tmp_path), "local_*"))[0]
    assert sorted(os.listdir(out_dir)) == ["manifest.json", "train_000001.bin", "val_000000.bin"]
    before = {n: open(os.path.join(out_dir, n), "rb").read() for n in ["train_000001.bin", "val_000000.bin"]}
    assert [s["name"] for s in shards.check_manifest(out_dir)["shards"]] == ["val_000000.bin", "train_000001.bin"]
    cli(common, check=True)
    assert len(glob.glob(os.path.join(out_dir, "train_*.bin"))) == 4
    for name, raw in before.items():
        assert open(os.path.join(out_dir, name), "rb").read() == raw


def test_other_settings_refused_unless_overwrite(tmp_path, tokenizer_path):
    common = ["--input", FINEWEB_150, "--shard_size", 10_000, "--val_tokens", 1000, "--out", tmp_path,
              "--num_shards", 2]
    run_main(common + ["--tokenizer", tokenizer_path])
    with pytest.raises(UserError, match=r"other settings .*seed: 0 → 1.*--overwrite"):
        run_main(common + ["--tokenizer", tokenizer_path, "--seed", 1])
    # a retrained tokenizer with the same file name: same folder, different vocabulary
    retrained = save_tiny_tokenizer(str(tmp_path / os.path.basename(tokenizer_path)), ["abc abc abd " * 50], 5)
    with pytest.raises(UserError, match="tokenizer"):
        run_main(common + ["--tokenizer", retrained])
    out_dir = run_main(common + ["--tokenizer", retrained, "--overwrite"])
    shards.check_manifest(out_dir, json.load(open(os.path.join(out_dir, "manifest.json")))["tokenizer"]["ranks_sha256"])
    with pytest.raises(UserError, match="were made with tokenizer"):
        shards.check_manifest(out_dir, "0" * 64)
    # a larger --num_shards extends a finished folder
    out_dir = run_main(common[:-1] + [3, "--tokenizer", retrained])
    assert len(shards.check_manifest(out_dir)["shards"]) == 4


def test_moved_input_still_resumes_other_input_refused(tmp_path, tokenizer_path, capsys):
    docs = [json.loads(line)["text"] for line in open(FINEWEB_150)][:40]
    (tmp_path / "old").mkdir(), (tmp_path / "new").mkdir()
    first = write_jsonl(tmp_path / "old" / "docs.jsonl", docs)
    settings = ["--tokenizer", tokenizer_path, "--shard_size", 4_000, "--val_tokens", 2_000, "--seed", 2]
    reference = run_main(["--input", first, "--num_shards", 4, "--out", tmp_path / "ref"] + settings)
    common = settings + ["--out", tmp_path / "shards"]
    out_dir = run_main(["--input", first, "--num_shards", 2] + common)
    # the repository (with data/ kept) is moved: same file name and bytes, another folder
    moved = str(tmp_path / "new" / "docs.jsonl")
    os.rename(first, moved)
    capsys.readouterr()
    assert run_main(["--input", moved, "--num_shards", 2] + common) == out_dir
    assert "nothing to do" in capsys.readouterr().err
    # resuming from the new place continues the same stream: identical to one uninterrupted run
    run_main(["--input", moved, "--num_shards", 4] + common)
    assert sorted(os.listdir(out_dir)) == sorted(os.listdir(reference))
    for name in os.listdir(reference):
        if name.endswith(".bin"):
            assert open(os.path.join(out_dir, name), "rb").read() == open(os.path.join(reference, name), "rb").read()
    manifest = json.load(open(os.path.join(out_dir, "manifest.json")))
    assert manifest["source"]["inputs"] == [{"path": moved, "bytes": os.path.getsize(moved)}]  # recorded as-is
    # another file under the same name (other size) is other data: refused
    write_jsonl(moved, docs[:30])
    with pytest.raises(UserError, match=r"other settings .*source.*--overwrite"):
        run_main(["--input", moved, "--num_shards", 4] + common)


def test_torchrun_two_ranks_split_the_stream(tmp_path, tokenizer_path):
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                       os.path.join(REPO, "download_fineweb.py"), "--quiet", "--input", FINEWEB_150,
                       "--tokenizer", tokenizer_path, "--out", str(tmp_path), "--num_shards", "40",
                       "--shard_size", "20000", "--val_tokens", "10000", "--shuffle_buffer", "0", "--workers", "1"])
    assert proc.returncode == 0, proc.stderr
    out_dir = glob.glob(os.path.join(str(tmp_path), "local_*"))[0]
    manifest = shards.check_manifest(out_dir)
    assert manifest["complete"] and manifest["parts"] == ["manifest.rank0.json", "manifest.rank1.json"]
    names = [s["name"] for s in manifest["shards"]]
    assert names[0] == "val_000000.bin" and len(names) > 8 and len(set(names)) == len(names)
    docs = list(iter_local_documents([FINEWEB_150]))
    rank_docs = []
    for rank in (0, 1):
        part = json.load(open(os.path.join(out_dir, f"manifest.rank{rank}.json")))
        rank_docs.append(decode_documents([os.path.join(out_dir, s["name"]) for s in part["shards"]],
                                          tokenizer_path))
        trains = [s["name"] for s in part["shards"] if s["split"] == "train"]
        assert trains == [f"train_r{rank:03d}_{k:06d}.bin" for k in range(1, len(trains) + 1)]
    # the input ran out before 40 shards: rank 0 holds documents 0, 2, 4, ... (val first), rank 1 holds 1, 3, 5, ...
    assert rank_docs[0] == docs[0::2] and rank_docs[1] == docs[1::2]


def test_split_jobs_with_rank_flags_and_no_torchrun(tmp_path, tokenizer_path):
    """--rank/--world_size alone (as on two machines): each process writes its own part; the folder is complete
    only once both have run, and the two parts hold every other document of the stream."""
    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--out", tmp_path, "--num_shards", 40,
              "--shard_size", 20_000, "--val_tokens", 10_000, "--shuffle_buffer", 0, "--world_size", 2]
    out_dir = run_main(common + ["--rank", 1])
    assert sorted(n for n in os.listdir(out_dir) if n.startswith("manifest")) == ["manifest.rank1.json"]
    assert not shards.check_manifest(out_dir)["complete"]  # rank 0's part (and the validation shard) is missing
    assert not os.path.exists(os.path.join(out_dir, "val_000000.bin"))
    assert run_main(common + ["--rank", 0]) == out_dir
    manifest = shards.check_manifest(out_dir)
    assert manifest["complete"] and manifest["parts"] == ["manifest.rank0.json", "manifest.rank1.json"]
    with open(FINEWEB_150) as f:
        docs = [json.loads(line)["text"] for line in f]
    for rank in (0, 1):
        with open(os.path.join(out_dir, f"manifest.rank{rank}.json")) as f:
            part = json.load(f)
        names = [s["name"] for s in part["shards"]]
        trains = [n for n in names if n.startswith("train_")]
        assert trains == [f"train_r{rank:03d}_{k:06d}.bin" for k in range(1, len(trains) + 1)]  # 1, 2, ... per rank
        assert ("val_000000.bin" in names) == (rank == 0)
        assert decode_documents([os.path.join(out_dir, n) for n in names], tokenizer_path) == docs[rank::2]


@pytest.mark.parametrize("args, message", [
    (["--version", "20B"], "--version '20B' is unknown"),
    (["--shard_size", 0], "--shard_size must be a positive"),
    (["--val_tokens", -1], "--val_tokens must be 0"),
    (["--num_shards", 0], "--num_shards must be at least 1"),
    (["--shard_size", -5], "--shard_size must be a positive"),
    (["--num_shards", -5], "--num_shards must be at least 1"),
    (["--input", "/nonexistent/x.jsonl"], "does not exist"),
    (["--input", "EMPTY"], "has no documents"),
    (["--input", "BADPARQUET"], "not a readable parquet"),
    (["--input", "BADJSON"], "is not valid JSON"),
    (["--tokenizer", "no_such_tok.pkl"], "tokenizer 'no_such_tok.pkl' not found"),
    (["--input", "LOCKED"], "not readable"),
    (["--tokenizer", "LOCKEDTOK"], "is not readable"),
    (["--out", "AFILE"], "is a file, not a folder"),
    # an explicit --version beside --input is a conflict, not silently ignored
    (["--input", FINEWEB_150, "--version", "5B"], "--version 5B selects a Hub sample, but --input reads local files"),
])
def test_bad_input_is_one_clear_error(tmp_path, tokenizer_path, args, message):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{broken\n')
    files = {"EMPTY": tmp_path / "empty.jsonl", "BADPARQUET": tmp_path / "bad.parquet",
             "BADJSON": tmp_path / "bad.jsonl"}
    if "LOCKED" in args:
        files["LOCKED"] = unreadable_file(tmp_path / "locked.jsonl", '{"text": "hello"}\n')
    if "AFILE" in args:
        files["AFILE"] = tmp_path / "a_file.txt"
        files["AFILE"].write_text("keep me")
    if "LOCKEDTOK" in args:
        files["LOCKEDTOK"] = unreadable_file(tmp_path / "locked_v300_n1.pkl")
    args = [files.get(a, a) for a in args]
    base = ([] if "--out" in args else ["--out", tmp_path / "out"]) + \
        ([] if "--tokenizer" in args else ["--tokenizer", tokenizer_path])
    if "--input" not in args and "--version" not in args:
        base += ["--input", FINEWEB_150]
    proc = cli(base + args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "out"), "a failed start leaves nothing behind"


def test_offline_hub_names_input(tmp_path, tokenizer_path):
    proc = cli(["--tokenizer", tokenizer_path, "--out", tmp_path / "o", "--version", "10B"],
               env_extra={"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HUB_OFFLINE": "0"}, timeout=120)
    assert proc.returncode == 2 and "--input" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "o")


def test_ctrl_c_mid_stream_exits_130_and_leaves_no_partial_shard(tmp_path, tokenizer_path):
    """Interrupted while documents are still arriving (a named pipe fed 20 documents and kept open): status 130,
    one 'interrupted' line, no traceback, and no shard or temporary file under any name."""
    from conftest import interrupt_while_reading

    fifo = tmp_path / "stream.jsonl"
    with open(FINEWEB_150, "rb") as f:
        head = b"".join(f.readline() for _ in range(20))
    code, _, err = interrupt_while_reading(
        [os.path.join(REPO, "download_fineweb.py"), "--input", fifo, "--tokenizer", tokenizer_path, "--out",
         tmp_path / "out", "--num_shards", 2, "--shard_size", 1_000_000, "--val_tokens", 1_000_000,
         "--shuffle_buffer", 0], fifo, head)
    assert code == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err, err[-2000:]
    assert not [p.name for p in (tmp_path / "out").rglob("*") if ".bin" in p.name]


def test_a_same_size_shard_with_a_flipped_byte_is_caught_by_its_checksum_and_rewritten(tmp_path, tokenizer_path):
    """The manifest records each shard's sha256 (checked here with hashlib on the file itself); a re-run finds a
    damaged shard whose size and header are intact, and rewrites it byte-identically."""
    import hashlib

    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 4, "--shard_size", 25_000,
              "--val_tokens", 20_000, "--out", tmp_path]
    out_dir = run_main(common)
    manifest = shards.load_manifest(out_dir)
    for shard in manifest["shards"]:
        with open(os.path.join(out_dir, shard["name"]), "rb") as f:
            assert shard["sha256"] == hashlib.sha256(f.read()).hexdigest()
    victim = os.path.join(out_dir, "train_000002.bin")
    original = open(victim, "rb").read()
    with open(victim, "r+b") as f:
        f.seek(5000)
        f.write(bytes([original[5000] ^ 0x01]))  # one bit, same size: header and length still agree
    proc = cli(common, check=True)
    assert "train_000002.bin does not match its checksum" in proc.stderr and "nothing to do" not in proc.stderr
    assert open(victim, "rb").read() == original


def test_a_second_writer_of_a_shard_folder_is_refused_naming_the_first(tmp_path, tokenizer_path):
    """Two writers (here: seeds 0 and 1) of one folder would mix their shards under one manifest. While the first
    holds the folder, the second is refused at once, naming it; the first's shards come out as if alone."""
    import hashlib
    import socket
    import tempfile

    from gptlab.core.files import exclusive_lock

    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 3, "--shard_size", 25_000,
              "--val_tokens", 20_000, "--out", tmp_path / "race"]
    out_dir = run_main(common + ["--out", tmp_path / "alone"])
    folder = os.path.basename(out_dir)
    # the first writer, mid-run: this process holding the folder's lock as download_fineweb.py does
    key = hashlib.sha256(os.path.realpath(tmp_path / "race" / folder).encode()).hexdigest()[:24]
    lock = os.path.join(tempfile.gettempdir(), "gptlab-locks", f"shards-{key}.rank0.lock")
    with exclusive_lock(lock, "the first writer"):
        proc = cli(common + ["--seed", 1])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert (f"error: shard folder {tmp_path / 'race' / folder} is being written by pid {os.getpid()} on "
            f"{socket.gethostname()}") in proc.stderr
    assert not (tmp_path / "race" / folder).exists()  # the refused writer wrote nothing
    # once the first is done, a writer gets the folder
    run_main(common)
    for name in os.listdir(out_dir):
        if name.endswith(".bin"):
            assert open(os.path.join(out_dir, name), "rb").read() == \
                open(os.path.join(tmp_path / "race" / folder, name), "rb").read()


@pytest.mark.parametrize("docs, val_tokens, expected", [
    # one document goes whole to the validation shard: lowering --val_tokens (to anything but 0) cannot help
    (["a single document " * 40], 1, "error: the input is 1 document ("),
    (["first document " * 20, "second document " * 20], 100_000, "lower --val_tokens or add input"),
])
def test_an_input_used_up_by_the_validation_shard_says_why(tokenizer_path, tmp_path, docs, val_tokens, expected):
    write_jsonl(tmp_path / "in.jsonl", docs)
    proc = cli(["--input", str(tmp_path / "in.jsonl"), "--tokenizer", tokenizer_path, "--out", str(tmp_path / "out"),
                "--val_tokens", str(val_tokens)])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and expected in lines[-1], proc.stderr
    if len(docs) == 1:
        assert "--val_tokens 0" in lines[-1] and "lower --val_tokens" not in lines[-1]


def test_progress_to_a_log_is_whole_lines_without_control_characters(tmp_path, tokenizer_path):
    """stderr redirected (a pipe here, as `> log 2>&1`): the shard bar's report is plain lines, no \\r redraws.
    Read as bytes: text mode would turn a \\r into a newline."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "download_fineweb.py"), "--input", FINEWEB_150,
                           "--tokenizer", tokenizer_path, "--out", str(tmp_path), "--num_shards", "3",
                           "--shard_size", "20000", "--val_tokens", "10000"], cwd=REPO, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not re.search(rb"[\x00-\x09\x0b-\x1f]", proc.stdout + proc.stderr), proc.stderr[:500]
    bar_lines = [line for line in proc.stderr.decode().split("\n") if line.startswith("shards → ")]
    assert bar_lines and "tok/s" in bar_lines[-1] and "MB/s" in bar_lines[-1]  # the close line: its rates


# ------------------------------------------------------------------------- split jobs: names and reading order
def expected_rank_tokens(enc, docs, val_tokens):
    """(val tokens, train token stream) of one rank's documents, worked out here with tiktoken itself: each
    document is <|endoftext|> + encode_ordinary(text); the validation shard takes whole documents until it holds at
    least val_tokens (0: none), the rest is the train stream."""
    pieces = [[enc.eot_token] + enc.encode_ordinary(doc) for doc in docs]
    val, used = [], 0
    while val_tokens and used < len(pieces) and len(val) < val_tokens:
        val += pieces[used]
        used += 1
    return val, [t for piece in pieces[used:] for t in piece]


def shard_file_bytes(tokens):
    """A version-1 shard's bytes, built by hand: 256 little-endian int32 (magic 20240520, version 1, count), then
    the tokens as little-endian uint16."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    return header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes()


def reading_order(out_dir):
    """The documented reading order of a shard folder: val_000000.bin, then sorted(glob('train_*.bin'))."""
    return sorted(glob.glob(os.path.join(out_dir, "val_*.bin"))) + \
        sorted(glob.glob(os.path.join(out_dir, "train_*.bin")))


def check_split_folder(out_dir, docs, world_size, num_shards, shard_size, val_tokens, enc):
    """The folder written by `world_size` ranks over `docs` (no shuffle: rank r takes docs[r::W]) holds, in
    sorted name order, rank 0's stream (validation documents first), then rank 1's, ...: each rank's train shards
    numbered 1, 2, ... without a gap, holding its share of --num_shards (lower ranks take the remainder), cut at
    --shard_size. Returns the train names in reading order."""
    expected_names, expected_train = [], []
    val_expected = None
    for rank in range(world_size):
        val, train = expected_rank_tokens(enc, docs[rank::world_size], val_tokens if rank == 0 else 0)
        if rank == 0:
            val_expected = val
        share = (num_shards - rank + world_size - 1) // world_size  # shards r+1, r+1+W, ... of num_shards
        train = train[:share * shard_size]
        count = (len(train) + shard_size - 1) // shard_size  # fewer when this rank's documents run out
        expected_names += [f"train_r{rank:03d}_{k:06d}.bin" for k in range(1, count + 1)]
        expected_train += [train[i * shard_size:(i + 1) * shard_size] for i in range(count)]
    train_names = [os.path.basename(p) for p in sorted(glob.glob(os.path.join(out_dir, "train_*.bin")))]
    assert train_names == expected_names
    for name, tokens in zip(train_names, expected_train):
        assert open(os.path.join(out_dir, name), "rb").read() == shard_file_bytes(tokens), name
    val_path = os.path.join(out_dir, "val_000000.bin")
    if val_tokens:
        assert open(val_path, "rb").read() == shard_file_bytes(val_expected)
    else:
        assert not os.path.exists(val_path)
    # the merged manifest lists the shards in that same reading order
    assert [s["name"] for s in shards.load_manifest(out_dir)["shards"]] == \
        (["val_000000.bin"] if val_tokens else []) + train_names
    return train_names


def split_job(out_dir_parent, tokenizer_path, inp, world_size, num_shards, shard_size, val_tokens, ranks=None):
    common = ["--input", inp, "--tokenizer", tokenizer_path, "--out", out_dir_parent, "--num_shards", num_shards,
              "--shard_size", shard_size, "--val_tokens", val_tokens, "--shuffle_buffer", 0,
              "--world_size", world_size, "--workers", 1]
    out_dir = None
    for rank in (ranks if ranks is not None else range(world_size)):
        out_dir = run_main(common + ["--rank", rank])
    return out_dir


def test_two_ranks_read_in_name_order_give_the_documents_back(tmp_path, tokenizer_path):
    """Issue 25: two ranks used to number their shards train_000001, 000003, ... / 000002, 000004, ..., with a
    document continuing W numbers later, so name order interleaved two streams mid-document. Now sorted names
    are rank 0's stream then rank 1's, and decoding them in that order gives every document back, whole."""
    docs = list(iter_local_documents([FINEWEB_150]))
    out_dir = split_job(tmp_path, tokenizer_path, FINEWEB_150, 2, 1000, 20_000, 10_000, ranks=[1, 0])
    assert decode_documents(reading_order(out_dir), tokenizer_path) == docs[0::2] + docs[1::2]
    check_split_folder(out_dir, docs, 2, 1000, 20_000, 10_000, load_tokenizer(tokenizer_path))


@pytest.mark.parametrize("world_size, num_shards, shard_size, val_tokens", [
    (2, 7, 15_000, 10_000),   # --num_shards reached: each rank's last shard is full, its last document cut
    (3, 8, 12_000, 0),        # no validation shard; 8 = 3 + 3 + 2
    (3, 1000, 30_000, 5_000),  # every rank runs out of documents
    (4, 2, 10_000, 3_000),    # fewer shards than ranks: ranks 2 and 3 write none
])
def test_split_jobs_number_each_rank_contiguously(tmp_path, tokenizer_path, world_size, num_shards, shard_size,
                                                 val_tokens):
    docs = list(iter_local_documents([FINEWEB_150]))
    out_dir = split_job(tmp_path, tokenizer_path, FINEWEB_150, world_size, num_shards, shard_size, val_tokens)
    check_split_folder(out_dir, docs, world_size, num_shards, shard_size, val_tokens, load_tokenizer(tokenizer_path))


def test_a_rank_that_runs_out_early_leaves_no_gap(tmp_path, tokenizer_path):
    """Rank 1's documents are short, so it writes fewer shards than rank 0: its numbers still start at 1 and run
    without a gap, and the folder read in name order is rank 0's documents, then rank 1's."""
    long_docs = list(iter_local_documents([FINEWEB_150]))[:40]
    docs = [d for pair in zip(long_docs, [f"short document {i}" for i in range(40)]) for d in pair]
    inp = write_jsonl(tmp_path / "uneven.jsonl", docs)
    out_dir = split_job(tmp_path / "o", tokenizer_path, inp, 2, 1000, 5_000, 2_000)
    names = check_split_folder(out_dir, docs, 2, 1000, 5_000, 2_000, load_tokenizer(tokenizer_path))
    ranks = [n[7:10] for n in names]
    assert ranks.count("001") == 1 and ranks.count("000") > 3  # the premise: rank 1 ran out first
    assert decode_documents(reading_order(out_dir), tokenizer_path) == docs[0::2] + docs[1::2]


def test_single_writer_names_and_bytes_are_unchanged(tmp_path, tokenizer_path):
    """--world_size 1 keeps val_000000.bin, train_000001.bin, ... (committed baselines fingerprint shards by name
    and hash): every file's bytes equal a shard built here from tiktoken's encoding of the documents in order."""
    docs = list(iter_local_documents([FINEWEB_150]))[:60]
    inp = write_jsonl(tmp_path / "docs.jsonl", docs)
    out_dir = run_main(["--input", inp, "--tokenizer", tokenizer_path, "--out", tmp_path / "o", "--num_shards", 5,
                        "--shard_size", 9_000, "--val_tokens", 4_000, "--shuffle_buffer", 0])
    val, train = expected_rank_tokens(load_tokenizer(tokenizer_path), docs, 4_000)
    assert len(train) > 5 * 9_000  # the premise: --num_shards, not the input, ends the run
    expected = {"val_000000.bin": val}
    expected.update({f"train_{k:06d}.bin": train[(k - 1) * 9_000:k * 9_000] for k in range(1, 6)})
    assert sorted(os.listdir(out_dir)) == sorted(list(expected) + ["manifest.json"])
    for name, tokens in expected.items():
        assert open(os.path.join(out_dir, name), "rb").read() == shard_file_bytes(tokens), name


def as_older_version(out_dir, world_size):
    """Rename a split job's shards to the layout of versions before issue 25 (rank r's k-th train shard was
    train_{r + 1 + (k - 1) * W:06d}.bin) and rewrite the manifest parts to match: what existing users have."""
    for rank in range(world_size):
        path = os.path.join(out_dir, f"manifest.rank{rank}.json")
        part = json.load(open(path))
        for shard in part["shards"]:
            if shard["split"] == "train":
                k = int(shard["name"][11:17])
                old = f"train_{rank + 1 + (k - 1) * world_size:06d}.bin"
                os.rename(os.path.join(out_dir, shard["name"]), os.path.join(out_dir, old))
                shard["name"] = old
        json.dump(part, open(path, "w"))


def folder_bytes(out_dir):
    return {n: open(os.path.join(out_dir, n), "rb").read() for n in sorted(os.listdir(out_dir)) if n.endswith(".bin")}


def test_an_older_versions_split_folder_is_refused_and_overwrite_rewrites_it(tmp_path, tokenizer_path):
    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 6, "--shard_size", 15_000,
              "--val_tokens", 5_000, "--world_size", 2, "--shuffle_buffer", 0]
    reference = split_job(tmp_path / "ref", tokenizer_path, FINEWEB_150, 2, 6, 15_000, 5_000)
    out_dir = split_job(tmp_path / "old", tokenizer_path, FINEWEB_150, 2, 6, 15_000, 5_000)
    as_older_version(out_dir, 2)
    before = folder_bytes(out_dir)
    assert "train_000002.bin" in before
    for rank in (0, 1):  # resuming (or extending) it would add this version's names beside the old ones
        proc = cli(common + ["--out", tmp_path / "old", "--rank", rank, "--num_shards", 8])
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and last.startswith(f"error: {out_dir} holds a split job's shards in an older "
                                                        "version's layout (manifest.rank0.json: train_000001.bin"), last
        assert "Pass --overwrite to every rank" in last and "Traceback" not in proc.stderr
        assert folder_bytes(out_dir) == before  # nothing touched
    # --overwrite on rank 0 clears the old layout (rank 1's old shards and part too); rank 1 then starts afresh
    cli(common + ["--out", tmp_path / "old", "--rank", 0, "--overwrite"], check=True)
    cli(common + ["--out", tmp_path / "old", "--rank", 1], check=True)
    assert folder_bytes(out_dir) == folder_bytes(reference)
    assert shards.load_manifest(out_dir)["shards"] == shards.load_manifest(reference)["shards"]
    # a leftover shard of another layout, listed by no manifest, is refused too (name order would mix it in)
    open(os.path.join(out_dir, "train_000003.bin"), "wb").write(before["train_000003.bin"])
    with pytest.raises(UserError, match=r"holds shards that this job would not write \(train_000003\.bin, ...: "):
        run_main(common + ["--out", tmp_path / "old", "--rank", 1])
    run_main(common + ["--out", tmp_path / "old", "--rank", 0, "--overwrite"])
    assert folder_bytes(out_dir) == folder_bytes(reference)


def test_a_killed_rank_resumes_to_the_same_split_folder(tmp_path, tokenizer_path):
    """Rank 0 of 2 dies after 2 shards; re-running it finishes the folder byte-identical to an uninterrupted one,
    with the same contiguous names; a larger --num_shards then extends each rank's numbering where it stopped."""
    docs = list(iter_local_documents([FINEWEB_150]))
    common = ["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--num_shards", 9, "--shard_size", 12_000,
              "--val_tokens", 6_000, "--world_size", 2, "--shuffle_buffer", 0]
    reference = split_job(tmp_path / "ref", tokenizer_path, FINEWEB_150, 2, 9, 12_000, 6_000)
    run_main(common + ["--out", tmp_path / "run", "--rank", 1])
    crashed = cli(common + ["--out", tmp_path / "run", "--rank", 0], env_extra=faults.env(die_after_shards=2))
    assert crashed.returncode == 1
    out_dir = os.path.join(str(tmp_path / "run"), os.path.basename(reference))
    assert sorted(n for n in os.listdir(out_dir) if n.startswith(("val", "train_r000"))) == \
        ["train_r000_000001.bin", "val_000000.bin"]
    run_main(common + ["--out", tmp_path / "run", "--rank", 0])
    assert folder_bytes(out_dir) == folder_bytes(reference)
    check_split_folder(out_dir, docs, 2, 9, 12_000, 6_000, load_tokenizer(tokenizer_path))
    for rank in (1, 0):
        run_main(common + ["--num_shards", 13, "--out", tmp_path / "run", "--rank", rank])
    check_split_folder(out_dir, docs, 2, 13, 12_000, 6_000, load_tokenizer(tokenizer_path))


def test_overwrite_with_another_world_size_leaves_only_the_new_jobs_shards(tmp_path, tokenizer_path):
    """A 3-rank folder rewritten by 2 ranks with --overwrite (rank 0 clears rank 2's shards, which no rank of the
    new job writes), then by one writer: each time the folder equals a fresh run's, no shard of the old job left."""
    job = lambda parent, world_size, **kw: split_job(parent, tokenizer_path, FINEWEB_150, world_size, 5, 10_000,
                                                      4_000, **kw)
    job(tmp_path / "run", 3)
    for world_size, change in ((2, "world_size: 3 → 2"), (1, "world_size: 2 → 1")):
        reference = job(tmp_path / f"ref{world_size}", world_size)
        with pytest.raises(UserError, match=f"other settings .*{change}"):
            job(tmp_path / "run", world_size, ranks=[0])
        for rank in reversed(range(world_size)):  # the last rank first: rank 0 must clean up after it
            out_dir = run_main(["--input", FINEWEB_150, "--tokenizer", tokenizer_path, "--out", tmp_path / "run",
                                "--num_shards", 5, "--shard_size", 10_000, "--val_tokens", 4_000,
                                "--shuffle_buffer", 0, "--world_size", world_size, "--rank", rank, "--overwrite"])
        assert folder_bytes(out_dir) == folder_bytes(reference)
        assert sorted(n for n in os.listdir(out_dir) if n.startswith("manifest")) == \
            sorted(n for n in os.listdir(reference) if n.startswith("manifest"))
