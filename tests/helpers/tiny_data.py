"""Test data for the trainer: a tiny byte-level BPE tokenizer and token shards built from real text in ../shared.

    python tests/helpers/tiny_data.py --out /tmp/tiny    # tokenizer + train/val shards for manual runs

The tokenizer is trained in-process by the project's exact BPE trainer (gptlab/bpe, GPT-4 split pattern) on a few
documents: a real tokenizer with a real `<|endoftext|>` id (not 50256), in well under a second.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
# ../shared/data beside the checkout; GPTLAB_SHARED_DATA points elsewhere (a device machine gets only the repo)
SHARED_DATA = os.environ.get("GPTLAB_SHARED_DATA") or os.path.join(os.path.dirname(REPO), "shared", "data")


def train_tiny_bpe(texts, n_merges):
    """The project's exact BPE (gptlab/bpe) on texts with the GPT-4 split pattern → MergeResult (merges, ranks).

    Runs in this process: the C merge loop when it can be built, else the identical pure-Python loop."""
    from gptlab.tokenizer import native
    from gptlab.tokenizer.pretokenize import count_documents, to_bytes_table
    from gptlab.tokenizer.merges import train_merges_python
    from gptlab.tokenizer.format import PATTERNS

    word_counts = to_bytes_table(count_documents(texts, PATTERNS["gpt4"]))
    train = native.train_merges_native if native.available() else train_merges_python
    return train(word_counts, n_merges)


def save_tiny_tokenizer(path, texts, n_merges=256):
    """Train `n_merges` merges on texts and save the tokenizer at path (replacing it); <|endoftext|> = 256 + n_merges."""
    from gptlab.tokenizer.job import script_content
    from gptlab.tokenizer.format import EOT, PATTERNS, save_tokenizer

    result = train_tiny_bpe(texts, n_merges)
    with open(__file__) as f:
        script = f.read() + "\n" + script_content()
    return save_tokenizer(path, pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=result.merges,
                          mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: 256 + len(result.merges)},
                          metadata={"source": "tests/helpers/tiny_data.py", "merge_counts": result.counts},
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

    from gptlab.dataset.shards import write_shard
    from gptlab.tokenizer.format import load_tokenizer, ranks_sha256, read_tokenizer_file

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
        # a real gptlab shard manifest (the format download_fineweb.py writes), so check_manifest accepts it
        from gptlab.dataset import shards

        listed = [{"name": name, "split": name.split("_")[0], "tokens": shards.read_header(os.path.join(shard_dir,
                   name))[1], "bytes": os.path.getsize(os.path.join(shard_dir, name))}
                  for name in sorted(os.listdir(shard_dir)) if name.endswith(".bin")]
        shards.write_manifest(shard_dir, {
            "format": shards.MANIFEST_FORMAT, "format_version": 1, "dataset": "tiny", "source": {"kind": "local"},
            "seed": 0, "shuffle_buffer": 0, "shard_version": 1, "dtype": "uint16", "shard_size": None,
            "val_tokens": sum(s["tokens"] for s in listed if s["split"] == "val"), "rank": 0, "world_size": 1,
            "tokenizer": {"name": os.path.basename(tok_path)[:-4], "n_vocab": enc.n_vocab, "eot_id": enc.eot_token,
                          "ranks_sha256": ranks_sha256(read_tokenizer_file(tok_path)["mergeable_ranks"])},
            "shards": listed, "complete": True})
    return {"tokenizer": tok_path, "train": os.path.join(shard_dir, "train_*.bin"),
            "val": os.path.join(shard_dir, "val_*.bin"), "dir": shard_dir, "eot": enc.eot_token,
            "n_vocab": enc.n_vocab, "n_train_tokens": int(train_tokens.size)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--merges", type=int, default=256)
    info = make_dataset(parser.parse_args().out, parser.parse_args().merges)
    print(json.dumps(info, indent=2))
