"""gptlab.export.generate (sample.py's sampler): the sampler's distribution worked out by hand, the KV cache against
train_gpt's full forward (logits at every position, and what each layer keeps), cached and uncached generation
giving the same tokens, and the streamed text. sample.py's command line: tests/e2e/test_sample_e2e.py."""
import math
import os
import sys

import pytest
import torch

from conftest import FINEWEB_150, REPO, SHARED_DATA
from helpers.sample_checkpoint import checkpoint  # noqa: F401 (a fixture)
from gptlab.export.generate import (TextStream, cached_next_logits, generate, next_token_probs, sample_next,
                             uncached_next_logits)

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
from gptlab.checkpoint import model_source  # noqa: E402

pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]


def document_tokens(encoding, n_docs, per_doc):
    """<|endoftext|> + the first per_doc tokens of each of the first n_docs bundled documents, concatenated."""
    import json

    with open(FINEWEB_150) as f:
        docs = [json.loads(line)["text"] for _, line in zip(range(n_docs), f)]
    return [t for doc in docs for t in [encoding.eot_token] + encoding.encode_ordinary(doc)[:per_doc]]


def test_sampling_distribution_follows_temperature_top_k_and_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    # temperature T: softmax(log p / T) = p^(1/T) / sum p^(1/T)
    powered = [p ** 0.5 for p in (0.5, 0.3, 0.15, 0.05)]
    expected = [p / sum(powered) for p in powered]
    assert torch.allclose(next_token_probs(logits, temperature=2.0), torch.tensor(expected), atol=1e-6)
    # top-k 2: the two largest, renormalised
    assert torch.allclose(next_token_probs(logits, top_k=2), torch.tensor([0.625, 0.375, 0, 0]), atol=1e-6)
    # top-p 0.7: 0.5 is short of 0.7, 0.5 + 0.3 reaches it, so the first two; top-p 0.85 needs the third too
    assert torch.allclose(next_token_probs(logits, top_p=0.7), torch.tensor([0.625, 0.375, 0, 0]), atol=1e-6)
    assert torch.allclose(next_token_probs(logits, top_p=0.85), torch.tensor([0.5, 0.3, 0.15, 0]) / 0.95, atol=1e-6)
    # top-p smaller than the largest probability keeps that one token
    assert torch.equal(next_token_probs(logits, top_p=0.1), torch.tensor([1.0, 0, 0, 0]))
    # a tie at exactly top_p: the first of two equal tokens already reaches 0.5, so it alone stays
    halves = torch.tensor([0.0, 0.0, -math.inf, -math.inf])
    assert torch.equal(next_token_probs(halves, top_p=0.5), torch.tensor([1.0, 0, 0, 0]))
    assert sample_next(logits, temperature=0) == 0  # greedy
    shuffled = logits[[2, 0, 3, 1]]  # the order of the vocabulary does not matter
    assert torch.allclose(next_token_probs(shuffled, top_p=0.7), torch.tensor([0, 0.625, 0, 0.375]), atol=1e-6)


def test_text_stream_holds_back_a_character_split_between_tokens():
    import tiktoken

    enc = tiktoken.Encoding("bytes", pat_str=r"[\s\S]", mergeable_ranks={bytes([i]): i for i in range(256)},
                            special_tokens={})
    tokens = list("é🌊a".encode())  # 2 + 4 + 1 byte tokens
    stream = TextStream(enc)
    pieces = [stream.add(t) for t in tokens] + [stream.flush()]
    assert pieces == ["", "é", "", "", "", "🌊", "a", ""]


def test_kv_cache_gives_the_full_forward_logits_and_keeps_only_what_attention_can_see(checkpoint):
    ckpt_path, _ = checkpoint
    logits_fn, enc, ckpt = model_source.checkpoint_logits_fn(ckpt_path)
    model, _, _ = model_source.load_model(ckpt_path)
    windows = model.final_windows()
    assert windows == (2, 1)
    eot = enc.eot_token
    tokens = document_tokens(enc, 4, 180)[:690]  # documents start at 0, 181, 362, 543
    tokens[600] = eot  # a one-token document at 600
    tokens[601] = eot  # and the last one from 601 to 689
    full = logits_fn(torch.tensor([tokens]))[0]
    cache = arch.KVCache(model, eot)
    # a long prompt, single tokens across the 128 boundaries and documents, a chunk across a boundary (250..299)
    chunks, start = [], 0
    for size in [200] + [1] * 50 + [50] + [1] * 390:
        chunks.append(tokens[start:start + size])
        start += size
    with torch.no_grad():
        cached = torch.cat([cache.forward(torch.tensor([chunk]))[0, :, :enc.n_vocab] for chunk in chunks])
    assert cached.shape == full.shape
    assert (cached - full).abs().max() < 1e-4
    assert full.std(dim=0).mean() > 0.1  # the logits depend on the context (a weak model would prove nothing)
    # after 690 tokens, the next one (690, in block 5) sees at most its own document (from 601) within its window:
    # blocks 4 and 5 (from 512) in a long layer, block 5 (from 640) in a short one
    kept = {kind: {layer.size for layer, w in zip(cache.layers, model.layer_window) if w == kind}
            for kind in ("long", "short")}
    assert kept == {"long": {690 - 601}, "short": {690 - 640}}


def test_cached_and_uncached_generation_give_the_same_tokens(checkpoint):
    ckpt_path, _ = checkpoint
    logits_fn, enc, ckpt = model_source.checkpoint_logits_fn(ckpt_path)
    model, _, _ = model_source.load_model(ckpt_path)
    prompt = document_tokens(enc, 2, 100)  # 202 tokens: past the short window (128) and across a document
    runs = {}
    for name in ("cached", "uncached"):
        if name == "cached":
            cache = arch.KVCache(model, enc.eot_token)
            next_logits = cached_next_logits(cache, n_vocab=enc.n_vocab)
        else:
            next_logits = uncached_next_logits(logits_fn)
        generator = torch.Generator().manual_seed(5)
        runs[name] = list(generate(next_logits, prompt, 120, temperature=1.0, top_k=200, top_p=0.95,
                                   generator=generator))
    assert len(runs["cached"]) == 120  # no stop token: up to position 322, across block 2's start (256)
    assert runs["cached"] == runs["uncached"]
    assert len(set(runs["cached"])) > 20  # sampled, not stuck on one token


def test_uncached_sampling_of_training_logs_is_unchanged():
    """sample_continuations (the training log's samples) draws as before the sampler was shared: top-k then
    temperature-scaled softmax and one generator for all prompts, checked here against that loop written out."""
    import tiktoken

    from gptlab.export.generate import sample_continuations

    enc = tiktoken.Encoding("bytes", pat_str=r"[\s\S]", mergeable_ranks={bytes([i]): i for i in range(256)},
                            special_tokens={"<|endoftext|>": 256})
    table = torch.randn(257, 257, generator=torch.Generator().manual_seed(0)) * 3

    def logits_fn(tokens):  # a bigram model
        return table[tokens]

    got = sample_continuations(logits_fn, enc, 20, seed=7, device="cpu", prompts=["ab", "c"], temperature=0.8,
                               top_k=40)
    gen = torch.Generator().manual_seed(7)
    expected = []
    for prompt in ["ab", "c"]:
        tokens = [256] + list(prompt.encode())
        for _ in range(20):
            logits = logits_fn(torch.tensor([tokens]))[0, -1] / 0.8
            kth = torch.topk(logits, 40).values[-1]
            probs = torch.softmax(logits.masked_fill(logits < kth, -math.inf), dim=-1)
            token = int(torch.multinomial(probs, 1, generator=gen))
            if token == 256:
                break
            tokens.append(token)
        expected.append((prompt, enc.decode(tokens[1:])))
    assert got == expected

