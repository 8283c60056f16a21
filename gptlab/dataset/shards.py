"""The token shard format (one owner): llm.c / modded-nanogpt `.bin` files.

Header: 256 int32 little-endian. header[0] = 20240520 (magic), header[1] = version, header[2] = number of tokens.
  version 1: tokens are uint16 (vocabularies up to 65536 ids; readable by llm.c / modded-nanogpt unchanged)
  version 2: tokens are uint32 (larger vocabularies; a gptlab extension, same header otherwise)
Then the tokens, nothing else: file size == 1024 + ntok * itemsize.

A shard folder (written by download_fineweb.py) holds `val_000000.bin`, `train_000001.bin`, ... and a manifest:
`manifest.json` (one writer) or `manifest.rank{r}.json` (one per rank when --world_size > 1). `load_manifest(dir)`
merges them; `check_manifest(dir, tokenizer_sha256)` lets a trainer refuse shards made with another tokenizer.

Names and reading order (`shard_filename`): one writer names its train shards train_000001.bin, train_000002.bin,
...; a split job (W = --world_size > 1 ranks) names rank r's k-th train shard train_r{r:03d}_{k:06d}.bin (the rank
zero-padded to 3 digits, more when W > 1000), each rank numbering its own shards 1, 2, ... without a gap. So the
sorted names are the reading order: val_000000.bin (rank 0's first documents), then rank 0's train shards, then
rank 1's, ...; read in that order, the shards are every document of the stream once, each rank's in its stream
order, a document continuing only into the same rank's next shard. `load_manifest` lists the shards in this order.
Folders of older versions' split jobs (train_000001.bin of rank 0, train_000002.bin of rank 1, ...) interleave two
streams in name order; `load_manifest` still lists their shards in stream order (rank by rank, each part's own
order), and download_fineweb.py refuses to resume or extend them (--overwrite rewrites them).
"""
import glob
import hashlib
import json
import os
import re
import tempfile

import numpy as np

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write, atomic_write_text, describe_holder, lock_holder

MAGIC = 20240520
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
VERSION_DTYPES = {1: np.dtype("<u2"), 2: np.dtype("<u4")}


def version_for_vocab(n_vocab):
    """Shard version whose dtype holds ids 0..n_vocab-1."""
    if n_vocab <= 2**16:
        return 1
    if n_vocab <= 2**32:
        return 2
    raise UserError(f"a vocabulary of {n_vocab} ids does not fit the uint32 shard format; use a smaller one")


def write_shard(path, tokens, version=1, overwrite=False):
    """Write tokens (any integer array) atomically; ids that do not fit the version's dtype are a UserError."""
    dtype = VERSION_DTYPES[version]
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(dtype).max):
        raise UserError(f"token ids up to {int(tokens.max())} do not fit shard version {version} ({dtype.name}); "
                        "use version 2 (uint32) for vocabularies above 65536")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, version, tokens.size
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        f.write(header.tobytes())
        f.write(memoryview(np.ascontiguousarray(tokens.astype(dtype, copy=False))).cast("B"))
    return path


def shard_sha256(path):
    """sha256 of a shard file's bytes (header and tokens): the manifest records it, a re-run checks it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_header(path):
    """(version, ntok) after checking magic, version and file size; a broken shard is a UserError naming it."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = f.read(HEADER_BYTES)
    except PermissionError:
        raise UserError(f"shard {path} is not readable (permission denied); check its permissions (chmod a+r) or "
                        "point the shard flags at files you can read") from None
    except OSError as err:
        raise UserError(f"cannot read shard {path}: {err.strerror or err}; check the path and the disk") from None
    return check_header(header, size, path)


def check_header(header, size, path):
    """(version, ntok) of a shard whose first bytes are `header` and whose size is `size`, or a UserError."""
    header = np.frombuffer(header[:HEADER_BYTES], dtype="<i4")
    if header.size < HEADER_INTS:
        raise UserError(f"shard {path} is broken: {size} bytes is shorter than the {HEADER_BYTES}-byte header; "
                        "delete it and re-run download_fineweb.py to rewrite it")
    if header[0] != MAGIC:
        raise UserError(f"shard {path} is broken: magic {header[0]} != {MAGIC} (not a token shard)")
    version = int(header[1])
    if version not in VERSION_DTYPES:
        raise UserError(f"shard {path} has unsupported version {version} (known: 1 = uint16, 2 = uint32)")
    ntok = int(header[2])
    expected = HEADER_BYTES + ntok * VERSION_DTYPES[version].itemsize
    if ntok < 0 or size != expected:
        raise UserError(f"shard {path} is broken: header says {ntok} tokens ({expected} bytes) but the file has "
                        f"{size} bytes (truncated or overwritten); delete it and re-run download_fineweb.py")
    return version, ntok


def tokens_of_shard_bytes(data, path):
    """The tokens of a whole shard file held in memory (`data`, bytes), its header checked: a read-only array."""
    version, ntok = check_header(data, len(data), path)
    return np.frombuffer(data, dtype=VERSION_DTYPES[version], offset=HEADER_BYTES, count=ntok)


def read_shard(path, mmap=True):
    """Validated tokens of one shard as a read-only numpy array (memory-mapped by default)."""
    version, ntok = read_header(path)
    dtype = VERSION_DTYPES[version]
    if mmap:
        return np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(ntok,))
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        return np.frombuffer(f.read(), dtype=dtype)


# ------------------------------------------------------------------------------------------------ manifest
MANIFEST_FORMAT = "gptlab-shards"
MANIFEST_FILE = "manifest.json"
MANIFEST_GLOB = "manifest*.json"
# Settings every manifest part of one folder must agree on (a resumed run must match them too), compared by
# comparable_setting.
MANIFEST_SETTINGS = ("dataset", "source", "seed", "shuffle_buffer", "tokenizer", "shard_version", "dtype",
                     "shard_size", "val_tokens", "world_size")


SHARD_NAME_RE = re.compile(r"(val|train)(?:_r(\d+))?_(\d{6,})\.bin")  # split, rank (split jobs' train), index


def rank_digits(world_size):
    """Digits of the rank in a split job's train shard names: 3, or more for > 1000 ranks, so names sort by rank."""
    return max(3, len(str(world_size - 1)))


def shard_filename(split, index, rank=0, world_size=1):
    """'val', 0 → val_000000.bin; 'train', 3 → train_000003.bin (one writer); 'train', 3, rank 1, world size 2 →
    train_r001_000003.bin (rank 1's third train shard). Sorted names are the reading order (module docstring)."""
    if split == "train" and world_size > 1:
        return f"train_r{rank:0{rank_digits(world_size)}d}_{index:06d}.bin"
    return f"{split}_{index:06d}.bin"


def parse_shard_name(name):
    """(split, rank or None, index) of a shard file name shard_filename gives (or an older version's), else None."""
    m = SHARD_NAME_RE.fullmatch(name)
    if not m or (m.group(1) == "val" and m.group(2) is not None):
        return None
    return m.group(1), None if m.group(2) is None else int(m.group(2)), int(m.group(3))


def misnamed_shards(part):
    """Names in a manifest part that this version would not give its shards: an older version's split job
    (train_000002.bin of rank 1, ...: numbered across ranks, so name order interleaves their streams)."""
    world_size, rank = part.get("world_size", 1), part.get("rank", 0)
    misnamed = []
    for shard in part.get("shards", []):
        parsed = parse_shard_name(shard["name"])
        if parsed is None or shard["name"] != shard_filename(parsed[0], parsed[2], rank, world_size):
            misnamed.append(shard["name"])
    return misnamed


def manifest_filename(rank=0, world_size=1):
    return MANIFEST_FILE if world_size == 1 else f"manifest.rank{rank}.json"


def write_manifest(directory, manifest):
    """Atomically (re)write this writer's manifest part."""
    path = os.path.join(directory, manifest_filename(manifest["rank"], manifest["world_size"]))
    atomic_write_text(path, json.dumps(manifest, indent=1) + "\n", overwrite=True)
    return path


def read_manifest_parts(directory):
    """Every manifest part in `directory` as {file name: dict}; unreadable JSON is a UserError naming the file."""
    parts = {}
    for path in sorted(glob.glob(os.path.join(directory, MANIFEST_GLOB))):
        try:
            with open(path) as f:
                part = json.load(f)
        except (OSError, ValueError, RecursionError) as err:  # RecursionError: nested too deeply
            raise UserError(f"{path} is not a readable shard manifest ({err}); re-run download_fineweb.py with "
                            "--overwrite to rewrite the folder") from None
        if not isinstance(part, dict) or part.get("format") != MANIFEST_FORMAT:
            raise UserError(f"{path} is not a gptlab shard manifest; re-run download_fineweb.py with --overwrite")
        parts[os.path.basename(path)] = part
    return parts


def settings_of(manifest):
    return {key: manifest.get(key) for key in MANIFEST_SETTINGS}


def comparable_setting(manifest, key):
    """A setting as compared between runs. Local inputs compare by file name and size, in order (what decides the
    documents and their order); their absolute paths stay in the manifest for information only, so a moved or
    re-cloned checkout can still resume its shards."""
    value = manifest.get(key)
    if key == "source" and isinstance(value, dict) and isinstance(value.get("inputs"), list):
        inputs = [{"name": os.path.basename(str(i.get("path", ""))), "bytes": i.get("bytes")}
                  for i in value["inputs"]]
        return {"kind": value.get("kind"), "inputs": inputs}
    return value


def settings_difference(a, b):
    """Names of the settings where two manifests (or a manifest and a planned run) differ."""
    return [key for key in MANIFEST_SETTINGS if comparable_setting(a, key) != comparable_setting(b, key)]


def load_manifest(directory):
    """The folder's manifest, rank parts merged: the shared settings, `shards` (in reading order: rank 0's part,
    its validation shard first, then rank 1's, ..., each part's shards in stream order; for this version's names
    that is sorted name order. Each with name, split, tokens, docs, bytes, sha256 of the file), `complete` (every
    writer finished) and `parts` (manifest file names)."""
    if not os.path.isdir(directory):
        raise UserError(f"shard folder {directory} does not exist; create it with download_fineweb.py")
    parts = read_manifest_parts(directory)
    if not parts:
        raise UserError(f"{directory} has no {MANIFEST_FILE}; it was not written by download_fineweb.py "
                        "(or the run never finished a shard): re-run download_fineweb.py")
    names = sorted(parts)
    first = parts[names[0]]
    for name in names[1:]:
        diff = settings_difference(first, parts[name])
        if diff:
            raise UserError(f"{directory}: {names[0]} and {name} disagree on {', '.join(diff)} (shards of two "
                            "different runs); re-run download_fineweb.py with --overwrite")
    world_size = first.get("world_size", 1)
    expected = {manifest_filename(r, world_size) for r in range(world_size)}
    merged = settings_of(first)
    by_rank = sorted(parts.values(), key=lambda p: p.get("rank", 0))  # manifest.rank10 sorts before .rank2 by name
    merged["shards"] = [s for p in by_rank for s in sorted(p["shards"], key=stream_position)]
    merged["complete"] = set(parts) == expected and all(p.get("complete") for p in parts.values())
    merged["parts"] = names
    return merged


def stream_position(shard):
    """Sort key of a manifest part's shard: where it sits in its rank's stream (validation first, then by number)."""
    parsed = parse_shard_name(shard["name"])
    return (shard.get("split") != "val", parsed[2] if parsed else 0, shard["name"])


def check_manifest(directory, tokenizer_sha256=None, verify_files=True):
    """load_manifest + refuse shards made with another tokenizer (its ranks_sha256) + check each listed shard's
    header against the manifest. Returns the merged manifest."""
    manifest = load_manifest(directory)
    made_with = manifest["tokenizer"] or {}
    if tokenizer_sha256 is not None and made_with.get("ranks_sha256") != tokenizer_sha256:
        raise UserError(f"shards in {directory} were made with tokenizer {made_with.get('name')!r} "
                        f"(ranks sha256 {str(made_with.get('ranks_sha256'))[:12]}...), not with yours "
                        f"({tokenizer_sha256[:12]}...); use the same tokenizer, or re-run download_fineweb.py "
                        "with your tokenizer")
    if verify_files:
        for shard in manifest["shards"]:
            version, ntok = read_header(os.path.join(directory, shard["name"]))
            if version != manifest["shard_version"] or ntok != shard["tokens"]:
                raise UserError(f"shard {os.path.join(directory, shard['name'])} does not match its manifest "
                                f"(version {version}, {ntok} tokens; manifest: version {manifest['shard_version']}, "
                                f"{shard['tokens']} tokens); re-run download_fineweb.py to rewrite it")
    return manifest


# ------------------------------------------------------------------------------------------------ writer locks
def writer_lock_path(folder, rank):
    """The lock of rank `rank`'s writer (download_fineweb.py) of a shard folder: `.NAME.rank{r}.lock` beside the
    folder's real path, in its parent on the same filesystem, so it exists before the folder does, and every path
    to the folder (a symlink, the volume mounted in another container or host) names the same lock."""
    real = os.path.realpath(folder)
    return os.path.join(os.path.dirname(real), f".{os.path.basename(real)}.rank{rank}.lock")


def legacy_writer_lock_path(folder, rank):
    """Where writers of earlier versions locked a folder: under $TMPDIR, keyed by its real path (seen only by
    writers with the same $TMPDIR on the same machine; still taken, and still honoured)."""
    key = hashlib.sha256(os.path.realpath(folder).encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), "gptlab-locks", f"shards-{key}.rank{rank}.lock")


def writer_locks(folder, legacy=True):
    """{lock path: holder dict} of the writers holding a shard folder now (download_fineweb.py running on it, on
    any host sharing the volume), found by probing each rank's lock beside it (and under $TMPDIR)."""
    real = os.path.realpath(folder)
    patterns = [os.path.join(glob.escape(os.path.dirname(real)), f".{glob.escape(os.path.basename(real))}.rank*.lock")]
    if legacy:
        patterns.append(glob.escape(legacy_writer_lock_path(folder, 0)).replace(".rank0.lock", ".rank*.lock"))
    held = {}
    for path in (p for pattern in patterns for p in sorted(glob.glob(pattern))):
        holder = lock_holder(path)
        if holder is not None:
            held[path] = holder
    return held


def stale_lock_hint(lock):
    """What to do about a lock whose holder seems gone (said beside every refusal)."""
    return (f"its lock is {lock}; a killed writer frees it at once, so if the process named is gone and the lock "
            "stays held (a lost machine on a network filesystem), delete that file and re-run")


def check_no_writer(folder, flag="--train_files"):
    """Refuse a shard folder that download_fineweb.py is writing now: a run would read shards that are about to
    change (or not be there yet)."""
    for lock, holder in writer_locks(folder).items():
        raise UserError(f"{flag}: shard folder {folder} is being written by {describe_holder(holder)} "
                        "(download_fineweb.py); train once it has finished, since shards that change under a run "
                        f"would switch its data mid-run ({stale_lock_hint(lock)})")
