"""A new user's first hour, probed end to end (issue 25 review): a split shard job where a rank gets no document,
and offline use of a Hugging Face cache filled the way users fill it (`hf download REPO --include PATTERN`), for
both downloaders, against the stand-in Hub (tests/hub_standin.py)."""
import glob
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import FINEWEB_150, HELLASWAG_VAL, run_script
from helpers.tiny_data import read_docs, save_tiny_tokenizer
from hub_standin import hub_env, running_standin

from gptlab.dataset import shards
from gptlab.tokenizer.format import load_tokenizer

# sha256 of the upstream github.com/rowanz/hellaswag data/hellaswag_val.jsonl (published with the dataset's users,
# e.g. lm-eval and llm.c's hellaswag.py), not read from the product
UPSTREAM_SHA256 = "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588"


@pytest.fixture(scope="module")
def docs():
    return read_docs(FINEWEB_150)


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory, docs):
    return save_tiny_tokenizer(str(tmp_path_factory.mktemp("tok") / "audittok_v296_n20.pkl"), docs[:20], n_merges=40)


@pytest.fixture(scope="module")
def hub(docs):
    with running_standin(docs, HELLASWAG_VAL) as server:
        yield server


def decode(paths, tokenizer_path):
    """The documents held by shard files read in this order: split on <|endoftext|>, each piece decoded."""
    enc = load_tokenizer(tokenizer_path)
    tokens = np.concatenate([shards.read_shard(p) for p in paths]).astype(np.int64)
    starts = list(np.flatnonzero(tokens == enc.eot_token)) + [tokens.size]
    return [enc.decode_bytes(tokens[s + 1:e].tolist()).decode("utf-8") for s, e in zip(starts, starts[1:])]


# ------------------------------------------------------------------ a rank that gets no document
@pytest.mark.parametrize("texts, world_size", [(["only one document here"], 2),
                                               (["first document", "second document"], 3)])
def test_a_rank_with_no_document_finishes_and_the_folder_is_complete(tmp_path, tokenizer_path, texts, world_size):
    """Fewer documents than ranks: the last rank's share (every W-th document) is empty. It used to fail with
    "the input has no documents" (false: the input has them), exit 2 (failing a torchrun job) and leave no
    manifest part, so the folder stayed incomplete for every reader. Now every rank exits 0, the merged manifest
    is complete and the folder read in the documented order (rank 0's stream, then rank 1's, ...) is the
    documents, each once: with one document per rank here, that is the input's order."""
    inp = tmp_path / "tiny.jsonl"
    inp.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    for rank in reversed(range(world_size)):  # the empty rank first: it must not wait for, or need, the others
        proc = run_script(["download_fineweb.py", "--input", inp, "--tokenizer", tokenizer_path, "--out",
                           tmp_path / "o", "--num_shards", world_size, "--shard_size", 1000, "--val_tokens", 0,
                           "--shuffle_buffer", 0, "--world_size", world_size, "--rank", rank, "--quiet"])
        assert proc.returncode == 0, proc.stderr
        assert "error" not in proc.stderr
    out_dir = glob.glob(str(tmp_path / "o" / "local_tiny_*"))[0]
    manifest = shards.load_manifest(out_dir)
    assert manifest["complete"]
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, "train_*.bin")))
    assert names == [f"train_r{r:03d}_000001.bin" for r in range(len(texts))]
    assert decode([os.path.join(out_dir, n) for n in names], tokenizer_path) == texts


# ------------------------------------------------------------------ offline, from a cache `hf download` filled
def fill_cache(hub, hf_home, repo_id, pattern):
    """What `hf download REPO --repo-type dataset --include PATTERN` does: snapshot_download with allow_patterns
    (it also caches the repo's file listing, which is what made snapshot_download(local_files_only=True) refuse
    the partial snapshot later)."""
    code = ("from huggingface_hub import snapshot_download; "
            f"snapshot_download({repo_id!r}, repo_type='dataset', allow_patterns=[{pattern!r}])")
    proc = run_script(["-c", code], env_extra=hub_env(hub, hf_home))
    assert proc.returncode == 0, proc.stderr


def test_hellaswag_offline_reads_a_partial_cache(hub, tmp_path):
    """HF_HUB_OFFLINE=1 with the validation parquet in the cache (fetched alone, as `hf download Rowan/hellaswag
    --include 'data/validation*'` does) writes the verified file; it used to say the copy was not in the cache."""
    fill_cache(hub, tmp_path / "hf", "Rowan/hellaswag", "data/validation*")
    out = tmp_path / "hs" / "hellaswag_val.jsonl"
    proc = run_script(["download_hellaswag.py", "--out", out, "--quiet"],
                      env_extra=hub_env(hub, tmp_path / "hf", HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9"))
    assert proc.returncode == 0, proc.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == UPSTREAM_SHA256


def test_fineweb_offline_reads_the_cache_in_the_streamed_order(hub, tmp_path, tokenizer_path):
    """HF_HUB_OFFLINE=1 with the sample's files in the cache: download_fineweb.py reads them and writes the very
    shards the online stream gave (same seed, same world size: byte for byte); it used to refuse outright and
    point at --input only. With nothing cached, the error names the cache and the `hf download` line to fill it."""
    fill_cache(hub, tmp_path / "hf", "HuggingFaceFW/fineweb-edu", "sample/10BT/*")
    common = ["download_fineweb.py", "--tokenizer", tokenizer_path, "--num_shards", 4, "--shard_size", 20_000,
              "--val_tokens", 5_000, "--workers", 1, "--world_size", 2, "--quiet"]
    offline_env = hub_env(hub, tmp_path / "hf", HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    jobs = [(common + ["--rank", rank, "--out", tmp_path / "online"], hub_env(hub, tmp_path / "hf"))
            for rank in (0, 1)]
    jobs += [(common + ["--rank", rank, "--out", tmp_path / "offline"], offline_env) for rank in (0, 1)]
    jobs.append((common + ["--rank", 0, "--out", tmp_path / "none"],
                 hub_env(hub, tmp_path / "empty-hf", HF_HUB_OFFLINE="1")))
    with ThreadPoolExecutor(2) as pool:  # independent processes, two at a time (2 cores)
        *done, empty = pool.map(lambda job: run_script(job[0], env_extra=job[1]), jobs)
    for proc in done:
        assert proc.returncode == 0, proc.stderr
    online_dir = tmp_path / "online" / "fineweb10Bedu_audittok_v296_n20"
    offline_dir = tmp_path / "offline" / "fineweb10Bedu_audittok_v296_n20"
    names = sorted(p.name for p in online_dir.glob("*.bin"))
    assert len(names) == 5 and sorted(p.name for p in offline_dir.glob("*.bin")) == names
    for name in names:
        assert (offline_dir / name).read_bytes() == (online_dir / name).read_bytes(), name
    assert shards.load_manifest(str(offline_dir))["complete"]

    assert empty.returncode == 2
    last = empty.stderr.strip().splitlines()[-1]
    assert last.startswith("error: offline mode is on") and str(tmp_path / "empty-hf") in last
    assert "hf download HuggingFaceFW/fineweb-edu --repo-type dataset --include 'sample/10BT/*'" in last
    assert "--input" in last
