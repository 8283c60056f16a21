"""The token shard format (one owner): llm.c / modded-nanogpt `.bin` files.

Header: 256 int32 little-endian. header[0] = 20240520 (magic), header[1] = version, header[2] = number of tokens.
  version 1: tokens are uint16 (vocabularies up to 65536 ids; readable by llm.c / modded-nanogpt unchanged)
  version 2: tokens are uint32 (larger vocabularies; a gptlab extension, same header otherwise)
Then the tokens, nothing else: file size == 1024 + ntok * itemsize.
"""
import os

import numpy as np

from gptlab.errors import UserError
from gptlab.fileio import atomic_write

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
        f.write(tokens.astype(dtype, copy=False).tobytes())
    return path


def read_header(path):
    """(version, ntok) after checking magic, version and file size; a broken shard is a UserError naming it."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(HEADER_BYTES), dtype="<i4")
    except OSError as err:
        raise UserError(f"cannot read shard {path}: {err}") from None
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


def read_shard(path, mmap=True):
    """Validated tokens of one shard as a read-only numpy array (memory-mapped by default)."""
    version, ntok = read_header(path)
    dtype = VERSION_DTYPES[version]
    if mmap:
        return np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(ntok,))
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        return np.frombuffer(f.read(), dtype=dtype)
