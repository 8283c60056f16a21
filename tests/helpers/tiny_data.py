"""Test data for the trainer: a tiny byte-level BPE tokenizer and token shards built from real text in ../shared.

    python tests/helpers/tiny_data.py --out /tmp/tiny    # tokenizer + train/val shards for manual runs

The BPE here is deliberately minimal (word-count merges, GPT-4 split pattern): enough to give the trainer a real
tokenizer with a real `<|endoftext|>` id (not 50256) without depending on train_tokenizer.py.
"""
import argparse
import collections
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def train_tiny_bpe(texts, n_merges):
    """Merges [(left_id, right_id), ...] learned from the word counts of texts (ids: 0-255 bytes, then 256+k)."""
    import regex

    from gptlab.tokenizer import PATTERNS

    pat = regex.compile(PATTERNS["gpt4"])
    word_counts = collections.Counter()
    for text in texts:
        word_counts.update(pat.findall(text))
    words = [[list(w.encode("utf-8")), c] for w, c in word_counts.items()]
    merges = []
    for k in range(n_merges):
        pairs = collections.Counter()
        for ids, c in words:
            for a, b in zip(ids, ids[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        new_id = 256 + k
        merges.append(best)
        for entry in words:
            ids, out, i = entry[0], [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            entry[0] = out
    return merges


def save_tiny_tokenizer(path, texts, n_merges=256):
    from gptlab.tokenizer import EOT, PATTERNS, save_tokenizer, token_bytes_by_id

    merges = train_tiny_bpe(texts, n_merges)
    vocab = token_bytes_by_id(merges)
    ranks = {b: i for i, b in enumerate(vocab)}
    with open(__file__) as f:
        script = f.read()
    return save_tokenizer(path, pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=merges, mergeable_ranks=ranks,
                          special_tokens={EOT: len(ranks)}, metadata={"source": "tests/helpers/tiny_data.py"},
                          script_content=script, overwrite=True)


def read_docs(path, limit=None):
    """Documents of a .jsonl ({"text": ...}) or a .txt (split into paragraphs at blank lines)."""
    docs = []
    if path.endswith(".jsonl"):
        with open(path) as f:
            for line in f:
                docs.append(json.loads(line)["text"])
    else:
        with open(path) as f:
            docs = [p.strip() + "\n" for p in f.read().split("\n\n") if p.strip()]
    return docs[:limit]


def encode_docs(encoding, docs):
    """Each document = <|endoftext|> + its tokens, concatenated."""
    import numpy as np

    eot = encoding.eot_token
    out = []
    for doc in docs:
        out.append(eot)
        out.extend(encoding.encode_ordinary(doc))
    return np.array(out, dtype=np.int64)


def make_dataset(out_dir, n_merges=256, train_shards=2, write_manifest=True):
    """tokenizer + train shards (FineWeb-Edu 150 docs) + a val shard (Tiny Shakespeare paragraphs) in out_dir.

    Returns dict(tokenizer=path, train=glob, val=glob, dir=shard dir, eot=id, n_vocab=...)."""
    import numpy as np

    from gptlab.shards import write_shard
    from gptlab.tokenizer import load_tokenizer, ranks_sha256, read_tokenizer_file

    os.makedirs(out_dir, exist_ok=True)
    fineweb = read_docs(os.path.join(SHARED_DATA, "fineweb_edu_150docs.jsonl"))
    shakespeare = read_docs(os.path.join(SHARED_DATA, "tinyshakespeare.txt"))
    tok_path = os.path.join(out_dir, f"tinybpe_v{256 + n_merges}_n150.pkl")
    save_tiny_tokenizer(tok_path, fineweb[:15] + shakespeare[:100], n_merges)
    enc = load_tokenizer(tok_path)
    shard_dir = os.path.join(out_dir, "shards")
    os.makedirs(shard_dir, exist_ok=True)
    train_tokens = encode_docs(enc, fineweb)
    for i, part in enumerate(np.array_split(train_tokens, train_shards)):
        write_shard(os.path.join(shard_dir, f"train_{i + 1:06d}.bin"), part, overwrite=True)
    write_shard(os.path.join(shard_dir, "val_000000.bin"), encode_docs(enc, shakespeare[:1500]), overwrite=True)
    if write_manifest:
        # the tokenizer record as download_fineweb.py writes it
        manifest = {"tokenizer": {"name": os.path.basename(tok_path)[:-4],
                                  "ranks_sha256": ranks_sha256(read_tokenizer_file(tok_path)["mergeable_ranks"])}}
        with open(os.path.join(shard_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f)
    return {"tokenizer": tok_path, "train": os.path.join(shard_dir, "train_*.bin"),
            "val": os.path.join(shard_dir, "val_*.bin"), "dir": shard_dir, "eot": enc.eot_token,
            "n_vocab": enc.n_vocab, "n_train_tokens": int(train_tokens.size)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--merges", type=int, default=256)
    info = make_dataset(parser.parse_args().out, parser.parse_args().merges)
    print(json.dumps(info, indent=2))
