"""A run's shards: the --train_files / --val_files patterns expanded, the default folder found by the
tokenizer's name, every shard checked against the tokenizer, and the data's fingerprint (what --resume checks).
"""
import glob
import hashlib
import os
from dataclasses import dataclass

import numpy as np

from gptlab.core.errors import UserError
from gptlab.data.shards import MANIFEST_GLOB, check_manifest, read_header, read_manifest_parts, read_shard


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
    return RunShards(as_list(train_files), as_list(val_files), train_paths, val_paths, sorted(set(unfinished)),
                     data_fingerprint(train_paths), data_fingerprint(val_paths))


def data_fingerprint(paths):
    """sha256 naming the data in `paths`, whatever folder it sits in: each shard's file name, token count and
    content digest (the sha256 its manifest records, else a hash of its first and last MiB). A folder rebuilt
    with another seed or other text gets another fingerprint."""
    recorded = {}
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in paths}):
        if glob.glob(os.path.join(folder, MANIFEST_GLOB)):
            for part in read_manifest_parts(folder).values():
                recorded.update({(folder, s["name"]): s.get("sha256") for s in part.get("shards", [])})
    digest = hashlib.sha256()
    for path in paths:
        name = os.path.basename(path)
        content = recorded.get((os.path.dirname(os.path.abspath(path)), name))
        if content is None:
            with open(path, "rb") as f:
                head = f.read(1 << 20)
                f.seek(max(0, os.path.getsize(path) - (1 << 20)))
                content = hashlib.sha256(head + f.read()).hexdigest()
        digest.update(f"{name} {read_header(path)[1]} {content}\n".encode())
    return digest.hexdigest()


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
    jobs): gptlab.data.shards.check_manifest compares its tokenizer ranks_sha256 with ours and checks every listed shard's
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
