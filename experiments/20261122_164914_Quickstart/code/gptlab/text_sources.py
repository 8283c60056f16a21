"""Where text comes from: local .txt / .jsonl / .parquet files, or FineWeb(-Edu) streamed from the Hub.

Every reader yields documents (str) one at a time, so inputs larger than memory are never held whole.
Bytes that are not valid UTF-8 are replaced (U+FFFD) and counted in `ReadStats`, never silently dropped.
"""
import glob
import json
import os
import sys
from dataclasses import dataclass, field

from gptlab.errors import UserError

DOC_SEPARATOR = "<|endoftext|>"  # separates documents inside a .txt file
LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
TXT_MAX_DOC_CHARS = 64 * 2**20  # a .txt "document" longer than this is yielded in pieces cut at line breaks
HUB_DATASETS = {"fineweb": "HuggingFaceFW/fineweb", "fineweb-edu": "HuggingFaceFW/fineweb-edu"}


@dataclass
class ReadStats:
    docs: int = 0
    chars: int = 0
    bytes_read: int = 0
    files: list = field(default_factory=list)
    replaced_docs: int = 0  # documents that held invalid UTF-8 (decoded with replacement)


def expand_inputs(patterns):
    """Paths and globs → sorted, de-duplicated existing files; anything missing or unsupported is a UserError."""
    if not patterns:
        raise UserError("no --input given")
    paths = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise UserError(f"--input {pattern!r} matches no file; check the path or glob")
        for path in matches:
            if not os.path.exists(path):
                raise UserError(f"--input {path!r} does not exist; check the path")
            if os.path.isdir(path):
                raise UserError(f"--input {path!r} is a directory; pass files or a glob such as {path}/*.jsonl")
            if not path.endswith(LOCAL_SUFFIXES):
                raise UserError(f"--input {path!r}: unsupported file type; use .txt, .jsonl (field 'text') "
                                "or .parquet (column 'text')")
            if not os.access(path, os.R_OK):
                raise UserError(f"--input {path!r} is not readable; check its permissions")
            if path not in paths:
                paths.append(path)
    return paths


def _decode(raw, stats, where):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.replaced_docs += 1
        if stats.replaced_docs <= 3:
            print(f"warning: {where} is not valid UTF-8; invalid bytes were replaced with U+FFFD",
                  file=sys.stderr, flush=True)
        return raw.decode("utf-8", errors="replace")


def _read_txt(path, stats, chunk_bytes=8 * 2**20):
    sep = DOC_SEPARATOR.encode()
    pending = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(chunk_bytes)
            stats.bytes_read += len(chunk)
            pending += chunk
            parts = pending.split(sep)
            pending = parts.pop() if chunk else b""
            if not chunk and not parts[-1]:  # an empty file, or a separator at the very end: no empty last document
                parts.pop()
            for part in parts:
                yield _decode(part, stats, f"a document in {path}")
            if not chunk:
                return
            while len(pending) > TXT_MAX_DOC_CHARS:  # one huge document: cut at a line break before a non-space
                cut = pending.rfind(b"\n", 0, TXT_MAX_DOC_CHARS)
                while cut > 0 and pending[cut + 1:cut + 2].isspace():
                    cut = pending.rfind(b"\n", 0, cut)
                if cut <= 0:
                    break
                yield _decode(pending[:cut + 1], stats, f"a document in {path}")
                pending = pending[cut + 1:]


def _read_jsonl(path, stats):
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            stats.bytes_read += len(raw)
            if not raw.strip():
                continue
            line = _decode(raw, stats, f"{path}:{lineno}")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{path}:{lineno} is not valid JSON ({err}); each line must be an object "
                                "with a 'text' field") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise UserError(f"{path}:{lineno} has no string field 'text'; each line must look like "
                                '{"text": "..."}')
            yield record["text"]


def _read_parquet(path, stats):
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as err:
        raise UserError(f"{path} is not a readable parquet file ({err})") from None
    if "text" not in pf.schema_arrow.names:
        raise UserError(f"{path} has no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
    for batch in pf.iter_batches(columns=["text"], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if text is not None:
                stats.bytes_read += len(text)
                yield text


def iter_local_documents(paths, stats=None):
    """Documents from local files in order (.txt split on <|endoftext|>, .jsonl field text, .parquet column text)."""
    stats = stats if stats is not None else ReadStats()
    readers = {".txt": _read_txt, ".jsonl": _read_jsonl, ".parquet": _read_parquet}
    for path in expand_inputs(paths):
        stats.files.append(path)
        reader = readers[os.path.splitext(path)[1]]
        try:
            for doc in reader(path, stats):
                stats.docs += 1
                stats.chars += len(doc)
                yield doc
        except OSError as err:
            raise UserError(f"cannot read {path}: {err}") from None


def check_hub_reachable(endpoint=None, timeout_s=5.0):
    """Fail in seconds, not after minutes of retries, when the Hub cannot be reached (offline machine)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint or os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s):
            return
    except OSError as err:
        raise UserError(f"cannot reach the HuggingFace Hub at {url.hostname} ({err}). Offline? Pass local files "
                        "with --input PATH [PATH ...] (.txt, .jsonl or .parquet)") from None


def iter_hub_documents(repo_id, config, seed, rank=0, world_size=1, shuffle_buffer=10_000, stats=None):
    """Stream a Hub dataset's 'text' column with `datasets` (no full download), shuffled with `seed`, this rank's
    disjoint part of the stream only. No network → one clear UserError pointing at --input."""
    stats = stats if stats is not None else ReadStats()
    if os.environ.get("HF_HUB_OFFLINE") != "1":
        check_hub_reachable()
    try:
        from datasets import load_dataset
        from datasets.distributed import split_dataset_by_node

        stream = load_dataset(repo_id, name=config, split="train", streaming=True)
        stream = stream.shuffle(seed=seed, buffer_size=shuffle_buffer)
        if world_size > 1:
            stream = split_dataset_by_node(stream, rank=rank, world_size=world_size)
        stats.files.append(f"hf://{repo_id}/{config}")
        for record in stream:
            text = record["text"]
            stats.docs += 1
            stats.chars += len(text)
            stats.bytes_read += len(text)
            yield text
    except UserError:
        raise
    except Exception as err:
        raise UserError(f"could not stream {repo_id} ({config}) from the HuggingFace Hub "
                        f"({type(err).__name__}: {str(err)[:200]}). Offline? Pass local files with "
                        "--input PATH [PATH ...] (.txt, .jsonl or .parquet)") from None


def take_every(docs, rank, world_size):
    """Rank's disjoint share of a document stream: documents rank, rank+W, rank+2W, ..."""
    for i, doc in enumerate(docs):
        if i % world_size == rank:
            yield doc
