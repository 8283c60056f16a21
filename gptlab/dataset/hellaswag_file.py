"""HellaSwag validation data: one owner for its download, its checksum and its loading.

The file is the upstream `data/hellaswag_val.jsonl` of github.com/rowanz/hellaswag (10042 rows), byte for byte:
`fetch_hellaswag` verifies the sha256 of the (uncompressed) bytes before the file appears under its final name,
so a file at DEFAULT_PATH is always the verified one. `load_hellaswag` turns it into examples
{"ctx": str, "endings": [4 x str], "label": 0..3, "ind": int or None}.

Where it comes from, when no source is given: the Hub copy (HUB_REPO, the one lm-eval reads) through
huggingface_hub, so HF_ENDPOINT, HF_HUB_OFFLINE, the HF_HOME cache and the proxy variables count as for any Hub
download; its parquet rows are turned back into the upstream lines (`json.dumps` of the upstream keys in their
order, label an int), which gives the upstream bytes exactly, checked with the same sha256 before anything is
written under the final name. A Hub copy that is
missing, unreadable (no pyarrow) or fails the checksum gives way to the GitHub file (or $GPTLAB_HELLASWAG_URL);
offline, only the cache is used.
"""
import gzip
import hashlib
import itertools
import json
import os
import re
import stat
import sys
import zlib

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write, check_folder_creatable, write_fix
from gptlab.core.progress import is_terminal, progress_bar
from gptlab.text.sources import describe_error, proxy_hint, reaching

HELLASWAG_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
URL_ENV = "GPTLAB_HELLASWAG_URL"  # a mirror of HELLASWAG_URL (same file, same checksum) used when no source is given
HUB_REPO = "Rowan/hellaswag"  # a dataset repo holding the validation split as parquet (lm-eval's copy)
HUB_REVISION = "main"
# The upstream file's lines are json.dumps of a dict with these keys, in this order for ActivityNet rows (the
# first 3243) and with "ctx" second for WikiHow rows (source_id "wikihow~..."): checked on all 10042 lines.
UPSTREAM_KEYS = ("ind", "activity_label", "ctx_a", "ctx_b", "ctx", "split", "split_type", "label", "endings",
                 "source_id")
WIKIHOW_KEYS = ("ind", "ctx", "activity_label", "ctx_a", "ctx_b", "split", "split_type", "label", "endings",
                "source_id")
HELLASWAG_SHA256 = "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588"
HELLASWAG_ROWS = 10042
DEFAULT_PATH = os.path.join("data", "hellaswag", "hellaswag_val.jsonl")
SAMPLE_GZ = os.path.join("data", "sample", "hellaswag_val.jsonl.gz")  # bundled copy, for offline use
NUM_ENDINGS = 4
DEFAULT_TIMEOUT_S = 10.0
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_OFFLINE_HINT = f"pass --source PATH (a local hellaswag_val.jsonl or .jsonl.gz, e.g. --source {SAMPLE_GZ})"


class NotTheFile(UserError):
    """A source whose bytes fail the checksum (nothing was written)."""


class Unreachable(UserError):
    """A URL that could not be downloaded (network, proxy, HTTP error); .problem: what failed, without the hints."""

    def __init__(self, message, problem):
        super().__init__(message)
        self.problem = problem


class HubCopyUnusable(UserError):
    """The Hub copy cannot be used (missing, unreadable, not cached offline, failing the checksum): why."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def is_url(source):
    return source.split("://", 1)[0].lower() in ("http", "https", "file", "ftp") and "://" in source


def default_source():
    """The URL downloaded when the Hub copy cannot be used: $GPTLAB_HELLASWAG_URL (a mirror) or the upstream file."""
    return os.environ.get(URL_ENV) or HELLASWAG_URL


def _open_source(source, timeout_s):
    """(binary stream, total bytes or None) for a URL or a local path; failures are one clear UserError."""
    if is_url(source):
        import urllib.error  # with urllib.request below: both bind the one local name `urllib`
        import urllib.request  # ~25 ms (http, ssl): only for a URL; compare_experiments.py imports this module

        try:
            response = urllib.request.urlopen(source, timeout=timeout_s)  # noqa: S310 (the URL is the user's choice)
        except urllib.error.HTTPError as err:
            problem = f"downloading {source}{reaching(source, False)} failed: HTTP {err.code} {err.reason}"
            raise Unreachable(f"{problem}; {_OFFLINE_HINT}", problem=problem) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = describe_error(getattr(err, "reason", err))
            problem = f"cannot download {source}{reaching(source, False)} ({reason})"
            raise Unreachable(f"{problem}; are you offline? {_OFFLINE_HINT}; {proxy_hint(urllib_urls=[source])}",
                              problem=problem) from None
        length = response.headers.get("Content-Length")
        return response, int(length) if length and length.isdigit() else None
    if not os.path.isfile(source):
        raise UserError(f"--source {source} does not exist (or is not a file); give the path of "
                        f"hellaswag_val.jsonl or hellaswag_val.jsonl.gz, e.g. --source {SAMPLE_GZ}")
    try:
        return open(source, "rb"), os.path.getsize(source)
    except OSError as err:
        raise UserError(f"--source {source} is not readable ({err.strerror or err}); check its permissions "
                        f"(chmod a+r) or give another copy, e.g. --source {SAMPLE_GZ}") from None


def _decompressed_chunks(raw_chunks):
    """Yield the bytes of the stream, gunzipped (all members) when it starts with the gzip magic."""
    first = next(raw_chunks, b"")
    if not first.startswith(_GZIP_MAGIC):
        yield first
        yield from raw_chunks
        return
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = first
    while True:
        while pending:
            yield decomp.decompress(pending)
            pending = decomp.unused_data
            if pending:  # the next gzip member starts here
                decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = next(raw_chunks, None)
        if pending is None:
            break
    if not decomp.eof:
        raise zlib.error("the gzip stream is truncated")
    yield decomp.flush()


def _copy_verified(source, stream, total, out, progress):
    """Stream `stream` (gunzipped when it is gzip) into a temporary file beside `out`, hashing it; the file takes
    the name `out` only when the sha256 is HELLASWAG_SHA256, else NotTheFile and nothing is left."""
    digest = hashlib.sha256()
    n_bytes = 0
    with stream, progress_bar(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="hellaswag",
                              disable=not progress, leave=False) as bar:
        def raw_chunks():
            while True:
                try:
                    chunk = stream.read(_CHUNK)
                except OSError as err:  # connection dropped or timed out mid-download
                    raise UserError(f"reading {source} failed ({err}); {_OFFLINE_HINT}") from None
                if not chunk:
                    return
                bar.update(len(chunk))
                yield chunk

        try:
            with atomic_write(out, "wb", overwrite=True) as f:
                try:
                    for data in _decompressed_chunks(raw_chunks()):
                        digest.update(data)
                        n_bytes += len(data)
                        f.write(data)
                except (zlib.error, EOFError) as err:
                    raise UserError(f"{source} is not a valid gzip file ({err}); "
                                    "give a plain .jsonl or an intact .jsonl.gz") from None
                if digest.hexdigest() != HELLASWAG_SHA256:
                    mismatch = NotTheFile(
                        f"{source} is not the HellaSwag validation file: sha256 of its {n_bytes} (uncompressed) "
                        f"bytes is {digest.hexdigest()}, expected {HELLASWAG_SHA256}; nothing was written. Use the "
                        f"upstream file ({HELLASWAG_URL}) or the bundled {SAMPLE_GZ}")
                    mismatch.digest = digest.hexdigest()
                    raise mismatch
        except OSError as err:  # reading errors are UserErrors already: this is the writing (a full disk)
            raise UserError(f"could not write {out} ({err.strerror or err}); nothing half-written was left; "
                            f"{write_fix(err)}") from None


# ---- the Hub copy

def hub_validation_files(paths):
    """The validation split's parquet file(s) among a repo's file paths, in order (one folder: the first that has
    any), e.g. data/validation-00000-of-00001.parquet (a converted repo's main) or default/validation/0000.parquet
    (refs/convert/parquet); [] when there is none."""
    found = sorted(p for p in paths if p.endswith(".parquet")
                   and re.search(r"(^|/)validation(/|-\d|\.parquet$)", p))
    return [p for p in found if os.path.dirname(p) == os.path.dirname(found[0])] if found else []


def _upstream_lines(files):
    """The upstream jsonl's bytes, one line per parquet row (label "3" → 3), as a file-like stream."""
    import pyarrow.parquet as pq  # only for the Hub copy; checked importable before any download

    def lines():
        for path in files:
            table = pq.ParquetFile(path)
            missing = [k for k in UPSTREAM_KEYS if k not in table.schema_arrow.names]
            if missing:
                raise ValueError(f"{os.path.basename(path)} has no column {', '.join(missing)}")
            for batch in table.iter_batches(columns=list(UPSTREAM_KEYS), batch_size=1024):
                for row in batch.to_pylist():
                    row["label"] = int(row["label"])
                    keys = WIKIHOW_KEYS if str(row["source_id"]).startswith("wikihow~") else UPSTREAM_KEYS
                    yield (json.dumps({k: row[k] for k in keys}) + "\n").encode()

    return _GeneratedStream(lines())


class _GeneratedStream:
    """A read()-able stream over generated byte strings; any failure of the generator is a HubCopyUnusable."""

    def __init__(self, chunks):
        self.chunks = chunks

    def read(self, _size=-1):
        try:
            return next(self.chunks, b"")
        except Exception as err:  # pyarrow's and the rows' errors: the copy is unreadable, not the user's input
            raise HubCopyUnusable(f"its parquet could not be read ({describe_error(err)})") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.chunks.close()
        return False


def _hub_files_online(repo_id, revision, timeout_s, progress):
    """Local paths of the repo's validation parquet, downloaded into the HF cache; HubCopyUnusable saying why not."""
    from huggingface_hub import HfApi, hf_hub_download  # heavy (~0.3 s): only for the Hub copy
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from gptlab.text.sources import hub_logs_held, hub_unreachable

    problem = hub_unreachable(repo_id, timeout_s, revision=revision)  # seconds, not the libraries' retries
    if problem:
        raise HubCopyUnusable(problem)
    try:
        with hub_logs_held():  # a 500 or 429 is retried, each retry logged: the failure is said once, below
            files = hub_validation_files(HfApi().list_repo_files(repo_id, repo_type="dataset", revision=revision))
    except Exception as err:  # no such repo or revision, an error page: the Hub's errors, all of them
        raise HubCopyUnusable(f"listing it failed ({describe_error(err)})") from None
    if not files:
        raise HubCopyUnusable("it holds no validation parquet")
    # huggingface_hub's bar redraws with \r: fine on a terminal, not in a log (gptlab.core.progress)
    quiet = not (progress and is_terminal(sys.stderr)) and not are_progress_bars_disabled()
    if quiet:
        disable_progress_bars()
    try:
        with hub_logs_held():
            return [hf_hub_download(repo_id, f, repo_type="dataset", revision=revision, etag_timeout=timeout_s)
                    for f in files], files
    except Exception as err:
        raise HubCopyUnusable(f"downloading {files[0]} failed ({describe_error(err)})") from None
    finally:
        if quiet:
            enable_progress_bars()


def _hub_files_cached(repo_id, revision):
    """Offline: local paths of the validation parquet in the HF cache; HubCopyUnusable when it is not there."""
    from huggingface_hub import constants  # only for the Hub copy

    from gptlab.text.sources import cached_snapshot

    folder = cached_snapshot(repo_id, revision)
    paths = []
    for root, _, names in os.walk(folder) if folder else ():
        paths += [os.path.relpath(os.path.join(root, n), folder).replace(os.sep, "/") for n in names]
    files = hub_validation_files(paths)
    if not files:
        raise HubCopyUnusable(f"it is not in the HF cache ({constants.HF_HUB_CACHE})")
    return [os.path.join(folder, f) for f in files], files


def _fetch_from_hub(out, repo_id, revision, timeout_s, progress, offline):
    """Write `out` from the Hub copy; returns the source's name. HubCopyUnusable (nothing written) when it cannot."""
    from huggingface_hub import constants  # only for the Hub copy

    try:
        import pyarrow.parquet  # noqa: F401 (checked before downloading anything)
    except ImportError:
        raise HubCopyUnusable("reading its parquet needs pyarrow (pip install pyarrow)") from None
    local, files = _hub_files_cached(repo_id, revision) if offline else \
        _hub_files_online(repo_id, revision, timeout_s, progress)
    name = f"hf://datasets/{repo_id}@{revision}/{files[0]}" + (f" (+{len(files) - 1} more)" if len(files) > 1 else "")
    try:
        _copy_verified(name, _upstream_lines(local), None, out, progress)
    except NotTheFile as err:
        raise HubCopyUnusable(f"its rows do not rebuild the upstream file (sha256 {err.digest[:16]}..., expected "
                              f"{HELLASWAG_SHA256[:16]}...)") from None
    return name + (" (the HF cache; offline)" if offline else f" via {constants.ENDPOINT}")


def fetch_hellaswag(source=None, out=DEFAULT_PATH, overwrite=False, timeout_s=DEFAULT_TIMEOUT_S, progress=True,
                    hub_repo=HUB_REPO, revision=HUB_REVISION):
    """Put the verified HellaSwag validation file at `out`; returns (out, "present" | "written", source used).

    source: a URL or a local .jsonl / .jsonl.gz: that only. None: the Hub copy `hub_repo` at `revision`, then
    default_source() ($GPTLAB_HELLASWAG_URL or the upstream URL) when the Hub copy cannot be used, the Hub copy's
    failure said in a `note:` line once that worked (in the one error line when it fails too); with
    HF_HUB_OFFLINE only the HF cache is read (nothing on the network). URLs are fetched with urllib, which honours
    HTTPS_PROXY / HTTP_PROXY / NO_PROXY. The sha256 is checked on the uncompressed bytes while they stream into a
    temporary file; a mismatch removes the temporary file, so nothing unverified ever sits under `out`, and an
    existing file is only replaced by a verified one.
    """
    if os.path.isfile(out):
        if sha256_file(out) == HELLASWAG_SHA256:
            return out, "present", None
        if not overwrite:
            raise UserError(f"{out} exists but is not the HellaSwag validation file (sha256 differs); "
                            "pass --overwrite to replace it, or choose another --out")
    elif os.path.exists(out):
        raise UserError(f"--out {out} exists and is not a file; choose another --out")
    check_folder_creatable(os.path.dirname(os.path.abspath(out)))  # by writing there, before any download
    if source:
        _copy_verified(source, *_open_source(source, timeout_s), out, progress)
        return out, "written", source
    from huggingface_hub import constants  # reads HF_ENDPOINT, HF_HUB_OFFLINE, HF_HOME when imported

    offline = bool(constants.HF_HUB_OFFLINE)
    try:
        return out, "written", _fetch_from_hub(out, hub_repo, revision, timeout_s, progress, offline)
    except HubCopyUnusable as err:
        hub_problem = f"the Hub copy {hub_repo} ({revision}) cannot be used: {err}"
    if offline:
        raise UserError(f"{hub_problem}; HF_HUB_OFFLINE is set, so nothing is downloaded (GitHub neither). Use the "
                        f"bundled copy: --source {SAMPLE_GZ}, or run once online to fill the cache, or unset "
                        "HF_HUB_OFFLINE")
    url = default_source()
    # the note comes once the fallback worked: when it fails too, the error line says both, and is the only line
    try:
        _copy_verified(url, *_open_source(url, timeout_s), out, progress)
    except Unreachable as err:
        hint = proxy_hint([constants.ENDPOINT], [url])
        raise UserError(f"cannot download HellaSwag: {hub_problem}; and {err.problem}. {hint[0].upper()}{hint[1:]}; "
                        f"offline: --source {SAMPLE_GZ}, or HF_HUB_OFFLINE=1 once the HF cache holds the Hub copy"
                        ) from None
    except UserError as err:  # the fallback's file fails its checksum, or cannot be written
        raise UserError(f"cannot download HellaSwag: {hub_problem}; and {err}") from None
    print(f"note: {hub_problem}; downloaded {url} instead", file=sys.stderr, flush=True)
    return out, "written", url


def _parse_example(obj, where):
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object with ctx, endings, label; got {type(obj).__name__}")
    ctx, endings, label = obj.get("ctx"), obj.get("endings"), obj.get("label")
    if not isinstance(ctx, str):
        raise UserError(f"{where}: 'ctx' must be a string")
    if not (isinstance(endings, list) and len(endings) == NUM_ENDINGS and all(isinstance(e, str) for e in endings)):
        raise UserError(f"{where}: 'endings' must be a list of {NUM_ENDINGS} strings")
    longest = max(len(e.encode("utf-8", "surrogatepass")) for e in endings)
    if longest > MAX_ENDING_BYTES:
        raise UserError(f"{where}: an ending is {longest:,} bytes long, more than the {MAX_ENDING_BYTES:,} a scored "
                        "row can hold whole (HellaSwag's are under 500); fix the file")
    if isinstance(label, str) and label.strip().isdigit():
        label = int(label)
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < NUM_ENDINGS:
        raise UserError(f"{where}: 'label' must be an integer 0..{NUM_ENDINGS - 1}, got {label!r}")
    return {"ctx": ctx, "endings": list(endings), "label": label, "ind": obj.get("ind")}


# Bounds on a row, far above HellaSwag's own (ctx <= 498 characters, endings <= 428, rows <= 2.1 kB): a longer row
# is refused at load, naming its line, so reading stays bounded; a long context within them is cut from the left
# by the scorer (gptlab.evals.hellaswag), and an ending always fits its row (a token is at least one byte).
MAX_ROW_CHARS = 200_000
MAX_ENDING_BYTES = 1000


def not_a_file(path):
    """None for a regular file (or a link to one), else what the path is: "does not exist", "is a directory", "is
    not a regular file (a FIFO)"...; checked before opening, since opening a FIFO would wait for a writer."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    return f"is not a regular file ({kind})"


def load_hellaswag(path=DEFAULT_PATH, limit=None):
    """The examples of a HellaSwag .jsonl (or .jsonl.gz) file, in file order; the first `limit` when given.

    A missing file or a malformed line is a UserError (the latter names the file and the line number).
    """
    if limit is not None and limit < 0:
        raise UserError(f"the HellaSwag limit must be >= 0, got {limit}")
    problem = not_a_file(path)
    if problem == "does not exist":
        raise UserError(f"HellaSwag file {path} not found; run `python download_hellaswag.py` "
                        f"(offline: `python download_hellaswag.py --source {SAMPLE_GZ}`)")
    if problem:
        raise UserError(f"HellaSwag file {path} {problem}; give the .jsonl file `python download_hellaswag.py` wrote")
    opener = gzip.open if path.endswith(".gz") else open
    examples = []
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no in itertools.count(1):
                if limit is not None and len(examples) >= limit:
                    break
                line = f.readline(MAX_ROW_CHARS + 1)  # bounded: a row never has to fit in memory whole
                if not line:
                    break
                where = f"{path} line {line_no}"
                if len(line) > MAX_ROW_CHARS:
                    raise UserError(f"{where} is longer than {MAX_ROW_CHARS:,} characters (HellaSwag's rows are "
                                    "about 1 kB); fix the file, or re-download it with `python download_hellaswag.py "
                                    "--overwrite`")
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise UserError(f"{where}: not valid JSON ({err.msg}, column {err.colno}); fix the file, "
                                    "or re-download it with `python download_hellaswag.py --overwrite`") from None
                examples.append(_parse_example(obj, where))
    except (UnicodeDecodeError, OSError, EOFError) as err:
        raise UserError(f"cannot read {path} ({err}); re-download it with "
                        "`python download_hellaswag.py --overwrite`") from None
    if not examples and limit != 0:
        raise UserError(f"{path} holds no examples; re-download it with `python download_hellaswag.py --overwrite`")
    return examples
