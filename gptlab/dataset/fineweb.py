"""FineWeb (or local text) → token shards: the pipeline behind download_fineweb.py.

Layout: <out>/<dataset>_<tokenizer stem>/ with val_000000.bin, train_000001.bin, ... (gptlab.dataset.shards format;
split jobs: train_r000_000001.bin, ..., see "Names and reading order") and a manifest. <dataset> is fineweb10B /
fineweb10Bedu / fineweb100B... for the Hub, `local_<stem of the first input>` for --input files.

Document order, Hub: each rank streams its own files of the dataset (text.sources.hub_share: a contiguous run of
whole files per rank, so no file is downloaded twice), shuffled within the rank by datasets' seeded shuffle (file
order and a buffer of --shuffle_buffer documents; 0 keeps the files' order). Local: the --input files in the order
given (a glob's matches sorted; a file named twice read once) go through the same idea here (`buffered_shuffle`),
then rank r takes every world_size-th document.

Token layout: every document is <|endoftext|> followed by its `encode_ordinary` tokens. The validation shard
(rank 0 only, skipped with --val_tokens 0) takes whole documents from the start of rank 0's stream until it
holds at least --val_tokens tokens; a document is never split between val and train. Train shards hold exactly
--shard_size tokens (the last one may be shorter when the stream ends); a document may continue from one train
shard into the next, as in llm.c / modded-nanogpt.

Names and reading order. One writer (--world_size 1): train_000001.bin, train_000002.bin, ... in stream order.
A split job of W ranks: rank r writes its share of --num_shards (a total over all ranks: num_shards // W each,
the first num_shards % W ranks one more), numbered from 1 in its own stream order as train_r{r:03d}_{k:06d}.bin
(shards.shard_filename), plus its own manifest part; a rank whose documents run out writes fewer, still without a
gap. So `sorted(glob("train_*.bin"))` (what llm.c / modded-nanogpt loaders read) is rank 0's train stream, then rank
1's, ...: concatenated, whole documents in that order, a document continuing only into its own rank's next shard
(each rank's last shard may end inside a document when --num_shards is reached, as a single writer's does).
val_000000.bin holds the first documents of rank 0's stream, before its first train shard. Why ranks in the names
and not one global numbering: each rank's count is known only when its stream ends, so a global numbering would
need the ranks to wait for each other (or a renaming pass after all finish); with the rank in the name every rank
writes final names at once, alone, and resumes alone. Older versions numbered split jobs across ranks (rank r:
train shards r+1, r+1+W, ...), which interleaved the streams in name order: resuming such a folder, or writing
beside shards of another layout that no manifest lists, is refused; --overwrite rewrites it.

Resuming: every shard is written to a temporary name and renamed when complete; the manifest part is rewritten
after each shard with the stream position (document index, token offset) where the shard starts and ends. A
re-run with the same settings checks the finished shards, skips past them in the stream (re-reading, not
re-tokenizing, the documents before that point) and continues with the same document order, so the result is
byte-identical to an uninterrupted run. A larger --num_shards extends a finished folder the same way.
--input files count as the same when their names and sizes match in order (not their folder), so a moved
or re-cloned checkout resumes too.
"""
import collections
import contextlib
import glob
import itertools
import json
import os
import random
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from gptlab.core.errors import UserError
from gptlab.core.files import check_folder_creatable, describe_holder, exclusive_lock
from gptlab.core.progress import progress_bar
from gptlab.dataset import shards as shard_format
from gptlab.text.sources import (HUB_DATASETS, ReadStats, expand_inputs, iter_hub_documents, iter_local_documents,
                                 take_every)
from gptlab.tokenizer.format import encoding_from_dict, eot_id, ranks_sha256, read_tokenizer_file

VERSIONS = {  # --version → (Hub repo, config)
    "10B": (HUB_DATASETS["fineweb"], "sample-10BT"),
    "100B": (HUB_DATASETS["fineweb"], "sample-100BT"),
    "350B": (HUB_DATASETS["fineweb"], "sample-350BT"),
    "10Bedu": (HUB_DATASETS["fineweb-edu"], "sample-10BT"),
    "100Bedu": (HUB_DATASETS["fineweb-edu"], "sample-100BT"),
    "350Bedu": (HUB_DATASETS["fineweb-edu"], "sample-350BT"),
}
CHUNK_CHARS = 256 * 1024  # text per tokenizer task: small enough that the threads finish together at the end


def hub_dataset_name(version):
    if version not in VERSIONS:
        raise UserError(f"--version {version!r} is unknown; choose one of {', '.join(VERSIONS)}")
    return f"fineweb{version}"


def local_dataset_name(paths):
    """local_<stem of the first input> (characters other than letters, digits, '-', '_' and '.' become '_')."""
    stem = os.path.splitext(os.path.basename(paths[0]))[0]
    return "local_" + re.sub(r"[^A-Za-z0-9_.-]", "_", stem)


def buffered_shuffle(docs, seed, buffer_size):
    """A deterministic streaming shuffle: a buffer of `buffer_size` documents, a random one out per one in."""
    if buffer_size <= 1:
        yield from docs
        return
    rng = random.Random(seed)
    buffer = []
    for doc in docs:
        if len(buffer) < buffer_size:
            buffer.append(doc)
            continue
        i = rng.randrange(buffer_size)
        yield buffer[i]
        buffer[i] = doc
    rng.shuffle(buffer)
    yield from buffer


def encode_document(enc, text):
    """`enc.encode_ordinary(text)` as a uint32 array, without building a Python list (same ids: no special token
    is recognised). Lone surrogates (possible from JSON escapes) are replaced like encode_ordinary does."""
    try:
        return enc.encode_to_numpy(text, disallowed_special=())
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return enc.encode_to_numpy(text, disallowed_special=())


def encode_chunk(enc, docs, eot, dtype=np.uint32):
    """(tokens [sum(counts)] as `dtype` (the shard's: 2 bytes a token while they wait in memory), counts int64
    [len(docs)], utf-8 bytes): <|endoftext|> + tokens for each document."""
    eot_array = np.array([eot], dtype=np.uint32)
    pieces, counts, nbytes = [], np.empty(len(docs), dtype=np.int64), 0
    for i, doc in enumerate(docs):
        tokens = encode_document(enc, doc)
        pieces += (eot_array, tokens)
        counts[i] = tokens.size + 1
        nbytes += len(doc.encode("utf-8", "surrogatepass"))
    return np.concatenate(pieces).astype(dtype, copy=False), counts, nbytes


def iter_encoded_chunks(enc, docs, eot, workers, dtype=np.uint32, chunk_chars=CHUNK_CHARS):
    """Tokenize a document stream on `workers` threads (tiktoken releases the GIL), yielding encode_chunk results
    in stream order; the calling thread reads the next documents meanwhile."""
    docs = iter(docs)
    max_in_flight = 2 * workers + 1
    with ThreadPoolExecutor(workers, thread_name_prefix="tokenize") as pool:
        in_flight = collections.deque()
        exhausted = False
        try:
            while True:
                while not exhausted and len(in_flight) < max_in_flight:
                    chunk, chars = [], 0
                    for doc in docs:
                        chunk.append(doc)
                        chars += len(doc)
                        if chars >= chunk_chars:
                            break
                    if not chunk:
                        exhausted = True
                        break
                    in_flight.append(pool.submit(encode_chunk, enc, chunk, eot, dtype))
                if not in_flight:
                    return
                yield in_flight.popleft().result()
        finally:  # the consumer stopped early (enough shards) or failed: drop the queued work
            for future in in_flight:
                future.cancel()


class ShardWriter:
    """Turns tokenized chunks into this rank's val shard and train shards, recording stream positions."""

    def __init__(self, out_dir, manifest, plan, start, eot, dtype, shard_size, val_tokens, progress):
        self.out_dir, self.manifest, self.eot, self.dtype = out_dir, manifest, eot, dtype
        self.plan = collections.deque(plan)  # (split, file name) of the shards still to write, in order
        self.shard_size, self.val_tokens, self.progress = shard_size, val_tokens, progress
        self.doc, self.offset = start  # stream position of the next token: document index, token offset in it
        self.skip = start[1]  # tokens of the first document already in a finished shard
        self.shard_start = start
        self.pieces, self.filled = [], 0
        self.written = 0
        self.docs_seen = 0

    @property
    def done(self):
        return not self.plan

    def consume(self, tokens, counts):
        """Add one chunk (tokens of whole documents, except a resumed first one); returns True when all
        planned shards are written."""
        if self.skip:  # resume mid-document: drop the part already written
            tokens, counts = tokens[self.skip:], counts.copy()
            counts[0] -= self.skip
            self.skip = 0
        ends = np.cumsum(counts)
        first_offset = self.offset
        base_doc = self.doc
        self.docs_seen += len(counts)
        used = 0
        while used < tokens.size and self.plan:
            split, _ = self.plan[0]
            if split == "val":  # whole documents until val_tokens is reached
                need = self.val_tokens - self.filled
                k = int(np.searchsorted(ends, used + need, side="left"))  # document that reaches it
                take = int(ends[min(k, len(ends) - 1)]) - used
            else:
                take = min(self.shard_size - self.filled, tokens.size - used)
            self.pieces.append(tokens[used:used + take])
            self.filled += take
            used += take
            self.doc, self.offset = self._position(used, ends, counts, base_doc, first_offset)
            if self.filled >= (self.val_tokens if split == "val" else self.shard_size):
                self.flush()
        if self.progress is not None:
            self.progress.update(used)
        return self.done

    @staticmethod
    def _position(x, ends, counts, base_doc, first_offset):
        """Stream position of chunk-local token index x."""
        if x >= ends[-1]:
            return base_doc + len(ends), 0
        i = int(np.searchsorted(ends, x, side="right"))
        offset = x - int(ends[i] - counts[i])
        return base_doc + i, offset + (first_offset if i == 0 else 0)

    def flush(self):
        """Write the shard being filled (also a short last one) and record it in the manifest."""
        if not self.filled:
            return
        split, name = self.plan.popleft()
        path = os.path.join(self.out_dir, name)
        tokens = np.concatenate(self.pieces).astype(self.dtype, copy=False)
        try:  # our own shard name: a stale or half-written file there is replaced by the same content
            shard_format.write_shard(path, tokens, self.manifest["shard_version"], overwrite=True)
        except OSError as err:
            raise UserError(f"could not write shard {path}: {err.strerror or err}. Nothing half-written was "
                            "left; the finished shards are kept. Free space (or fix the folder) and re-run the "
                            "same command to continue") from None
        self.manifest["shards"].append({
            "name": name, "split": split, "tokens": int(tokens.size), "bytes": os.path.getsize(path),
            "sha256": shard_format.shard_sha256(path),  # a re-run checks the file against it
            "docs": int(np.count_nonzero(tokens == self.eot)),  # documents that start in this shard
            "start": list(self.shard_start), "end": [self.doc, self.offset],
        })
        save_manifest(self.out_dir, self.manifest)
        self.shard_start = (self.doc, self.offset)
        self.pieces, self.filled = [], 0
        self.written += 1


def save_manifest(out_dir, manifest):
    try:
        shard_format.write_manifest(out_dir, manifest)
    except OSError as err:
        raise UserError(f"could not write the manifest in {out_dir}: {err.strerror or err}. Free space and "
                        "re-run the same command to continue") from None


def train_share(rank, world_size, num_shards):
    """How many of the --num_shards train shards rank `rank` writes: an even split, the first num_shards % W ranks
    one more (the same counts as the older interleaved numbering r+1, r+1+W, ...)."""
    return num_shards // world_size + (rank < num_shards % world_size)


def owned_plan(rank, world_size, num_shards, val_tokens):
    """(split, file name) of every shard this rank writes, in writing (= stream) order."""
    plan = [("val", shard_format.shard_filename("val", 0))] if rank == 0 and val_tokens > 0 else []
    return plan + [("train", shard_format.shard_filename("train", k, rank, world_size))
                   for k in range(1, train_share(rank, world_size, num_shards) + 1)]


def owns(name, rank, world_size):
    """Whether `name` is this rank's to rewrite or remove: its own shards, and what no rank of this job writes
    (another layout's or a larger job's train shards) goes to rank 0 (one writer: everything)."""
    parsed = shard_format.parse_shard_name(name)
    if parsed is None:
        return False
    split, file_rank, _ = parsed
    if split == "val" or file_rank is None:
        return rank == 0
    return file_rank == rank or (rank == 0 and file_rank >= world_size)


def foreign_shards(out_dir, world_size):
    """Shard files in `out_dir` that no rank of a `world_size` job would write under these names: another
    layout's (an older version's split job, a single writer's in a split job's folder) or a larger job's."""
    foreign = []
    for path in sorted(glob.glob(os.path.join(out_dir, "*.bin"))):
        parsed = shard_format.parse_shard_name(os.path.basename(path))
        if parsed is None:
            continue
        split, file_rank, index = parsed
        ours = shard_format.shard_filename(split, index, file_rank or 0, world_size)
        if os.path.basename(path) != ours or (file_rank or 0) >= world_size:
            foreign.append(os.path.basename(path))
    return foreign


def remove_owned_files(out_dir, rank, world_size):
    """--overwrite: remove this rank's shards (of any earlier run) and manifest part. Rank 0 also removes the
    manifests no rank of this run would rewrite (another world size's) and those of an older version's layout
    (whose shards it removed), so the folder holds one run only."""
    for path in glob.glob(os.path.join(out_dir, "*.bin")) + glob.glob(os.path.join(out_dir, "*.bin.tmp.*")):
        if owns(os.path.basename(path).split(".tmp.")[0], rank, world_size):
            os.remove(path)
    this_run = {shard_format.manifest_filename(r, world_size) for r in range(world_size)}
    for path in glob.glob(os.path.join(out_dir, shard_format.MANIFEST_GLOB)):
        name = os.path.basename(path)
        if name == shard_format.manifest_filename(rank, world_size) or (rank == 0 and name not in this_run):
            os.remove(path)
        elif rank == 0 and shard_format.misnamed_shards(read_part(path)):  # read now: its rank may be rewriting it
            os.remove(path)


def read_part(path):
    """A manifest part, or {} when it is gone or unreadable (another rank replacing it)."""
    try:
        with open(path) as f:
            part = json.load(f)
    except (OSError, ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        return {}
    return part if isinstance(part, dict) else {}


def finished_prefix(out_dir, manifest):
    """The manifest's shards whose files are intact (header, size and, where the manifest has it, sha256), up to
    the first missing or broken one (rewritten after)."""
    good = []
    for shard in manifest["shards"]:
        path = os.path.join(out_dir, shard["name"])
        try:
            version, ntok = shard_format.read_header(path)
        except UserError as err:
            problem = str(err).split("; ")[0]  # its advice (delete it and re-run) is what happens now
            print(f"warning: {problem}; rewriting it and the shards after it", file=sys.stderr, flush=True)
            break
        if version != manifest["shard_version"] or ntok != shard["tokens"]:
            print(f"warning: {path} does not match the manifest; rewriting it and the shards after it",
                  file=sys.stderr, flush=True)
            break
        if shard.get("sha256") not in (None, shard_format.shard_sha256(path)):  # same size, other bytes
            print(f"warning: {path} does not match its checksum in the manifest (damaged); rewriting it and the "
                  "shards after it", file=sys.stderr, flush=True)
            break
        good.append(shard)
    return good


def make_shards(args):
    """Run the whole download/tokenize/write job for this rank (args: download_fineweb.py's flags, checked there);
    returns the manifest part."""
    tokenizer = read_tokenizer_file(args.tokenizer)
    enc = encoding_from_dict(tokenizer)
    eot = eot_id(tokenizer)
    stats = ReadStats()
    if args.input is not None:
        paths = expand_inputs(args.input)
        dataset = local_dataset_name(paths)
        source = {"kind": "local", "inputs": [{"path": os.path.abspath(p), "bytes": os.path.getsize(p)}
                                              for p in paths]}
    else:
        dataset = hub_dataset_name(args.version)
        repo_id, config = VERSIONS[args.version]
        source = {"kind": "hub", "repo_id": repo_id, "config": config}
    tokenizer_stem = tokenizer["name"]  # the file's stem; a converted tokenizer's source name
    out_dir = os.path.join(args.out, f"{dataset}_{tokenizer_stem}")
    check_folder_creatable(out_dir)
    # one writer per rank of a folder: a second one (another seed, say) would mix its shards with ours under one
    # manifest. The lock lives beside the folder, on its own filesystem (shard_folder_lock), so writers in two
    # containers or hosts sharing the volume exclude each other, and a start that fails leaves nothing in the
    # folder. The lock under $TMPDIR of earlier versions is taken too, for writers of those versions.
    what = f"shard folder {out_dir}" + (f" (rank {args.rank})" if args.world_size > 1 else "")
    legacy_lock = shard_format.legacy_writer_lock_path(out_dir, args.rank)
    with exclusive_lock(legacy_lock, what), shard_folder_lock(out_dir, args.rank, args.world_size):
        return _write_shards(args, tokenizer, enc, eot, dataset, source, stats, tokenizer_stem, out_dir)


@contextlib.contextmanager
def shard_folder_lock(out_dir, rank, world_size):
    """Hold rank `rank`'s writer lock of `out_dir` (beside it: writer_lock_path) and refuse, naming the holder,
    while another writer holds the same rank, or any rank of a job with another --world_size (a --world_size 1
    writer and rank 1 of 2 would write the same train shards). Ranks of one split job run side by side."""
    lock = shard_format.writer_lock_path(out_dir, rank)
    what = f"shard folder {out_dir}" + (f" (rank {rank})" if world_size > 1 else "")
    made = []  # the folders made to hold the lock: removed again if still empty (a failed start leaves nothing)
    parent = os.path.dirname(lock)
    while not os.path.exists(parent):
        made.append(parent)
        parent = os.path.dirname(parent)
    try:
        with _lock_and_check(lock, what, out_dir, rank, world_size):
            yield lock
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


@contextlib.contextmanager
def _lock_and_check(lock, what, out_dir, rank, world_size):
    with exclusive_lock(lock, what, holder_extra={"rank": rank, "world_size": world_size},
                        held_hint=shard_format.stale_lock_hint(lock)):
        # after taking ours, look at the other ranks' locks: of two writers racing, at least one sees the other
        for other, holder in shard_format.writer_locks(out_dir, legacy=False).items():
            if other == lock:
                continue
            if holder.get("world_size") != world_size:
                theirs = f"rank {holder.get('rank')} of a --world_size {holder.get('world_size')} job"
                raise UserError(f"shard folder {out_dir} is being written by {describe_holder(holder)}, {theirs}; "
                                f"this writer (rank {rank} of --world_size {world_size}) would write the same "
                                "shards. Wait for it to finish or stop it, or give every rank the same --world_size "
                                f"({shard_format.stale_lock_hint(other)})")
        yield lock


def _write_shards(args, tokenizer, enc, eot, dataset, source, stats, tokenizer_stem, out_dir):
    """make_shards, holding the folder's lock."""
    shard_version = shard_format.version_for_vocab(enc.n_vocab)
    dtype = shard_format.VERSION_DTYPES[shard_version]
    manifest = {
        "format": shard_format.MANIFEST_FORMAT, "format_version": 1,
        "dataset": dataset, "version": args.version if args.input is None else None, "source": source,
        "seed": args.seed, "shuffle_buffer": args.shuffle_buffer,
        "tokenizer": {"name": tokenizer_stem, "ranks_sha256": ranks_sha256(tokenizer["mergeable_ranks"]),
                      "n_vocab": enc.n_vocab, "eot_id": eot},
        "shard_version": shard_version, "dtype": dtype.name, "shard_size": args.shard_size,
        "val_tokens": args.val_tokens, "rank": args.rank, "world_size": args.world_size,
        "num_shards": args.num_shards, "shards": [], "complete": False, "exhausted": False,
        "stats": {},
    }
    rank, world_size = args.rank, args.world_size
    previous, old_part = resume_state(out_dir, manifest, rank, world_size, args.overwrite)
    done_names = {s["name"] for s in previous}
    plan = [p for p in owned_plan(rank, world_size, args.num_shards, args.val_tokens) if p[1] not in done_names]
    start = tuple(previous[-1]["end"]) if previous else (0, 0)
    manifest["shards"] = previous
    manifest["stats"] = dict(old_part.get("stats", {})) if previous else {}
    # the stream already ended after the last intact shard: nothing more can be written
    exhausted_before = bool(previous) and bool(old_part.get("exhausted")) and len(previous) == len(old_part["shards"])
    own_manifest = shard_format.manifest_filename(rank, world_size)
    for path in glob.glob(os.path.join(out_dir, "*.tmp.*")):  # half-written files of a killed run of this rank
        name = os.path.basename(path).split(".tmp.")[0]
        if owns(name, rank, world_size) or name == own_manifest:
            os.remove(path)
    if not plan or exhausted_before:
        manifest["complete"], manifest["exhausted"] = True, exhausted_before
        save_manifest(out_dir, manifest)
        print(f"{'rank %d: ' % rank if world_size > 1 else ''}nothing to do: {len(previous)} shard(s) already in "
              f"{out_dir}", file=sys.stderr, flush=True)
        return manifest, out_dir

    if args.input is not None:
        docs = iter_local_documents(args.input, stats)
        docs = take_every(buffered_shuffle(docs, args.seed, args.shuffle_buffer), rank, world_size)
    else:
        repo_id, config = VERSIONS[args.version]
        docs = iter_hub_documents(repo_id, config, args.seed, rank, world_size, shuffle_buffer=args.shuffle_buffer,
                                  stats=stats)
    docs = itertools.islice(docs, start[0], None)  # resume: re-read, but do not re-tokenize, what is done
    # open the stream before creating anything: an unreachable Hub or an empty input fails with nothing written
    first = next(docs, None)
    empty_share = first is None and not previous
    # local: stats counted every document read, the other ranks' too; the Hub: this rank's only
    if empty_share and (world_size == 1 or (args.input is not None and not stats.docs)):
        raise UserError(f"the input has no documents ({', '.join(stats.files) or 'empty stream'}); "
                        "pass files that hold text")
    if args.overwrite:  # only now: an input that fails at once (empty, unreadable, offline) destroys nothing
        remove_owned_files(out_dir, rank, world_size)
    os.makedirs(out_dir, exist_ok=True)
    if empty_share:
        # more ranks than documents: this rank's share is empty. Its part says so (complete, no shard), so the
        # folder is complete once the other ranks finish, instead of this rank failing the whole job
        manifest["complete"], manifest["exhausted"] = True, True
        manifest["stats"] = {"docs_read": 0, "text_bytes": 0, "replaced_utf8_docs": 0}
        save_manifest(out_dir, manifest)
        print(f"rank {rank}: note: no document falls to this rank ({stats.docs} document(s) read for "
              f"{world_size} ranks); it wrote no shard", file=sys.stderr, flush=True)
        return manifest, out_dir
    docs = itertools.chain([first] if first is not None else [], docs)
    if args.input is None:
        manifest["hub_files"] = list(stats.files)  # this rank's own files of the stream (not compared on resume)

    target = sum(args.val_tokens if split == "val" else args.shard_size for split, _ in plan)
    progress = None
    if rank == 0 and not args.quiet:
        progress = progress_bar(total=target, unit="tok", unit_scale=True, desc=f"shards → {out_dir}",
                                file=sys.stderr, smoothing=0.1)
    writer = ShardWriter(out_dir, manifest, plan, start, eot, dtype, args.shard_size, args.val_tokens, progress)
    t0, text_bytes = time.perf_counter(), 0
    with progress if progress is not None else contextlib.nullcontext():
        for tokens, counts, nbytes in iter_encoded_chunks(enc, docs, eot, args.workers, dtype):
            text_bytes += nbytes
            finished = writer.consume(tokens, counts)
            if progress is not None:
                elapsed = max(time.perf_counter() - t0, 1e-9)
                progress.set_postfix_str(f"{text_bytes / elapsed / 1e6:.1f} MB/s, "
                                         f"{writer.docs_seen / elapsed:.0f} docs/s", refresh=False)
            if finished:
                break
        else:
            writer.flush()  # the stream ended: a short last shard
            manifest["exhausted"] = True
    elapsed = time.perf_counter() - t0
    manifest["complete"] = True
    old = manifest["stats"]
    manifest["stats"] = {"docs_read": old.get("docs_read", 0) + writer.docs_seen,
                         "text_bytes": old.get("text_bytes", 0) + text_bytes,
                         "replaced_utf8_docs": old.get("replaced_utf8_docs", 0) + stats.replaced_docs}
    save_manifest(out_dir, manifest)
    train = [s for s in manifest["shards"] if s["split"] == "train"]
    if rank == 0 or world_size > 1:
        who = f"rank {rank}: " if world_size > 1 else ""
        print(f"{who}wrote {writer.written} shard(s) in {elapsed:.1f}s ({text_bytes / max(elapsed, 1e-9) / 1e6:.1f} "
              f"MB/s of text); {out_dir} now holds {len(manifest['shards'])} shard(s) of this writer, "
              f"{sum(s['tokens'] for s in manifest['shards']):,} tokens, "
              f"{sum(s['docs'] for s in manifest['shards']):,} documents; "
              f"{stats.replaced_docs} document(s) with invalid UTF-8 replaced", file=sys.stderr, flush=True)
        if manifest["exhausted"] and len(train) < len(owned_plan(rank, world_size, args.num_shards, 0)):
            print(f"{who}note: the input ran out after {len(train)} train shard(s)", file=sys.stderr, flush=True)
    if not train and manifest["exhausted"]:
        docs = sum(s["docs"] for s in manifest["shards"])
        tokens = sum(s["tokens"] for s in manifest["shards"])
        if docs <= 1:  # the validation shard takes whole documents, so no --val_tokens > 0 leaves one for training
            raise UserError(f"the input is {docs} document ({tokens:,} tokens), taken whole by the validation shard "
                            "(a document is never split between validation and training); add documents, or pass "
                            "--val_tokens 0 for no validation shard")
        raise UserError(f"the input held only {tokens:,} tokens in {docs:,} documents, all used by the validation "
                        f"shard (--val_tokens {args.val_tokens}); lower --val_tokens or add input")
    return manifest, out_dir


def resume_state(out_dir, planned, rank, world_size, overwrite):
    """(this rank's intact finished shards, its earlier manifest part) from an earlier run with the same settings
    ([], {} for a fresh start). Another run's shards in the folder are refused; with --overwrite, ([], {}) and
    the caller removes them (remove_owned_files) only once the input is known to hold text."""
    parts = shard_format.read_manifest_parts(out_dir)
    conflicts = {name: shard_format.settings_difference(part, planned) for name, part in parts.items()}
    conflicts = {name: diff for name, diff in conflicts.items() if diff}
    own_part = shard_format.manifest_filename(rank, world_size)
    unlisted = [os.path.basename(p) for p in glob.glob(os.path.join(out_dir, "*.bin"))
                if owns(os.path.basename(p), rank, world_size)]
    if not parts and unlisted and not overwrite:
        raise UserError(f"{out_dir} holds shards ({', '.join(sorted(unlisted)[:3])}...) but no manifest, so they "
                        "cannot be checked or resumed; pass --overwrite to rewrite them, or choose another --out")
    if conflicts and not overwrite:
        name, diff = next(iter(conflicts.items()))
        details = ", ".join(f"{key}: {shard_format.comparable_setting(parts[name], key)!r} → "
                            f"{shard_format.comparable_setting(planned, key)!r}" for key in diff)
        raise UserError(f"{out_dir} holds shards made with other settings ({name}: {details}); pass "
                        "--overwrite to replace them, or choose another --out")
    if overwrite:  # the caller removes this rank's files once the input has yielded a document
        return [], {}
    older = {name: shard_format.misnamed_shards(part) for name, part in parts.items()}
    older = {name: names for name, names in older.items() if names}
    if older:
        name, names = next(iter(older.items()))
        raise UserError(f"{out_dir} holds a split job's shards in an older version's layout ({name}: "
                        f"{', '.join(names[:3])}, ...), numbered across the ranks so that name order mixes their "
                        "documents; this version numbers each rank's own (train_r000_000001.bin, ...) and does not "
                        "mix the two. Pass --overwrite to every rank to rewrite the folder, or choose another --out")
    foreign = foreign_shards(out_dir, world_size)
    if foreign:
        raise UserError(f"{out_dir} holds shards that this job would not write ({', '.join(foreign[:3])}, ...: "
                        f"another layout's or world size's) and that its manifest does not list; name order would "
                        "mix them with this job's. Pass --overwrite to remove them, or choose another --out")
    if own_part not in parts:
        return [], {}
    return finished_prefix(out_dir, parts[own_part]), parts[own_part]
