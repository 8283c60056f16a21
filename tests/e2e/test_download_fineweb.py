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

from gptlab.data import shards
from gptlab.core.errors import UserError
from gptlab.data.fineweb import buffered_shuffle, encode_document
from gptlab.data.sources import iter_local_documents
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
    assert [s["name"] for s in shards.check_manifest(out_dir)["shards"]] == ["train_000001.bin", "val_000000.bin"]
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
    assert names[-1] == "val_000000.bin" and len(names) > 8 and len(set(names)) == len(names)
    docs = list(iter_local_documents([FINEWEB_150]))
    rank_docs = []
    for rank in (0, 1):
        part = json.load(open(os.path.join(out_dir, f"manifest.rank{rank}.json")))
        rank_docs.append(decode_documents([os.path.join(out_dir, s["name"]) for s in part["shards"]],
                                          tokenizer_path))
        assert all((int(s["name"][6:12]) - 1) % 2 == rank for s in part["shards"] if s["split"] == "train")
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
        trains = sorted(int(n[6:12]) for n in names if n.startswith("train_"))
        assert trains == list(range(rank + 1, 2 * len(trains) + 1, 2))  # r+1, r+1+W, ...
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
