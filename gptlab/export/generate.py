"""Text from a model: sampling (temperature, top-k, top-p) and a generation loop that streams tokens. The KV cache
is the model's own (model.py's KVCache, from the checkpoint's source):

    cache = module.KVCache(model, eot)
    for token in generate(cached_next_logits(cache), prompt_tokens, 200, generator=gen): ...

The uncached path (uncached_next_logits) runs a full forward over every token so far for each new one; both feed
the same sampler, so with the same seed they give the same tokens (tests/unit/test_sample.py checks it).
"""
import codecs
import os

import torch
import torch.nn.functional as F

from gptlab.core.cli import chosen_threads

DEFAULT_PROMPTS = ["The", "Once upon a time,", "In this lesson we will learn"]


def generation_threads(flag, environ=os.environ):
    """The CPU threads torch should use for generation, or None to keep torch's own count. flag: a positive int
    (--threads N, it wins) or "auto": OMP_NUM_THREADS when set to a positive integer (torch read it at start-up),
    else 1. One token at a time is latency-bound: each step is a few small matrix products, and on a shared CPU a
    second thread that the first one waits for makes it slower (the quickstart model: 180-220 tokens/s on 1 thread
    against 14-28 on torch's default 2, on this project's busy 2-core machine; docs/using-a-model.md)."""
    return chosen_threads(flag, environ)


def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """The sampling distribution (V,) from last-position logits (V,): logits / temperature, only the top_k
    largest kept, softmax, then top-p (nucleus): only the most likely tokens whose probabilities, added in order,
    first reach top_p, renormalised. A temperature so small that logits / temperature overflows is taken as its
    limit: the distribution over the largest logits (greedy, ties shared), never nan."""
    logits = logits.float()
    scaled = logits / temperature
    finite = torch.isfinite(logits)
    if not torch.isfinite(scaled[finite]).all():  # tiny temperature: scale the gaps to the largest logit instead
        scaled = (logits - logits[finite].max()) / temperature
    logits = torch.where(finite, scaled, logits)  # a masked -inf stays -inf (an inf temperature would make nan)
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, -float("inf"))
    probs = F.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True, stable=True)  # ties: the lower id first
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # probability of the tokens ranked above
        sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)  # the most likely token always stays
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def sample_next(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    """One token id drawn from next_token_probs(...); temperature 0 is greedy (argmax)."""
    if temperature == 0:
        return int(torch.argmax(logits))
    return int(torch.multinomial(next_token_probs(logits, temperature, top_k, top_p), 1, generator=generator))


def generate(next_logits, prompt_tokens, max_tokens, *, temperature=1.0, top_k=None, top_p=None, generator=None,
             stop_token=None):
    """Yield up to max_tokens sampled token ids, one at a time (streaming), stopping after stop_token.

    next_logits(new_tokens: list of ids) → logits (V,) of the token after everything fed so far (see
    cached_next_logits, uncached_next_logits); the prompt is fed first, then each sampled token. generator: a CPU
    torch.Generator (its seed fixes the draws)."""
    new_tokens = list(prompt_tokens)
    with torch.no_grad():
        for _ in range(max_tokens):
            token = sample_next(next_logits(new_tokens).cpu(), temperature, top_k, top_p, generator)
            yield token
            if token == stop_token:
                return
            new_tokens = [token]


def uncached_next_logits(logits_fn, device="cpu"):
    """next_logits for generate(): a full forward pass over all the tokens so far, for every new token.
    logits_fn: LongTensor (1, T) → logits (1, T, V) (e.g. gptlab.checkpoint.model_source.checkpoint_logits_fn's)."""
    tokens = []

    def next_logits(new_tokens):
        tokens.extend(new_tokens)
        return logits_fn(torch.tensor([tokens], device=device))[0, -1]
    return next_logits


def cached_next_logits(cache, device="cpu", n_vocab=None):
    """next_logits for generate(): only the new tokens go through the cache's model (model.py's KVCache: its
    forward(tokens) returns their logits); the logits are cut to the first n_vocab (the tokenizer's ids)."""
    def next_logits(new_tokens):
        return cache.forward(torch.tensor([new_tokens], device=device))[0, -1, :n_vocab]
    return next_logits


class TextStream:
    """Token ids → text as they come (streaming), holding back the bytes of a character split between tokens: the
    pieces add up to encoding.decode(tokens)."""

    def __init__(self, encoding):
        self.encoding = encoding
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token):
        return self.decoder.decode(self.encoding.decode_single_token_bytes(token))

    def flush(self):
        return self.decoder.decode(b"", final=True)


def sample_continuations(logits_fn, encoding, n_tokens, seed, device, prompts=DEFAULT_PROMPTS, temperature=0.8,
                         top_k=40):
    """[(prompt, text)]: each prompt continued by up to n_tokens sampled tokens (top-k, temperature), stopping at
    <|endoftext|> (the samples that close a training log). logits_fn: LongTensor (B, T) → logits (B, T, V). Plain
    full forward passes: fine for a handful of short samples."""
    eot = encoding.eot_token
    generator = torch.Generator(device="cpu").manual_seed(seed)  # one stream of draws for all the prompts
    samples = []
    limit = getattr(logits_fn, "max_len", None)  # a model that reads no longer sequences (GPT-2's positions)
    for prompt in prompts:
        tokens = [eot] + encoding.encode_ordinary(prompt)
        budget = n_tokens if limit is None else min(n_tokens, max(0, limit - len(tokens)))
        new = [t for t in generate(uncached_next_logits(logits_fn, device), tokens, budget, temperature=temperature,
                                   top_k=top_k, generator=generator, stop_token=eot) if t != eot]
        samples.append((prompt, encoding.decode(tokens[1:] + new)))
    return samples
