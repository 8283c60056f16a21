"""Text from a model: sampling (temperature, top-k, top-p), a generation loop that streams tokens, and a KV cache
for train_gpt's GPT that keeps, per layer, only the keys and values its sliding window and document can still see.

    cache = KVCache(model, windows, eot, train_gpt.document_window_mask_mod)
    for token in generate(cached_next_logits(cache), prompt_tokens, 200, generator=gen): ...

The uncached path (uncached_next_logits) runs a full forward over every token so far for each new one; both feed
the same sampler, so with the same seed they give the same tokens (tests/test_sample.py checks it).
"""
DEFAULT_PROMPTS = ["The", "Once upon a time,", "In this lesson we will learn"]


def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """The sampling distribution (V,) from last-position logits (V,): logits / temperature, only the top_k
    largest kept, softmax, then top-p (nucleus): only the most likely tokens whose probabilities, added in order,
    first reach top_p, renormalised."""
    import torch
    import torch.nn.functional as F

    logits = logits.float() / temperature
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
    import torch

    if temperature == 0:
        return int(torch.argmax(logits))
    return int(torch.multinomial(next_token_probs(logits, temperature, top_k, top_p), 1, generator=generator))


def generate(next_logits, prompt_tokens, max_tokens, *, temperature=1.0, top_k=None, top_p=None, generator=None,
             stop_token=None):
    """Yield up to max_tokens sampled token ids, one at a time (streaming), stopping after stop_token.

    next_logits(new_tokens: list of ids) → logits (V,) of the token after everything fed so far (see
    cached_next_logits, uncached_next_logits); the prompt is fed first, then each sampled token. generator: a CPU
    torch.Generator (its seed fixes the draws)."""
    import torch

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
    logits_fn: LongTensor (1, T) → logits (1, T, V) (train_gpt.make_logits_fn / checkpoint_logits_fn)."""
    import torch

    tokens = []

    def next_logits(new_tokens):
        tokens.extend(new_tokens)
        return logits_fn(torch.tensor([tokens], device=device))[0, -1]
    return next_logits


def cached_next_logits(cache, device="cpu", n_vocab=None):
    """next_logits for generate(): only the new tokens go through the cache's model (a KVCache); the logits are
    cut to the first n_vocab (the tokenizer's ids)."""
    import torch

    def next_logits(new_tokens):
        return cache.forward(torch.tensor([new_tokens], device=device))[0, -1, :n_vocab]
    return next_logits


class TextStream:
    """Token ids → text as they come (streaming), holding back the bytes of a character split between tokens: the
    pieces add up to encoding.decode(tokens)."""

    def __init__(self, encoding):
        import codecs

        self.encoding = encoding
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token):
        return self.decoder.decode(self.encoding.decode_single_token_bytes(token))

    def flush(self):
        return self.decoder.decode(b"", final=True)


class KVCache:
    """Keys and values of the tokens fed so far to train_gpt's GPT, one entry per layer (GPT.forward(idx, None,
    cache=cache) passes cache.layer(i) to block i's attention, which calls extend()).

    windows: the model's (long, short) window in 128-token blocks (train_gpt.checkpoint_windows); eot: the id that
    starts a new document; mask_mod_for: train_gpt.document_window_mask_mod, so the cache's masks follow the very
    rule training used (causal, same document, within the window's blocks). After each forward every layer drops
    the keys no later token can see: those before its window's first block and those of finished documents, so
    the keys and values stay within the window however long the generation runs (the document index of every
    position, 8 bytes a token, is kept whole: the mask rule reads it by position)."""

    def __init__(self, model, windows, eot, mask_mod_for, block_size=128):
        import torch

        self.model, self.eot, self.block_size = model, eot, block_size
        blocks = dict(zip(("long", "short"), windows))
        self.layers = [_LayerCache(self, torch.tensor(blocks[kind])) for kind in model.layer_window]
        self.mask_mod_for = mask_mod_for
        self.docs = None  # (B, positions so far): document index of every position (attention masks read it)
        self.start = 0  # position of the first token of the forward in progress
        self.end = 0  # one past its last token

    def layer(self, i):
        return self.layers[i]

    def forward(self, tokens):
        """tokens (B, T): the next tokens → the model's logits (B, T, padded vocab) at their positions."""
        import torch

        last_doc = self.docs[:, -1:] if self.docs is not None else tokens.new_zeros(tokens.size(0), 1)
        new_docs = last_doc + (tokens == self.eot).cumsum(dim=1)
        self.docs = new_docs if self.docs is None else torch.cat([self.docs, new_docs], dim=1)
        self.end = self.start + tokens.size(1)
        logits = self.model(tokens, None, cache=self)
        self.start = self.end
        # the first position of the last document of each row (a document starts at its <|endoftext|>)
        positions = torch.arange(self.end, device=tokens.device)
        doc_start = int(torch.where(self.docs == self.docs[:, -1:], positions, self.end).amin())
        for layer in self.layers:
            layer.drop_before(max(doc_start, (self.end // self.block_size - int(layer.window_blocks) + 1)
                                  * self.block_size))
        return logits


class _LayerCache:
    """One layer's keys and values of positions first, ..., the last one fed; held as (B, H, n, D), the layout
    attention reads (SDPA on CPU is many times slower on the transposed one)."""

    def __init__(self, cache, window_blocks):
        self.cache, self.window_blocks = cache, window_blocks
        self.k = self.v = None
        self.first = 0

    @property
    def start(self):  # the position of the first new token (rotary embeddings)
        return self.cache.start

    def extend(self, k, v):
        """Append the new tokens' k, v (B, T, H, D) → (all keys, all values as (B, n, H, D) views, their bool mask
        (B, 1, T, n))."""
        import torch

        k, v = k.transpose(1, 2), v.transpose(1, 2)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        cache, device = self.cache, k.device
        q_idx = torch.arange(cache.start, cache.end, device=device).view(1, 1, -1, 1)
        kv_idx = torch.arange(self.first, cache.end, device=device).view(1, 1, 1, -1)
        b = torch.arange(k.size(0), device=device).view(-1, 1, 1, 1)
        mask = cache.mask_mod_for(cache.docs, self.window_blocks)(b, None, q_idx, kv_idx)
        return self.k.transpose(1, 2), self.v.transpose(1, 2), mask

    @property
    def size(self):
        return 0 if self.k is None else self.k.size(2)

    def drop_before(self, position):
        if self.k is not None and position > self.first:
            self.k, self.v = self.k[:, :, position - self.first:], self.v[:, :, position - self.first:]
            self.first = position


def sample_continuations(logits_fn, encoding, n_tokens, seed, device, prompts=DEFAULT_PROMPTS, temperature=0.8,
                         top_k=40):
    """[(prompt, text)]: each prompt continued by up to n_tokens sampled tokens (top-k, temperature), stopping at
    <|endoftext|> (the samples that close a training log). logits_fn: LongTensor (B, T) → logits (B, T, V). Plain
    full forward passes: fine for a handful of short samples."""
    import torch

    eot = encoding.eot_token
    generator = torch.Generator(device="cpu").manual_seed(seed)  # one stream of draws for all the prompts
    samples = []
    for prompt in prompts:
        tokens = [eot] + encoding.encode_ordinary(prompt)
        new = [t for t in generate(uncached_next_logits(logits_fn, device), tokens, n_tokens, temperature=temperature,
                                   top_k=top_k, generator=generator, stop_token=eot) if t != eot]
        samples.append((prompt, encoding.decode(tokens[1:] + new)))
    return samples
