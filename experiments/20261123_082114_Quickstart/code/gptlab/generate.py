"""Text from a model: sampled continuations of a few prompts (the samples that close a training log)."""

DEFAULT_PROMPTS = ["The", "Once upon a time,", "In this lesson we will learn"]


def sample_continuations(logits_fn, encoding, n_tokens, seed, device, prompts=DEFAULT_PROMPTS, temperature=0.8,
                         top_k=40):
    """[(prompt, text)]: each prompt continued by up to n_tokens sampled tokens (top-k, temperature), stopping at
    <|endoftext|>. logits_fn: LongTensor (B, T) → logits (B, T, V). Plain full forward passes: fine for a handful
    of short samples."""
    import torch
    import torch.nn.functional as F

    eot = encoding.eot_token
    gen = torch.Generator(device="cpu").manual_seed(seed)
    samples = []
    with torch.no_grad():
        for prompt in prompts:
            tokens = [eot] + encoding.encode_ordinary(prompt)
            for _ in range(n_tokens):
                logits = logits_fn(torch.tensor([tokens], device=device))[0, -1].cpu()
                logits = logits / temperature
                kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
                probs = F.softmax(logits.masked_fill(logits < kth, -float("inf")), dim=-1)
                next_id = int(torch.multinomial(probs, 1, generator=gen))
                if next_id == eot:
                    break
                tokens.append(next_id)
            samples.append((prompt, encoding.decode(tokens[1:])))
    return samples
