"""The Hub paths, end to end, against a stand-in Hub on 127.0.0.1 (tests/hub_standin.py).

The scripts run unchanged in subprocesses and reach the stand-in through HF_ENDPOINT (huggingface_hub and datasets
read it at import), an HTTP proxy variable, or GPTLAB_HELLASWAG_URL. Each process gets a fresh HF_HOME. Two
library settings keep the processes fast without changing what the product does: USE_TORCH=0 (datasets would
import torch, ~2 s, only to share an epoch counter with DataLoader workers) and tests/helpers/hub_run.py (no
5-second sleep in datasets when a shuffled stream closes).

Expectations are hand-computed: the stand-in lays the 150 real FineWeb-Edu documents of ../shared/data out in
order over 14 files for sample-10BT (11 documents in each of the first 10 files, 10 in the last 4), and the
per-rank file runs below are worked out by hand from "contiguous runs whose lengths differ by at most one".
"""
import collections
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import FINEWEB_150, HELLASWAG_VAL, REPO, free_port, run_script, script_env
from helpers import faults
from helpers.tiny_data import read_docs, save_tiny_tokenizer
from helpers.hellaswag_file import PUBLISHED_BYTES, PUBLISHED_SHA256
from hub_standin import (HELLASWAG_PATH, HELLASWAG_REPO, HELLASWAG_VALIDATION, HubStandin, hellaswag_repo, hub_env,
                         running_standin, split_evenly, standin_for_tests)

from gptlab.dataset import shards
from gptlab.dataset.hellaswag_file import HELLASWAG_SHA256, sha256_file
from gptlab.tokenizer.format import load_tokenizer, read_tokenizer_file

HUB_RUN = os.path.join(REPO, "tests", "helpers", "hub_run.py")
RANK_DOCS = os.path.join(REPO, "tests", "helpers", "hub_rank_docs.py")
EDU, FW = "HuggingFaceFW/fineweb-edu", "HuggingFaceFW/fineweb"
SAMPLE_FILES = [f"sample/10BT/{n:03d}_00000.parquet" for n in range(14)]
# file indices each rank reads, worked out by hand: 14 files in contiguous runs differing by at most one file
RANK_FILES = {2: [range(0, 7), range(7, 14)],
              3: [range(0, 5), range(5, 10), range(10, 14)],
              8: [range(0, 2), range(2, 4), range(4, 6), range(6, 8), range(8, 10), range(10, 12), range(12, 13),
                  range(13, 14)]}


@pytest.fixture(scope="module")
def docs():
    return read_docs(FINEWEB_150)


@pytest.fixture(scope="module")
def hub_server(docs):
    with running_standin(docs, HELLASWAG_VAL) as server:
        yield server


@pytest.fixture
def hub(hub_server):
    hub_server.clear_log()
    yield hub_server
    assert hub_server.unknown() == [], "the libraries asked the stand-in for something it does not serve"


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory, docs):
    return save_tiny_tokenizer(str(tmp_path_factory.mktemp("tok") / "hubtok_v296_n20.pkl"), docs[:20], n_merges=40)


@pytest.fixture(scope="module")
def local_reference_merges(tmp_path_factory):
    """The merges of the same 150 documents read from the local .jsonl: a table of counts does not depend on the
    order of the documents, so every Hub run that reads exactly these documents must give these merges."""
    out = tmp_path_factory.mktemp("localtok")
    run_script(["train_tokenizer.py", "--input", FINEWEB_150, "--samples", "10000000", "--vocabsize", "300",
                "--workers", "1", "--device", "cpu", "--name", "ref", "--out", str(out)], check=True)
    return read_tokenizer_file(str(out / "ref_v300_n10000000.pkl"))["merges"]


def start(hub, hf_home, args, torchrun=None, **env_changes):
    """Popen of `python tests/helpers/hub_run.py SCRIPT ARGS` (or a torchrun launch of it) wired to the stand-in."""
    env = script_env(dict(hub_env(hub, hf_home, **env_changes), USE_TORCH="0"))
    head = [sys.executable] + (["-m", "torch.distributed.run"] + torchrun if torchrun else [])
    return subprocess.Popen(head + [HUB_RUN] + [str(a) for a in args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(hub, hf_home, args, check=True, **kwargs):
    proc = finish(start(hub, hf_home, args, **kwargs))
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def sample_sizes(hub, repo):
    return {path: len(hub.repos[repo][path]) for path in SAMPLE_FILES}


def served(hub, origin=None):
    """{file: body bytes} of the parquet bytes the stand-in sent (to one process when `origin` is given)."""
    entries = [e for e in hub.entries() if origin is None or e["agent"].endswith(f"origin/{origin}")]
    return hub.bytes_by_file(entries)


def repo_paths(urls):
    """hf://datasets/org/name@commit/path → path"""
    return [url.split("@", 1)[1].split("/", 1)[1] for url in urls]


def file_docs(docs, indices):
    """The documents the stand-in put in sample-10BT files `indices`, in order."""
    per_file = split_evenly(docs, 14)
    return [doc for i in indices for doc in per_file[i]]


def decode_documents(paths, tokenizer_path):
    enc = load_tokenizer(tokenizer_path)
    tokens = np.concatenate([shards.read_shard(p) for p in paths]).astype(np.int64)
    starts = list(np.flatnonzero(tokens == enc.eot_token)) + [tokens.size]
    return [enc.decode_bytes(tokens[s + 1:e].tolist()).decode("utf-8") for s, e in zip(starts, starts[1:])]


def shard_paths(out_dir):
    """val first, then the train shards by number: the stream order of a single writer."""
    return sorted(glob.glob(os.path.join(out_dir, "val_*.bin"))) + \
        sorted(glob.glob(os.path.join(out_dir, "train_*.bin")))


def test_standin_layout_matches_the_hand_count(docs, hub_server):
    # 150 documents over 14 files: 150 = 10 * 11 + 4 * 10
    assert [len(part) for part in split_evenly(docs, 14)] == [11] * 10 + [10] * 4
    assert sorted(p for p in hub_server.repos[EDU] if p.startswith("sample/10BT/")) == SAMPLE_FILES


@pytest.mark.parametrize("world_size", [2, 8])
def test_each_rank_downloads_only_its_own_files(hub, docs, tmp_path, world_size):
    """The package function per rank, one process each, as W ranks (or W nodes) would run it."""
    procs = [start(hub, tmp_path / f"hf{rank}", [RANK_DOCS, EDU, "sample-10BT", 7, 100, world_size,
                                                 tmp_path / f"rank{rank}.json", rank],
                   HF_HUB_USER_AGENT_ORIGIN=f"rank{rank}")
             for rank in range(world_size)]
    results = [finish(p) for p in procs]
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    sizes = sample_sizes(hub, EDU)
    all_docs, read_bytes = [], 0
    for rank, files in enumerate(RANK_FILES[world_size]):
        with open(tmp_path / f"rank{rank}.json", encoding="utf-8") as f:
            got = json.load(f)[str(rank)]
        expected_names = [SAMPLE_FILES[i] for i in files]
        assert repo_paths(got["files"]) == expected_names
        assert sorted(got["docs"]) == sorted(file_docs(docs, files))  # its files' documents, shuffled in the rank
        # the server's log: this rank fetched its own files, each exactly once, and no other file
        assert served(hub, f"rank{rank}") == {name: sizes[name] for name in expected_names}
        all_docs += got["docs"]
        read_bytes += got["bytes_read"]
    assert collections.Counter(all_docs) == collections.Counter(docs)  # disjoint, and together the whole sample
    assert read_bytes == sum(len(doc.encode("utf-8")) for doc in docs) > sum(map(len, docs))  # bytes, not chars
    total = sum(served(hub).values())
    print(f"world size {world_size}: {total} parquet bytes served for {sum(sizes.values())} bytes of files "
          f"(ratio {total / sum(sizes.values()):.3f})")
    assert total <= 1.1 * sum(sizes.values())


def test_hub_share_by_hand():
    from gptlab.text.sources import hub_share

    # 14 files over 8 ranks: runs of 2, 2, 2, 2, 2, 2, 1, 1 files, each rank all the documents of its run
    assert [(s.first_file, s.file_count, s.row_offset, s.row_stride) for s in
            (hub_share(14, r, 8) for r in range(8))] == [(0, 2, 0, 1), (2, 2, 0, 1), (4, 2, 0, 1), (6, 2, 0, 1),
                                                         (8, 2, 0, 1), (10, 2, 0, 1), (12, 1, 0, 1), (13, 1, 0, 1)]
    # 5 ranks over 2 files: ranks 0-2 share file 0 (every 3rd document), ranks 3-4 share file 1 (every 2nd)
    assert [(s.first_file, s.file_count, s.row_offset, s.row_stride) for s in
            (hub_share(2, r, 5) for r in range(5))] == [(0, 1, 0, 3), (0, 1, 1, 3), (0, 1, 2, 3), (1, 1, 0, 2),
                                                        (1, 1, 1, 2)]
    assert hub_share(14, 0, 1) == hub_share(14, 0, 1) and hub_share(14, 0, 1).file_count == 14


def test_more_ranks_than_files_share_a_file_by_rows(hub, docs, tmp_path):
    # the stand-in's sample-100BT is one file holding the first 20 documents; 3 ranks share it, taking every 3rd
    plain = start(hub, tmp_path / "hf1", [RANK_DOCS, EDU, "sample-100BT", 0, 0, 3, tmp_path / "plain.json", 0, 1, 2])
    shuffled = start(hub, tmp_path / "hf2", [RANK_DOCS, EDU, "sample-100BT", 4, 8, 3, tmp_path / "shuf.json", 0, 1, 2])
    plain, shuffled = finish(plain), finish(shuffled)
    assert plain.returncode == 0 and shuffled.returncode == 0, plain.stderr[-2000:] + shuffled.stderr[-2000:]
    assert "has 1 files for 3 ranks" in plain.stderr
    with open(tmp_path / "plain.json", encoding="utf-8") as f:
        got = json.load(f)
    for rank in range(3):
        assert got[str(rank)]["docs"] == docs[:20][rank::3]
    # shuffled, the ranks still agree on the file's order, so their strides stay disjoint and complete
    with open(tmp_path / "shuf.json", encoding="utf-8") as f:
        by_rank = json.load(f)
    got = [by_rank[str(rank)]["docs"] for rank in range(3)]
    assert collections.Counter(got[0] + got[1] + got[2]) == collections.Counter(docs[:20])
    assert got[0] + got[1] + got[2] != docs[:20][0::3] + docs[:20][1::3] + docs[:20][2::3]


def test_local_parquet_bytes_read_counts_utf8_bytes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gptlab.text.sources import ReadStats, iter_local_documents

    pq.write_table(pa.table({"text": ["héllo", "日本"]}), str(tmp_path / "t.parquet"))
    stats = ReadStats()
    assert list(iter_local_documents([str(tmp_path / "t.parquet")], stats)) == ["héllo", "日本"]
    assert (stats.chars, stats.bytes_read) == (5 + 2, 6 + 6)  # é is 2 bytes, each CJK character 3


@pytest.mark.parametrize("dataset, repo", [("fineweb-edu", EDU), ("fineweb", FW)])
def test_train_tokenizer_streams_the_hub(hub, tmp_path, docs, local_reference_merges, dataset, repo):
    proc = run(hub, tmp_path / "hf", ["train_tokenizer.py", "--dataset", dataset, "--samples", 10_000_000,
                                      "--vocabsize", 300, "--workers", 1, "--device", "cpu", "--name", "hub",
                                      "--out", tmp_path])
    data = read_tokenizer_file(str(tmp_path / "hub_v300_n10000000.pkl"))
    meta = data["metadata"]
    assert meta["source"] == {"dataset": repo, "config": "sample-10BT", "seed": 0}
    assert meta["docs"] == 150 and meta["chars_used"] == sum(map(len, docs)) == 411_422
    assert data["merges"] == local_reference_merges  # exactly the 150 documents, each once
    assert served(hub) == sample_sizes(hub, repo)  # every file of the sample once, nothing else
    assert "MB/s" in proc.stderr and "docs/s" in proc.stderr  # the bar shows the download's rates


def test_torchrun_two_ranks_split_the_files(hub, tmp_path, docs, local_reference_merges):
    port = str(free_port())
    run(hub, tmp_path / "hf", ["train_tokenizer.py", "--dataset", "fineweb-edu", "--samples", 10_000_000,
                               "--vocabsize", 300, "--workers", 1, "--device", "cpu", "--name", "two", "--out", tmp_path],
        torchrun=["--nproc_per_node=2", "--master_port", port])
    meta = read_tokenizer_file(str(tmp_path / "two_v300_n10000000.pkl"))["metadata"]
    assert meta["world_size"] == 2 and meta["docs"] == 150 and meta["chars_used"] == sum(map(len, docs))
    assert read_tokenizer_file(str(tmp_path / "two_v300_n10000000.pkl"))["merges"] == local_reference_merges
    sizes = sample_sizes(hub, EDU)
    assert served(hub) == sizes, "a file was fetched by both ranks (or not at all)"


def test_download_fineweb_hub_killed_resumes_identical(hub, tmp_path, docs, tokenizer_path):
    # three runs with seed 5: uninterrupted; killed after 3 shards; resumed. The resumed folder (3 shards of the
    # killed run, the rest of the resumed one) equals the uninterrupted one byte for byte: same seed, same shards
    common = ["download_fineweb.py", "--quiet", "--version", "10Bedu", "--tokenizer", tokenizer_path,
              "--num_shards", 100, "--shard_size", 20_000, "--val_tokens", 10_000, "--seed", 5, "--workers", 1]
    run(hub, tmp_path / "hf1", common + ["--out", tmp_path / "ref"])
    stem = os.path.splitext(os.path.basename(tokenizer_path))[0]
    reference = os.path.join(str(tmp_path / "ref"), f"fineweb10Bedu_{stem}")
    crashed = run(hub, tmp_path / "hf2", common + ["--out", tmp_path / "run"], check=False,
                  **faults.env(die_after_shards=3))
    assert crashed.returncode == 1
    out_dir = os.path.join(str(tmp_path / "run"), os.path.basename(reference))
    assert len(glob.glob(os.path.join(out_dir, "*.bin"))) == 3
    run(hub, tmp_path / "hf3", common + ["--out", tmp_path / "run"])
    names = sorted(os.listdir(reference))
    assert sorted(os.listdir(out_dir)) == names and len([n for n in names if n.endswith(".bin")]) > 8
    for name in names:
        if name.endswith(".bin"):
            with open(os.path.join(out_dir, name), "rb") as a, open(os.path.join(reference, name), "rb") as b:
                assert a.read() == b.read(), name
    manifest = shards.check_manifest(out_dir)
    assert manifest["shards"] == shards.load_manifest(reference)["shards"]
    assert manifest["source"] == {"kind": "hub", "repo_id": EDU, "config": "sample-10BT"}
    got = decode_documents(shard_paths(reference), tokenizer_path)
    assert collections.Counter(got) == collections.Counter(docs) and got != docs  # all, once each, shuffled
    part = json.load(open(os.path.join(out_dir, "manifest.json")))
    assert repo_paths(part["hub_files"]) == SAMPLE_FILES


def test_download_fineweb_shuffle_buffer_0_keeps_the_stream_order(hub, tmp_path, docs, tokenizer_path):
    # HF_HUB_OFFLINE=false is not offline
    proc = run(hub, tmp_path / "hf", ["download_fineweb.py", "--version", "10B", "--tokenizer", tokenizer_path,
                                      "--num_shards", 100, "--shard_size", 30_000, "--val_tokens", 5_000,
                                      "--shuffle_buffer", 0, "--workers", 1, "--out", tmp_path],
               HF_HUB_OFFLINE="false")
    out_dir = glob.glob(os.path.join(str(tmp_path), "fineweb10B_*"))[0]
    assert decode_documents(shard_paths(out_dir), tokenizer_path) == docs  # file by file, row by row
    assert served(hub) == sample_sizes(hub, FW)
    assert "MB/s" in proc.stderr and "docs/s" in proc.stderr


def test_download_fineweb_split_jobs_over_three_ranks(hub, tmp_path, docs, tokenizer_path):
    common = ["download_fineweb.py", "--quiet", "--version", "10Bedu", "--tokenizer", tokenizer_path,
              "--num_shards", 60, "--shard_size", 10_000, "--val_tokens", 5_000, "--workers", 1, "--world_size", 3,
              "--out", tmp_path]
    procs = [start(hub, tmp_path / f"hf{rank}", common + ["--rank", rank], HF_HUB_USER_AGENT_ORIGIN=f"job{rank}")
             for rank in range(3)]
    results = [finish(p) for p in procs]
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    out_dir = glob.glob(os.path.join(str(tmp_path), "fineweb10Bedu_*"))[0]
    assert shards.check_manifest(out_dir)["complete"]
    sizes = sample_sizes(hub, EDU)
    all_docs = []
    for rank, files in enumerate(RANK_FILES[3]):
        part = json.load(open(os.path.join(out_dir, f"manifest.rank{rank}.json")))
        paths = [os.path.join(out_dir, s["name"]) for s in sorted(part["shards"], key=lambda s: s["name"])]
        rank_docs = decode_documents(paths[-1:] + paths[:-1] if rank == 0 else paths, tokenizer_path)
        assert sorted(rank_docs) == sorted(file_docs(docs, files))
        assert served(hub, f"job{rank}") == {SAMPLE_FILES[i]: sizes[SAMPLE_FILES[i]] for i in files}
        all_docs += rank_docs
    assert collections.Counter(all_docs) == collections.Counter(docs)
    total = sum(served(hub).values())
    print(f"world size 3 (download_fineweb): ratio {total / sum(sizes.values()):.3f}")
    assert total <= 1.1 * sum(sizes.values())


def test_every_offline_spelling_stops_at_once(hub, tmp_path):
    spellings = [("HF_HUB_OFFLINE", "1"), ("HF_HUB_OFFLINE", "true"), ("HF_HUB_OFFLINE", "YES"),
                 ("HF_HUB_OFFLINE", "On"), ("HF_DATASETS_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")]
    procs = [start(hub, tmp_path / f"hf{i}", ["train_tokenizer.py", "--dataset", "fineweb-edu", "--samples", 1000,
                                             "--vocabsize", 260, "--out", tmp_path / f"out{i}"], **{name: value})
             for i, (name, value) in enumerate(spellings)]
    for (name, value), proc in zip(spellings, map(finish, procs)):
        assert proc.returncode == 2 and f"offline mode is on ({name}={value})" in proc.stderr, proc.stderr[-2000:]
        assert "--input PATH" in proc.stderr and "Traceback" not in proc.stderr
        assert proc.stderr.count("error:") == 1 and "pre-tokenize" not in proc.stderr  # before any work
    assert hub.entries() == []  # nothing was asked of the network


def test_proxy_variable_is_honoured(hub, tmp_path, docs):
    # the endpoint's host does not resolve: only a client that goes through HTTP_PROXY can reach it
    proc = run(hub, tmp_path / "hf", ["train_tokenizer.py", "--dataset", "fineweb-edu", "--samples", 100_000,
                                      "--vocabsize", 260, "--workers", 1, "--device", "cpu", "--out", tmp_path],
               HF_ENDPOINT="http://hub.standin.invalid", HTTP_PROXY=hub.endpoint)
    entries = hub.entries()
    hosts = {e["path"].split("/")[2] for e in entries}  # proxy-form targets: http://host/path
    assert hosts == {"hub.standin.invalid", "datasets-server.hub.standin.invalid"}
    assert entries[0]["method"] == "HEAD" and entries[0]["path"].endswith("/README.md")  # the reachability check
    assert "wrote" in proc.stdout


# ---- HellaSwag: the Hub copy through huggingface_hub (HF_ENDPOINT, HF_HUB_OFFLINE, HF_HOME, proxies), GitHub after

HS_PARQUET = f"/datasets/{HELLASWAG_REPO}/resolve/main/{HELLASWAG_VALIDATION}"


def hellaswag_standin(**repo_changes):
    """A stand-in of its own (it can be stopped, or hold a changed copy) serving the Hub copy and the GitHub file."""
    with open(HELLASWAG_VAL, "rb") as f:
        data = f.read()
    return HubStandin({HELLASWAG_REPO: hellaswag_repo(data, **repo_changes)}, {HELLASWAG_PATH: data}).start()


def paths_asked(server):
    return [(e["method"], e["path"].split("?")[0]) for e in server.entries()]


def test_download_hellaswag_from_the_hub_copy_then_offline_from_its_cache(tmp_path):
    server = hellaswag_standin()
    try:
        out = tmp_path / "a" / "hellaswag_val.jsonl"
        proc = run(server, tmp_path / "hf", ["download_hellaswag.py", "--quiet", "--out", out])
        asked = paths_asked(server)
    finally:
        server.stop()
    assert sha256_file(out) == PUBLISHED_SHA256 and os.path.getsize(out) == PUBLISHED_BYTES
    assert ("GET", HS_PARQUET) in asked and not any(HELLASWAG_PATH in path for _, path in asked)  # no GitHub
    assert f"from hf://datasets/{HELLASWAG_REPO}@main/{HELLASWAG_VALIDATION} via {server.endpoint}" in proc.stdout
    assert "note:" not in proc.stderr
    # the server is gone: offline, the same HF_HOME serves the copy from its cache
    out = tmp_path / "b" / "hellaswag_val.jsonl"
    proc = run(server, tmp_path / "hf", ["download_hellaswag.py", "--quiet", "--out", out], HF_HUB_OFFLINE="1")
    assert sha256_file(out) == PUBLISHED_SHA256 and "(the HF cache; offline)" in proc.stdout


def test_a_hub_mirror_under_a_path_is_reached_through_hf_endpoint(tmp_path, docs, tokenizer_path):
    # HF_ENDPOINT=http://host:port/hub-mirror (a mirror behind a path; the second time with a trailing slash):
    # every request of datasets and huggingface_hub keeps the path (the stand-in answers nothing outside it), and
    # both downloads give what they give from the Hub's root
    with open(HELLASWAG_VAL, "rb") as f:
        server = standin_for_tests(docs, f.read(), prefix="/hub-mirror")
    try:
        assert server.endpoint.endswith("/hub-mirror")
        run(server, tmp_path / "hf", ["download_fineweb.py", "--quiet", "--version", "10B", "--tokenizer",
                                      tokenizer_path, "--num_shards", 100, "--shard_size", 30_000, "--val_tokens",
                                      5_000, "--shuffle_buffer", 0, "--workers", 1, "--out", tmp_path / "fw"])
        out_dir = glob.glob(os.path.join(str(tmp_path / "fw"), "fineweb10B_*"))[0]
        assert decode_documents(shard_paths(out_dir), tokenizer_path) == docs
        assert served(server) == sample_sizes(server, FW)
        assert server.unknown() == [], "a request of download_fineweb.py left the mirror's path"
        server.clear_log()
        out = tmp_path / "hs" / "hellaswag_val.jsonl"
        proc = run(server, tmp_path / "hf2", ["download_hellaswag.py", "--quiet", "--out", out],
                   HF_ENDPOINT=server.endpoint + "/")
        asked = paths_asked(server)
        unknown = server.unknown()
    finally:
        server.stop()
    assert unknown == [], "a request of download_hellaswag.py left the mirror's path"
    assert sha256_file(out) == PUBLISHED_SHA256
    assert ("GET", "/hub-mirror" + HS_PARQUET) in asked
    assert f"via {server.endpoint}" in proc.stdout


def test_download_hellaswag_offline_with_an_empty_cache_asks_nothing_and_names_the_way_out(hub, tmp_path):
    out = tmp_path / "o" / "hellaswag_val.jsonl"
    proc = run(hub, tmp_path / "empty_hf", ["download_hellaswag.py", "--out", out], check=False, HF_HUB_OFFLINE="1")
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1 and "Traceback" not in proc.stderr
    assert f"not in the HF cache ({tmp_path / 'empty_hf' / 'hub'})" in proc.stderr
    assert "--source data/sample/hellaswag_val.jsonl.gz" in proc.stderr and "unset HF_HUB_OFFLINE" in proc.stderr
    assert hub.entries() == [] and not out.parent.exists()  # no network at all, GitHub neither


def test_a_hub_copy_with_one_changed_ending_is_refused_and_github_is_used(tmp_path):
    server = hellaswag_standin(change_ending=(5, 2, "changed."))
    try:
        out = tmp_path / "hellaswag_val.jsonl"
        proc = run(server, tmp_path / "hf", ["download_hellaswag.py", "--quiet", "--out", out],
                   GPTLAB_HELLASWAG_URL=server.endpoint + HELLASWAG_PATH)
        asked = paths_asked(server)
    finally:
        server.stop()
    assert sha256_file(out) == PUBLISHED_SHA256
    assert asked.index(("GET", HS_PARQUET)) < asked.index(("GET", HELLASWAG_PATH))  # the Hub first, then GitHub's
    assert "do not rebuild the upstream file" in proc.stderr and proc.stderr.count("note:") == 1
    assert f"from {server.endpoint + HELLASWAG_PATH} (" in proc.stdout
    assert sorted(os.listdir(tmp_path)) == ["hellaswag_val.jsonl", "hf"]  # the refused copy left nothing behind


def test_download_hellaswag_missing_hub_repo_falls_back_to_the_url_override(hub, tmp_path):
    out = tmp_path / "direct" / "hellaswag_val.jsonl"
    proc = run(hub, tmp_path / "hf", ["download_hellaswag.py", "--quiet", "--out", out, "--hub_repo", "nobody/none"],
               GPTLAB_HELLASWAG_URL=hub.endpoint + HELLASWAG_PATH)
    assert sha256_file(out) == HELLASWAG_SHA256 and hub.endpoint + HELLASWAG_PATH in proc.stdout
    assert "nobody/none (main) cannot be used" in proc.stderr
    assert hub.bytes_by_file(suffix=".jsonl") == {HELLASWAG_PATH: os.path.getsize(HELLASWAG_VAL)}
    assert hub.bytes_by_file() == {}  # no parquet


def test_download_hellaswag_with_no_hub_copy_and_no_github_is_one_error_line(hub, tmp_path):
    # the note that the Hub copy cannot be used came first, then the error line (which says it again)
    out = tmp_path / "none" / "hellaswag_val.jsonl"
    proc = run(hub, tmp_path / "hf", ["download_hellaswag.py", "--quiet", "--out", out, "--hub_repo", "nobody/none"],
               check=False, GPTLAB_HELLASWAG_URL="http://127.0.0.1:9/hellaswag_val.jsonl")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot download HellaSwag: the Hub copy nobody/none (main) "
                                                   "cannot be used"), proc.stderr
    assert "and cannot download http://127.0.0.1:9/hellaswag_val.jsonl" in lines[0] and not out.exists()
    assert "\\n" not in lines[0]  # huggingface_hub's many-line error, on one line, not with \n shown


def test_download_hellaswag_through_the_standin_as_a_proxy(hub, tmp_path):
    # the endpoint's host does not resolve: only a client that goes through HTTP_PROXY can reach it
    out = tmp_path / "proxied" / "hellaswag_val.jsonl"
    proc = run(hub, tmp_path / "hf", ["download_hellaswag.py", "--quiet", "--out", out],
               HF_ENDPOINT="http://hub.standin.invalid", HTTP_PROXY=hub.endpoint)
    assert sha256_file(out) == PUBLISHED_SHA256 and "via http://hub.standin.invalid" in proc.stdout
    paths = [e["path"] for e in hub.entries()]
    assert "http://hub.standin.invalid" + HS_PARQUET in paths
    assert all(p.startswith("http://hub.standin.invalid/") for p in paths), paths


@pytest.mark.parametrize("script", ["download_hellaswag.py", "download_fineweb.py"])
def test_a_dead_proxy_is_named_without_its_password(hub, tmp_path, tokenizer_path, script):
    dead = free_port()  # nothing listens there
    args = [script, "--out", tmp_path / "o"] + (["--tokenizer", tokenizer_path] if script == "download_fineweb.py"
                                                else [])
    proc = run(hub, tmp_path / "hf", args, check=False, HF_ENDPOINT="http://hub.standin.invalid",
               HTTP_PROXY=f"http://alice:s3cret@127.0.0.1:{dead}", HTTPS_PROXY=f"http://alice:s3cret@127.0.0.1:{dead}")
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1 and "Traceback" not in proc.stderr, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert (f"cannot reach the HuggingFace Hub at http://hub.standin.invalid through the proxy "
            f"http://127.0.0.1:{dead} (HTTP_PROXY)") in error
    assert f"heck the proxy http://127.0.0.1:{dead}, or unset HTTP_PROXY" in error  # (C|c)heck
    assert ("--source data/sample/hellaswag_val.jsonl.gz" if script == "download_hellaswag.py" else "--input PATH") \
        in error
    assert "s3cret" not in proc.stderr and "alice" not in proc.stderr
    assert hub.entries() == [] and not (tmp_path / "o").exists()
