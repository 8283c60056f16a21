"""A real (small) BPE tokenizer and a seeded tiny causal transformer, shared by the HellaSwag tests."""
import torch

from gptlab.tokenizer.format import EOT, PATTERNS, load_tokenizer, save_tokenizer, token_bytes_by_id

# a few merges on top of the 256 bytes: " t", "he", " the", "in", " a"
MERGES = [(32, 116), (104, 101), (256, 257), (105, 110), (32, 97)]
VOCAB_PADDING = 11  # the model has more output logits than the tokenizer has tokens, like a padded GPT vocab


def make_tokenizer(path):
    """Save a gptlab tokenizer pickle at `path` and load it back as a tiktoken.Encoding."""
    vocab = token_bytes_by_id(MERGES)
    save_tokenizer(path, pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=MERGES,
                   mergeable_ranks={token: i for i, token in enumerate(vocab)},
                   special_tokens={EOT: len(vocab)}, metadata={"purpose": "hellaswag tests"},
                   script_content="", overwrite=True)
    return load_tokenizer(path)


class TinyCausalLM(torch.nn.Module):
    """Embedding + learned positions → one causal self-attention block → logits (B, T, n_vocab + padding)."""

    def __init__(self, n_vocab, dim=32, max_len=1024, seed=1234):
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        n_out = n_vocab + VOCAB_PADDING
        self.tok = torch.nn.Embedding(n_out, dim)
        self.pos = torch.nn.Embedding(max_len, dim)
        self.attn = torch.nn.MultiheadAttention(dim, num_heads=4, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, n_out)
        with torch.no_grad():  # padded logits would win every softmax if the evaluator did not slice them off
            self.head.bias[n_vocab:] = 5.0
        torch.random.set_rng_state(generator_state)
        self.double().eval()  # float64: batched and one-at-a-time scores agree to ~1e-12, so no near-ties flip

    def forward(self, idx):  # idx (B, T) → logits (B, T, n_vocab + padding)
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool, device=idx.device), diagonal=1)
        x = x + self.attn(x, x, x, attn_mask=causal, need_weights=False)[0]
        x = x + self.mlp(x)
        return self.head(x)
