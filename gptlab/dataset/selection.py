"""A run's shards: the --train_files / --val_files patterns expanded, the default folder found by the
tokenizer's name, every shard checked against the tokenizer, and the data's fingerprint (what --resume checks).
"""
import glob
import hashlib
import os
from dataclasses import dataclass

import numpy as np

from gptlab.core.errors import UserError
from gptlab.dataset.shards import (HEADER_BYTES, MANIFEST_GLOB, VERSION_DTYPES, check_manifest, check_no_writer,
                                 read_header, read_manifest_parts, read_shard, tokens_of_shard_bytes)


def expand_shard_files(patterns, what="--train_files"):
    """Paths and globs (a string or a list of them) → list of shard paths, each header-validated."""
    paths = []
    for part in [patterns] if isinstance(patterns, str) else list(patterns):
        matches = sorted(glob.glob(part)) if glob.has_magic(part) else ([part] if os.path.exists(part) else [])
        if not matches:
            raise UserError(f"{what} {part!r} matches no shard file; create shards with download_fineweb.py "
                            "or point the flag at existing .bin files")
        paths.extend(m for m in matches if m not in paths)
    for path in paths:
        read_header(path)  # names the broken file before any training starts
    return paths


@dataclass
class RunShards:
    """The shards a training run reads, checked (see select_run_shards)."""
    train_files: list  # the globs/paths as given, or the default folder's
    val_files: list
    train_paths: list  # expanded, header-checked
    val_paths: list
    unfinished: list  # folders whose manifest says download_fineweb.py has not finished them
    train_sha256: str = None  # data_fingerprint of the train shards (a checkpoint records it; resume compares)
    val_sha256: str = None
    train_prints: list = None  # ShardPrint of each train/val path, taken at start: the loaders read through them
    val_prints: list = None

    @property
    def warnings(self):
        return [f"warning: the manifest in {folder} says download_fineweb.py has not finished writing it; training "
                "on the shards written so far" for folder in self.unfinished]


def select_run_shards(train_files, val_files, tokenizer_name, tokenizer_sha256, n_vocab, data_dir="data"):
    """Expand and check a run's shard flags before any training: without flags, the one folder
    data/*_<tokenizer name>/ that download_fineweb.py wrote; every file's header; train and validation disjoint;
    the manifests' tokenizer hash (or, for hand-made shards, token ids within the vocabulary)."""
    if not (train_files and val_files):
        folder = default_shard_folder(tokenizer_name, data_dir)
        train_files = train_files or [os.path.join(folder, "train_*.bin")]
        val_files = val_files or [os.path.join(folder, "val_*.bin")]
    train_paths = expand_shard_files(train_files, "--train_files")
    val_paths = expand_shard_files(val_files, "--val_files")
    for paths, flag in ((train_paths, "--train_files"), (val_paths, "--val_files")):
        for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
            check_no_writer(folder, flag)
    overlap = sorted(set(map(os.path.realpath, train_paths)) & set(map(os.path.realpath, val_paths)))
    if overlap:
        more = ", ..." if len(overlap) > 1 else ""
        raise UserError(f"--train_files and --val_files share {len(overlap)} shard(s) ({overlap[0]}{more}): the "
                        "model would be validated on text it trained on. Match only train_*.bin with --train_files "
                        "(e.g. 'data/<folder>/train_*.bin')")
    unfinished = (check_shards_match_tokenizer(train_paths, tokenizer_sha256, n_vocab, "--train_files")
                  + check_shards_match_tokenizer(val_paths, tokenizer_sha256, n_vocab, "--val_files"))
    def as_list(patterns):
        return [patterns] if isinstance(patterns, str) else list(patterns)
    train_prints, val_prints = shard_prints(train_paths), shard_prints(val_paths)
    return RunShards(as_list(train_files), as_list(val_files), train_paths, val_paths, sorted(set(unfinished)),
                     fingerprint_of(train_prints), fingerprint_of(val_prints), train_prints, val_prints)


def data_fingerprint(paths):
    """sha256 naming the data in `paths`, whatever folder it sits in: each shard's file name, token count and
    content digest (the sha256 its manifest records, else a hash of its first and last MiB). A folder rebuilt
    with another seed or other text gets another fingerprint."""
    return fingerprint_of(shard_prints(paths))


def fingerprint_of(prints):
    """data_fingerprint of ShardPrints taken at start."""
    digest = hashlib.sha256()
    for p in prints:
        digest.update(f"{os.path.basename(p.path)} {p.tokens} {p.sha256 or p.sample}\n".encode())
    return digest.hexdigest()


SAMPLE_BYTES = 1 << 20  # a shard without a manifest checksum is sampled: its first and last MiB


def sample_digest(head, tail):
    return hashlib.sha256(head + tail).hexdigest()


@dataclass
class ShardPrint:
    """What a shard was when the run started: where it really is (symlinks resolved, so a folder link flipped
    later does not switch the data), its size and token count, and its content digest: the sha256 its manifest
    records, else a hash of its first and last MiB plus the file's identity (device, inode, mtime). `read()`
    gives its tokens only if the file still is that."""
    path: str  # as the run names it
    real: str  # resolved at start
    size: int
    tokens: int
    sha256: str = None  # from the manifest
    sample: str = None  # without one: sha256 of the first and last MiB
    identity: tuple = None  # without one: (st_dev, st_ino, st_mtime_ns) at start
    seen_sha256: str = None  # without one: the full sha256 seen at the first read (later reads must match)

    def changed(self, what):
        return UserError(f"{self.path} changed since the run started ({what}); a shard folder must not be rebuilt "
                         "or replaced while a run trains on it (if it was not, the folder mixes the shards of two "
                         "writers: re-run download_fineweb.py on it, which rewrites what does not match its "
                         "manifest); restart the run, or --resume it with --allow_new_data, once the folder is final")

    def read(self):
        """The shard's tokens (a read-only numpy array in memory), read once and checked against the print as
        they are read: size, then the manifest's sha256 (or the sample and identity) of these very bytes."""
        try:
            with open(self.real, "rb") as f:
                stat = os.fstat(f.fileno())
                data = f.read(self.size + 1)
        except FileNotFoundError:
            raise self.changed(f"{self.real} is gone") from None
        except OSError as err:
            raise UserError(f"cannot read shard {self.path} ({err.strerror or err}); check the disk") from None
        if len(data) != self.size:
            raise self.changed(f"{len(data)} bytes, {self.size} at start")
        digest = hashlib.sha256(data).hexdigest()
        if self.sha256 is not None:
            if digest != self.sha256:
                raise self.changed(f"sha256 {digest[:16]}..., the manifest says {self.sha256[:16]}...")
        else:
            head, tail = data[:SAMPLE_BYTES], data[max(0, self.size - SAMPLE_BYTES):]
            if sample_digest(head, tail) != self.sample:
                raise self.changed("its first or last MiB differ")
            if self.identity is not None and (stat.st_dev, stat.st_ino, stat.st_mtime_ns) != self.identity:
                raise self.changed("the file was replaced or modified")
            if self.seen_sha256 not in (None, digest):
                raise self.changed(f"sha256 {digest[:16]}..., {self.seen_sha256[:16]}... when first read")
            self.seen_sha256 = digest
        return tokens_of_shard_bytes(data, self.path)


def shard_prints(paths):
    """ShardPrint of each path, now: the manifest's checksums where the folder has one (no second pass over the
    files), else each file's first and last MiB."""
    recorded = {}
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        if glob.glob(os.path.join(folder, MANIFEST_GLOB)):
            for part in read_manifest_parts(folder).values():
                recorded.update({(folder, s["name"]): s.get("sha256") for s in part.get("shards", [])})
    prints = []
    for path in paths:
        real = os.path.realpath(path)
        version, ntok = read_header(real)
        sha = recorded.get((os.path.dirname(os.path.abspath(path)), os.path.basename(path)))
        size = HEADER_BYTES + ntok * VERSION_DTYPES[version].itemsize  # read_header checked the file's size
        shard = ShardPrint(path, real, size, ntok, sha)
        if sha is None:
            with open(real, "rb") as f:
                stat = os.fstat(f.fileno())
                head = f.read(SAMPLE_BYTES)
                f.seek(max(0, size - SAMPLE_BYTES))
                shard.sample = sample_digest(head, f.read())
            shard.identity = (stat.st_dev, stat.st_ino, stat.st_mtime_ns)
        prints.append(shard)
    return prints


def default_shard_folder(tokenizer_name, data_dir="data"):
    """The single data_dir/*_<tokenizer name>/ folder written by download_fineweb.py, or a UserError."""
    dirs = sorted(d for d in glob.glob(os.path.join(data_dir, f"*_{tokenizer_name}")) if os.path.isdir(d))
    if len(dirs) > 1:  # the suffix also matches another tokenizer's folder (e.g. "a_qs" for "qs"): ask the manifests
        def made_with_this_tokenizer(folder):
            parts = read_manifest_parts(folder).values()
            return any(part.get("tokenizer", {}).get("name") == tokenizer_name for part in parts)
        dirs = [d for d in dirs if made_with_this_tokenizer(d)] or dirs
    if not dirs:
        raise UserError(f"no --train_files/--val_files given and no shard folder {data_dir}/*_{tokenizer_name}/ "
                        f"exists; create one with download_fineweb.py --tokenizer {tokenizer_name}, or pass "
                        "--train_files 'DIR/train_*.bin' --val_files 'DIR/val_*.bin'")
    if len(dirs) != 1:
        found = f"found {len(dirs)}: {', '.join(dirs)}"
        raise UserError(f"no --train_files/--val_files given and {data_dir}/*_{tokenizer_name}/ is ambiguous "
                        f"({found}); pass --train_files 'DIR/train_*.bin' --val_files 'DIR/val_*.bin' or run "
                        f"download_fineweb.py --tokenizer {tokenizer_name}")
    return dirs[0]


def check_shards_match_tokenizer(paths, tokenizer_sha256, n_vocab, flag):
    """Refuse shards made with another tokenizer, naming the folder or file; returns the folders whose manifest
    says the writer has not finished (still running, or killed) so the caller can warn.

    A folder written by download_fineweb.py has a manifest (manifest.json, or manifest.rank{r}.json parts from split
    jobs): gptlab.dataset.shards.check_manifest compares its tokenizer ranks_sha256 with ours and checks every listed shard's
    header. Hand-made shards without a manifest are still checked for token ids beyond the vocabulary."""
    unfinished = []
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        if not glob.glob(os.path.join(folder, MANIFEST_GLOB)):
            continue
        try:
            manifest = check_manifest(folder, tokenizer_sha256, verify_files=True)
        except UserError as err:
            raise UserError(f"{flag}: {err}") from None
        if not manifest["complete"]:
            unfinished.append(folder)
    for path in paths:
        head = np.asarray(read_shard(path)[: 1 << 20])
        if head.size and int(head.max()) >= n_vocab:
            raise UserError(f"shard {path} holds token id {int(head.max())} but the tokenizer has only {n_vocab} ids: "
                            "it was made with a different tokenizer; pass the right --tokenizer or re-tokenize")
    return unfinished


def shard_token_counts(paths):
    return [read_header(p)[1] for p in paths]
