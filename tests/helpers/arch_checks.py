"""Checks every architecture module (gpt2.py, llama.py) must pass, against the module's own full-sequence forward:
tests/unit/test_gpt2_module.py, test_llama_module.py."""
import torch


def random_tokens(seed, B, T, eot):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, eot, (B, T), generator=g)  # no <|endoftext|> unless a test puts one


def check_kv_cache_equals_the_full_forward(module, model, eot):
    """A prompt, then one token at a time through module.KVCache = the full forward of rows whose documents start
    mid-stream; the keys of finished documents are dropped."""
    x = random_tokens(3, 2, 26, eot)
    x[0, 0] = x[0, 9] = x[1, 15] = eot  # documents starting mid-stream, at other places in the two rows
    with torch.no_grad():
        full = model(x, model.attention_masks(x, eot, None))
        cache = module.KVCache(model, eot)
        pieces = [cache.forward(x[:, :5])]
        pieces += [cache.forward(x[:, t:t + 1]) for t in range(5, 26)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)
    assert cache.first == 9  # both rows are past their first document's keys: dropped


def check_a_packed_document_scores_as_it_does_alone(model, eot):
    first, second = random_tokens(4, 1, 9, eot), random_tokens(5, 1, 12, eot)
    first[0, 0] = second[0, 0] = eot
    packed = model.predict(torch.cat([first, second], dim=1), eot)
    torch.testing.assert_close(packed[:, 9:], model.predict(second, eot), rtol=0, atol=1e-5)
    torch.testing.assert_close(packed[:, :9], model.predict(first, eot), rtol=0, atol=1e-5)
