"""Where text comes from: local .txt / .jsonl / .parquet files, or FineWeb(-Edu) streamed from the Hub.

Every reader yields documents (str) one at a time, so inputs larger than memory are never held whole, and reads
in bounded pieces: a .txt file is read in 8 MiB chunks, and a "document" (text between two `<|endoftext|>`)
longer than MAX_DOC_BYTES is yielded in pieces cut at line breaks; one with no line break to cut at in that span
(a file of NUL bytes, minified text) is refused with an error naming the file, since cutting it elsewhere could
split a pre-token. A .jsonl line longer than MAX_DOC_BYTES is refused the same way. With `max_chars` the readers
stop after that many characters, even inside one document (`--samples` of a file with no separator).
Devices and sockets are refused as inputs (`/dev/zero` never ends); a named pipe (FIFO) is read as a file.
Bytes that are not valid UTF-8 are replaced (U+FFFD) and counted in `ReadStats`, never silently dropped; so are
lone surrogates of JSON text (`"\\ud800"`), which UTF-8 cannot encode.
"""
import contextlib
import glob
import itertools
import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field

from gptlab.core.errors import UserError, one_line

DOC_SEPARATOR = "<|endoftext|>"  # separates documents inside a .txt file
LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
MAX_DOC_BYTES = 64 * 2**20  # a .txt "document" longer than this is yielded in pieces cut at line breaks; a .jsonl
# line longer than this, or a .txt stretch this long with no line break, is refused (bounded memory)
TXT_MAX_DOC_CHARS = MAX_DOC_BYTES  # the former name
TXT_CHUNK_BYTES = 8 * 2**20
UTF8_BOM = b"\xef\xbb\xbf"  # skipped at the start of a .jsonl file (as pyarrow's JSON reader does)
MAX_UTF8_BYTES = 4  # bytes of one character at most (also of one U+FFFD replacement of invalid bytes)
STRING_TYPES = ("string", "large_string", "string_view", "null")  # parquet 'text' column types read as str
HUB_DATASETS = {"fineweb": "HuggingFaceFW/fineweb", "fineweb-edu": "HuggingFaceFW/fineweb-edu"}


@dataclass
class ReadStats:
    docs: int = 0
    chars: int = 0
    bytes_read: int = 0
    files: list = field(default_factory=list)
    replaced_docs: int = 0  # documents that held invalid UTF-8 (decoded with replacement)


def expand_inputs(patterns):
    """Paths and globs → existing files in the order given (a glob's matches sorted), each file once even when
    named twice (another spelling, a symlink); anything missing or unsupported is a UserError."""
    if not patterns:
        raise UserError("no --input given")
    paths, seen = [], set()
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise UserError(f"--input {pattern!r} matches no file; check the path or glob")
        for path in matches:
            if not os.path.exists(path):
                raise UserError(f"--input {path!r} does not exist; check the path")
            if os.path.isdir(path):
                raise UserError(f"--input {path!r} is a directory; pass files or a glob such as {path}/*.jsonl")
            kind = _device_kind(path)
            if kind:  # /dev/zero and /dev/urandom never end; a FIFO (a stream being written) is read, bounded
                raise UserError(f"--input {path!r} is {kind}, not a file of text; save the text to a .txt, .jsonl "
                                "or .parquet file (or stream it through a named pipe) and pass that")
            if not path.endswith(LOCAL_SUFFIXES):
                raise UserError(f"--input {path!r}: unsupported file type; use .txt, .jsonl (field 'text') "
                                "or .parquet (column 'text')")
            if not os.access(path, os.R_OK):
                raise UserError(f"--input {path!r} is not readable; check its permissions")
            info = os.stat(path)
            identity = (info.st_dev, info.st_ino)  # one file under two names (./a, a symlink)
            if identity not in seen:
                seen.add(identity)
                paths.append(path)
    return paths


def _device_kind(path):
    """'a character device' and the like for a path that is no file to read text from, else None."""
    mode = os.stat(path).st_mode
    for test, kind in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return None


def _too_long(path, where):
    return UserError(f"{path}: {where} is longer than {MAX_DOC_BYTES // 2**20} MiB with no line break to cut it "
                     "at (a file of NUL bytes, or not text at all?); separate documents with <|endoftext|> or "
                     "line breaks, or pass another file")


def _char_prefix(raw, n_chars):
    """Bytes at the start of `raw` that hold at least its first n_chars characters, cut at a character start."""
    end = min(len(raw), MAX_UTF8_BYTES * (n_chars + 1))
    for _ in range(MAX_UTF8_BYTES - 1):  # back off from inside a multi-byte character
        if end >= len(raw) or not 0x80 <= raw[end] < 0xC0:
            break
        end -= 1
    return raw[:end]


def _decode(raw, stats, where):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.replaced_docs += 1
        if stats.replaced_docs <= 3:
            print(f"warning: {where} is not valid UTF-8; invalid bytes were replaced with U+FFFD",
                  file=sys.stderr, flush=True)
        return raw.decode("utf-8", errors="replace")


def _read_txt(path, stats, max_chars=None, chunk_bytes=TXT_CHUNK_BYTES):
    """Documents of a .txt file (split on <|endoftext|>); with max_chars, stop once that many characters were
    yielded (the last document cut), reading no further than they need."""
    sep = DOC_SEPARATOR.encode()
    pending = b""
    used = 0
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
                doc = _decode(part, stats, f"a document in {path}")
                used += len(doc)
                yield doc
                if max_chars is not None and used >= max_chars:
                    return
            if not chunk:
                return
            if max_chars is not None and len(pending) >= MAX_UTF8_BYTES * (max_chars - used + 1) + len(sep):
                # enough of this document for the budget (and no separator can start inside the part we take)
                yield _decode(_char_prefix(pending, max_chars - used), stats, f"a document in {path}")
                return
            while len(pending) > MAX_DOC_BYTES:  # one huge document: cut at a line break before a non-space
                cut = pending.rfind(b"\n", 0, MAX_DOC_BYTES)
                while cut > 0 and pending[cut + 1:cut + 2].isspace():
                    cut = pending.rfind(b"\n", 0, cut)
                if cut <= 0:
                    raise _too_long(path, "a document")
                doc = _decode(pending[:cut + 1], stats, f"a document in {path}")
                pending = pending[cut + 1:]
                used += len(doc)
                yield doc
                if max_chars is not None and used >= max_chars:
                    return


def _read_jsonl(path, stats, max_chars=None):
    with open(path, "rb") as f:
        for lineno in itertools.count(1):
            raw = f.readline(MAX_DOC_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_DOC_BYTES:
                raise UserError(f"{path}:{lineno} is longer than {MAX_DOC_BYTES // 2**20} MiB (not JSON Lines text, "
                                "or one huge document); each line must be one {\"text\": ...} object")
            stats.bytes_read += len(raw)
            if lineno == 1 and raw.startswith(UTF8_BOM):  # a byte order mark, not text (RFC 8259: may be ignored)
                raw = raw[len(UTF8_BOM):]
            if not raw.strip():
                continue
            line = _decode(raw, stats, f"{path}:{lineno}")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{path}:{lineno} is not valid JSON ({err}); each line must be an object "
                                "with a 'text' field") from None
            except RecursionError:  # arrays or objects nested deeper than Python's stack
                raise UserError(f"{path}:{lineno} nests JSON arrays or objects too deeply to read (thousands of "
                                "levels); each line must be a flat object with a 'text' field") from None
            except ValueError as err:  # e.g. an integer of over 4300 digits (sys.int_info.default_max_str_digits)
                raise UserError(f"{path}:{lineno} holds a JSON value Python refuses to read ({one_line(err)[:200]});"
                                " remove that field or write it as a string") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise UserError(f"{path}:{lineno} has no string field 'text'; each line must look like "
                                '{"text": "..."}')
            text = record["text"]
            if b"\\u" in raw:  # only a \u escape can make a lone surrogate, which UTF-8 cannot encode
                text = _replace_surrogates(text, stats, f"{path}:{lineno}")
            yield text


def _replace_surrogates(text, stats, where):
    """Lone surrogates → U+FFFD (as tiktoken does when encoding), counted like invalid UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        stats.replaced_docs += 1
        if stats.replaced_docs <= 3:
            print(f"warning: {where} holds lone surrogates (\\ud800-\\udfff), which are not text; they were "
                  "replaced with U+FFFD", file=sys.stderr, flush=True)
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _read_parquet(path, stats, max_chars=None):
    import pyarrow as pa  # heavy (~0.1 s), as pyarrow.parquet: only for .parquet inputs
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as err:
        raise UserError(f"{path} is not a readable parquet file ({err})") from None
    if "text" not in pf.schema_arrow.names:
        raise UserError(f"{path} has no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
    column_type = pf.schema_arrow.field("text").type
    value_type = column_type.value_type if pa.types.is_dictionary(column_type) else column_type
    if str(value_type) not in STRING_TYPES:
        raise UserError(f"{path}: column 'text' holds {column_type} values, not strings; the text column must be "
                        "of type string")
    batches = pf.iter_batches(columns=["text"], batch_size=1024)
    for index in itertools.count():
        try:  # a damaged page or row group shows only when it is read
            batch = next(batches, None)
        except (pa.ArrowException, ValueError, OSError, RecursionError) as err:
            raise UserError(f"{path}: rows {index * 1024:,} on cannot be read ({type(err).__name__}: "
                            f"{one_line(err)[:200]}); the parquet file is damaged, rewrite it") from None
        if batch is None:
            return
        for text in batch.column(0).to_pylist():
            if text is not None:
                stats.bytes_read += len(text.encode("utf-8", "surrogatepass"))
                yield text


def iter_local_documents(paths, stats=None, max_chars=None):
    """Documents from local files in order (.txt split on <|endoftext|>, .jsonl field text, .parquet column text).

    With max_chars: the first max_chars characters of that stream (the last document cut), read no further than
    they need, even when one document is endless (a .txt with no separator)."""
    stats = stats if stats is not None else ReadStats()
    readers = {".txt": _read_txt, ".jsonl": _read_jsonl, ".parquet": _read_parquet}
    used = 0
    for path in expand_inputs(paths):
        if max_chars is not None and used >= max_chars:
            return
        stats.files.append(path)
        reader = readers[os.path.splitext(path)[1]]
        left = None if max_chars is None else max_chars - used
        try:
            for doc in reader(path, stats, left):
                if left is not None and len(doc) >= left:
                    doc = doc[:left]
                    stats.docs += 1
                    stats.chars += len(doc)
                    yield doc
                    return
                stats.docs += 1
                stats.chars += len(doc)
                used += len(doc)
                if left is not None:
                    left -= len(doc)
                yield doc
        except OSError as err:
            raise UserError(f"cannot read {path}: {err}") from None


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
INPUT_HINT = "Pass local files with --input PATH [PATH ...] (.txt, .jsonl or .parquet)"
_CREDENTIALS = re.compile(r"(?<=://)[^\s/]*@")  # the user:password@ of a URL (to its last @, for a raw @ in it)


def without_credentials(text):
    """`text` with the `user:password@` of every URL in it removed (a proxy URL may carry them)."""
    return _CREDENTIALS.sub("", str(text))


def proxy_in_use(url, all_proxy=True):
    """(proxy URL without credentials, the variable that set it) through which an HTTP client reaches `url`, or
    None. Read as the clients read it: urllib.request.getproxies() (the *_proxy variables, lowercase first), the
    URL's scheme, then ALL_PROXY (httpx, hence huggingface_hub; urllib ignores it: all_proxy=False), unless
    NO_PROXY names the host."""
    import urllib.parse  # with urllib.request: only when a network error is worded
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    for scheme in (parts.scheme.lower(), "all") if all_proxy else (parts.scheme.lower(),):
        proxy = proxies.get(scheme)
        if proxy:
            break
    else:
        return None
    if urllib.request.proxy_bypass_environment(parts.netloc.rsplit("@", 1)[-1], proxies):
        return None
    names = [n for n in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY") if os.environ.get(n) == proxy]
    shown = proxy if "://" in proxy else f"http://{proxy}"  # as httpx reads host:port
    return without_credentials(shown), (names[0] if names else f"{scheme.upper()}_PROXY")


def reaching(url, all_proxy=True):
    """' through the proxy P (VARIABLE)' when one is in use for `url`, else ''."""
    proxy = proxy_in_use(url, all_proxy)
    return f" through the proxy {proxy[0]} ({proxy[1]})" if proxy else ""


def proxy_hint(hub_urls=(), urllib_urls=()):
    """The way out of a network failure on these URLs (the first fetched by huggingface_hub's client, the others
    by urllib, which ignores ALL_PROXY): check the proxies in use, or set one (or a Hub mirror)."""
    found = [proxy_in_use(u) for u in hub_urls] + [proxy_in_use(u, all_proxy=False) for u in urllib_urls]
    found = [f for f in found if f]
    if found:
        proxies = " and ".join(dict.fromkeys(f[0] for f in found))
        variables = " and ".join(dict.fromkeys(f[1] for f in found))
        return f"check the proxy {proxies}, or unset {variables} (or list the host in NO_PROXY) to connect directly"
    return "behind a proxy, set HTTPS_PROXY (HTTP_PROXY for an http:// URL); to use a Hub mirror, set HF_ENDPOINT"


@contextlib.contextmanager
def hub_logs_held():
    """huggingface_hub's log lines held back for the block: a connection dropped midway logs "Error while
    downloading ... Trying to resume download..." on stderr at each retry, then raises; the caller says the failure
    in its one error line (and a retry that succeeds needs no words)."""
    import logging

    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def describe_error(err, limit=200):
    """'ConnectError: [Errno 111] Connection refused': its message cut to `limit` characters, credentials removed, on
    one line (huggingface_hub's errors span several; every caller puts it in a one-line message)."""
    return one_line(f"{type(err).__name__}: {without_credentials(err)[:limit]}", limit + 100)


def hub_offline():
    """True when huggingface_hub or datasets is in offline mode. Their own reading of the environment decides
    (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE, TRANSFORMERS_OFFLINE set to 1, true, yes or on, any case), so we stop
    exactly when they would refuse to stream."""
    import datasets.config  # heavy (~0.7 s): only for the Hub
    from huggingface_hub import constants  # only for the Hub (it reads HF_* variables when imported)

    return bool(constants.HF_HUB_OFFLINE or getattr(datasets.config, "HF_HUB_OFFLINE", False)
                or getattr(datasets.config, "HF_DATASETS_OFFLINE", False))


def hub_unreachable(repo_id, timeout_s=5.0, repo_type="datasets", revision="main"):
    """None when the Hub answers, else why not: "cannot reach the HuggingFace Hub at E[ through the proxy P (V)]
    (ConnectError: ...)".

    One HEAD request for the repo's card, sent the way the libraries send theirs: huggingface_hub's own HTTP
    session, so HF_ENDPOINT (read by huggingface_hub), HTTPS_PROXY / HTTP_PROXY / NO_PROXY and the port of an
    http:// endpoint count as they do for the download itself, with no retries (the libraries retry a refused
    connection for ~25 s). Any HTTP answer means reachable."""
    import urllib.parse  # light; with the Hub imports below, only for the Hub

    from huggingface_hub import constants  # only for the Hub, as above
    from huggingface_hub.utils import build_hf_headers, get_session  # heavy (~75 ms): only for the Hub

    endpoint = constants.ENDPOINT.rstrip("/")
    kind = f"/{repo_type}" if repo_type else ""  # None: a model repository (no prefix)
    url = f"{endpoint}{kind}/{repo_id}/resolve/{urllib.parse.quote(revision, safe='')}/README.md"
    try:
        get_session().head(url, headers=build_hf_headers(), timeout=timeout_s)
    except Exception as err:  # the HTTP client's connection, proxy and timeout errors (requests or httpx)
        return f"cannot reach the HuggingFace Hub at {endpoint}{reaching(endpoint)} ({describe_error(err)})"
    return None


def check_hub_reachable(repo_id, timeout_s=5.0):
    """Fail in seconds, not after minutes of retries, when the Hub cannot be reached (offline machine): one
    UserError naming the endpoint, the proxy in use and the ways out."""
    from huggingface_hub import constants  # only for the Hub, as above

    problem = hub_unreachable(repo_id, timeout_s)
    if problem:
        raise UserError(f"{problem}. Offline? {INPUT_HINT}; {proxy_hint([constants.ENDPOINT])}")


def cached_snapshot(repo_id, revision="main", repo_type="dataset"):
    """The HF cache's folder of `repo_id` at `revision` (a branch, tag or commit), or None; no network. Read from
    the cache layout (HF_HUB_CACHE/datasets--ORG--NAME/refs/REV → snapshots/COMMIT) rather than with
    snapshot_download(local_files_only=True), which refuses a snapshot holding only some of the repo's files
    (`hf download REPO --include PATTERN`, or what hf_hub_download fetched) once it has listed the repo."""
    from huggingface_hub import constants  # only for the Hub (it reads HF_HOME / HF_HUB_CACHE when imported)
    from huggingface_hub.file_download import repo_folder_name

    if ".." in revision.split("/"):  # a revision names a ref or a commit, never a way out of the cache
        return None
    repo_folder = os.path.join(constants.HF_HUB_CACHE, repo_folder_name(repo_id=repo_id, repo_type=repo_type))
    ref = os.path.join(repo_folder, "refs", revision)
    try:
        with open(ref) as f:
            commit = f.read().strip()
    except OSError:  # no such ref: a commit hash names its snapshot itself
        commit = revision
    folder = os.path.join(repo_folder, "snapshots", commit)
    return folder if commit and os.path.isdir(folder) else None


def config_pattern(folder, config):
    """The train files' pattern of a dataset config (FineWeb's sample-10BT: sample/10BT/*): from the dataset card
    in the cached snapshot `folder` when it is there, else FineWeb's naming of its samples; None if unknown."""
    card = os.path.join(folder, "README.md") if folder else None
    if card and os.path.isfile(card):
        from huggingface_hub.repocard import metadata_load  # only for the Hub, as above

        try:
            configs = (metadata_load(card) or {}).get("configs") or []
        except Exception:  # a damaged card: fall back to the naming below
            configs = []
        for entry in configs:
            if isinstance(entry, dict) and entry.get("config_name") == config:
                for files in entry.get("data_files") or []:
                    if isinstance(files, dict) and files.get("split") == "train" and isinstance(files.get("path"), str):
                        return files["path"]
    match = re.fullmatch(r"sample-(\d+BT)", config)
    return f"sample/{match.group(1)}/*" if match else None


def cached_config_files(repo_id, config):
    """Offline: (the HF cache's files of `config`, sorted as datasets lists them, or [], its pattern)."""
    folder = cached_snapshot(repo_id)
    pattern = config_pattern(folder, config) or f"{config}/*"
    files = sorted(glob.glob(os.path.join(glob.escape(folder), pattern))) if folder else []
    return [f for f in files if f.endswith(".parquet") and os.path.isfile(f)], pattern


@dataclass(frozen=True)
class HubShare:
    """Which part of a Hub stream of `num_files` files one rank reads: files [first_file, first_file +
    file_count), and of their documents every `row_stride`-th from `row_offset` (stride 1: all of them)."""
    first_file: int
    file_count: int
    row_offset: int
    row_stride: int
    groups: int  # how many disjoint file runs the ranks are split into (datasets' shard count)
    group: int  # this rank's run


def _even_run(total, parts, index):
    """[start, stop) of part `index` when `total` items are cut into `parts` contiguous runs whose lengths differ
    by at most one, the longer runs first (the rule of datasets' IterableDataset.shard(contiguous=True))."""
    size, extra = divmod(total, parts)
    start = size * index + min(index, extra)
    return start, start + size + (1 if index < extra else 0)


def hub_share(num_files, rank, world_size):
    """This rank's HubShare. Deterministic and independent of the seed; together the ranks read every document
    exactly once.

    world_size <= num_files: each rank gets its own contiguous run of whole files (14 files over 8 ranks: 2, 2, 2,
    2, 2, 2, 1, 1), so each file is downloaded by one rank only, on one node or many. Runs differ by at most one
    file; the manifest of each rank records what it wrote, so uneven shares need no padding.
    world_size > num_files: every rank still needs text, so the ranks are cut into num_files even groups, each
    group reads one file and its ranks take every k-th document of it (k = the group's size). A file is then
    downloaded once per rank of its group, never by all ranks."""
    if world_size <= num_files:
        start, stop = _even_run(num_files, world_size, rank)
        return HubShare(start, stop - start, 0, 1, world_size, rank)
    for group in range(num_files):
        start, stop = _even_run(world_size, num_files, group)
        if start <= rank < stop:
            return HubShare(group, 1, rank - start, stop - start, num_files, group)
    raise ValueError(f"rank {rank} is not below world size {world_size}")


def open_hub_stream(repo_id, config, local_files=None):
    """(datasets IterableDataset of the config's 'text' column, its data files in stream order). local_files: the
    config's parquet files in the HF cache (offline), read by the same pipeline, so the same files in the same
    order give the documents in the same order.

    Only the text column is read, with its type given, so no file is opened just to infer a schema: in W ranks
    that would download the first file W more times."""
    from datasets import Features, Value, load_dataset_builder  # heavy (~0.7 s): only for the Hub

    features = Features({"text": Value("string")})
    if local_files:
        builder = load_dataset_builder("parquet", data_files={"train": list(local_files)}, columns=["text"],
                                       features=features)
    else:
        builder = load_dataset_builder(repo_id, name=config, columns=["text"], features=features)
    files = [str(f) for f in builder.config.data_files["train"]]
    return builder.as_streaming_dataset(split="train"), files


def iter_hub_documents(repo_id, config, seed, rank=0, world_size=1, shuffle_buffer=10_000, stats=None):
    """Stream a Hub dataset's 'text' column with `datasets` (no full download): this rank's own files (hub_share),
    their order and documents shuffled with `seed` through a buffer of `shuffle_buffer` documents (0: the
    stream's order, file by file).

    Offline mode and an unreachable Hub are one clear UserError pointing at --input, raised by this call itself,
    before the caller starts any work; the documents are read lazily from the returned iterator.

    The split comes before the shuffle, so the shuffle stays within the rank and cannot move a document from one
    rank's share to another's; ranks that share a file (more ranks than files) see the same seeded order of it
    and take disjoint strides. (datasets' split_dataset_by_node hands out whole files only when their count
    divides by W; otherwise every rank streams everything and keeps one document in W: 8x the download for 8
    ranks over FineWeb-Edu's 14 sample-10BT files.)"""
    stats = stats if stats is not None else ReadStats()
    if hub_offline():  # what `hf download` put in the HF cache is read instead, in the same order as streamed
        local_files, pattern = cached_config_files(repo_id, config)
        if not local_files:
            from huggingface_hub import constants  # imported by hub_offline already

            set_vars = ", ".join(f"{name}={os.environ[name]}" for name in OFFLINE_VARIABLES if os.environ.get(name))
            raise UserError(f"offline mode is on ({set_vars or 'HF_HUB_OFFLINE'}), so {repo_id} cannot be streamed "
                            f"from the HuggingFace Hub, and the HF cache ({constants.HF_HUB_CACHE}) holds no file of "
                            f"{config} ({pattern}). {INPUT_HINT}; or fill the cache once online: hf download {repo_id} "
                            f"--repo-type dataset --include '{pattern}'; or unset those variables")
        if rank == 0:
            print(f"note: offline: reading the {len(local_files)} file(s) of {repo_id} ({config}) in the HF cache",
                  file=sys.stderr, flush=True)
        return _hub_documents(repo_id, config, seed, rank, world_size, shuffle_buffer, stats, local_files)
    check_hub_reachable(repo_id)
    return _hub_documents(repo_id, config, seed, rank, world_size, shuffle_buffer, stats)


def _hub_documents(repo_id, config, seed, rank, world_size, shuffle_buffer, stats, local_files=None):
    try:
        stream, files = open_hub_stream(repo_id, config, local_files)
        share = hub_share(len(files), rank, world_size)
        if rank == 0 and world_size > len(files):
            print(f"note: {repo_id} ({config}) has {len(files)} files for {world_size} ranks: groups of ranks share "
                  "a file, each rank reading every k-th document of it (downloaded once per rank of the group); "
                  f"with at most {len(files)} ranks every file is downloaded once", file=sys.stderr, flush=True)
        if share.groups > 1:
            stream = stream.shard(num_shards=share.groups, index=share.group, contiguous=True)
        if shuffle_buffer > 0:
            stream = stream.shuffle(seed=seed, buffer_size=shuffle_buffer)
        stats.files.extend(files[share.first_file:share.first_file + share.file_count])
        for text in take_every((record["text"] for record in stream), share.row_offset, share.row_stride):
            if text is None:
                continue
            stats.docs += 1
            stats.chars += len(text)
            stats.bytes_read += len(text.encode("utf-8", "surrogatepass"))
            yield text
    except UserError:
        raise
    except Exception as err:
        from huggingface_hub import constants  # imported by open_hub_stream already

        raise UserError(f"could not stream {repo_id} ({config}) from the HuggingFace Hub at "
                        f"{constants.ENDPOINT}{reaching(constants.ENDPOINT)} ({describe_error(err)}). Offline? "
                        f"{INPUT_HINT}; {proxy_hint([constants.ENDPOINT])}") from None


def take_every(docs, rank, world_size):
    """Rank's disjoint share of a document stream: documents rank, rank+W, rank+2W, ..."""
    for i, doc in enumerate(docs):
        if i % world_size == rank:
            yield doc
