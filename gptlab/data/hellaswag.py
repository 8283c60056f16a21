"""HellaSwag validation data: one owner for its download, its checksum and its loading.

The file is the upstream `data/hellaswag_val.jsonl` of github.com/rowanz/hellaswag (10042 rows), byte for byte:
`fetch_hellaswag` verifies the sha256 of the (uncompressed) bytes before the file appears under its final name,
so a file at DEFAULT_PATH is always the verified one. `load_hellaswag` turns it into examples
{"ctx": str, "endings": [4 x str], "label": 0..3, "ind": int or None}.
"""
import gzip
import hashlib
import itertools
import json
import os
import stat
import zlib

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write, check_folder_creatable, write_fix
from gptlab.core.progress import progress_bar

HELLASWAG_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
URL_ENV = "GPTLAB_HELLASWAG_URL"  # a mirror of HELLASWAG_URL (same file, same checksum) used when no source is given
HELLASWAG_SHA256 = "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588"
HELLASWAG_ROWS = 10042
DEFAULT_PATH = os.path.join("data", "hellaswag", "hellaswag_val.jsonl")
SAMPLE_GZ = os.path.join("data", "sample", "hellaswag_val.jsonl.gz")  # bundled copy, for offline use
NUM_ENDINGS = 4
DEFAULT_TIMEOUT_S = 10.0
_CHUNK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_OFFLINE_HINT = f"pass --source PATH (a local hellaswag_val.jsonl or .jsonl.gz, e.g. --source {SAMPLE_GZ})"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def is_url(source):
    return source.split("://", 1)[0].lower() in ("http", "https", "file", "ftp") and "://" in source


def default_source():
    """The URL downloaded when no source is given: $GPTLAB_HELLASWAG_URL (a mirror) or the upstream file."""
    return os.environ.get(URL_ENV) or HELLASWAG_URL


def _open_source(source, timeout_s):
    """(binary stream, total bytes or None) for a URL or a local path; failures are one clear UserError."""
    if is_url(source):
        import urllib.error  # with urllib.request below: both bind the one local name `urllib`
        import urllib.request  # ~25 ms (http, ssl): only for a URL; compare_experiments.py imports this module

        try:
            response = urllib.request.urlopen(source, timeout=timeout_s)  # noqa: S310 (the URL is the user's choice)
        except urllib.error.HTTPError as err:
            raise UserError(f"downloading {source} failed: HTTP {err.code} {err.reason}; {_OFFLINE_HINT}") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise UserError(f"cannot download {source} ({reason}); are you offline? {_OFFLINE_HINT}") from None
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


def fetch_hellaswag(source=None, out=DEFAULT_PATH, overwrite=False, timeout_s=DEFAULT_TIMEOUT_S, progress=True):
    """Put the verified HellaSwag validation file at `out`; returns (out, "present" | "written").

    source: None (default_source(): $GPTLAB_HELLASWAG_URL or the upstream URL), a URL, or a local .jsonl /
    .jsonl.gz. URLs are fetched with urllib, which honours HTTPS_PROXY / HTTP_PROXY / NO_PROXY. The sha256 is
    checked on the uncompressed bytes while they stream into a temporary file; a mismatch removes the temporary
    file, so nothing unverified ever sits under `out`, and an existing file is only replaced by a verified one.
    """
    if os.path.isfile(out):
        if sha256_file(out) == HELLASWAG_SHA256:
            return out, "present"
        if not overwrite:
            raise UserError(f"{out} exists but is not the HellaSwag validation file (sha256 differs); "
                            "pass --overwrite to replace it, or choose another --out")
    elif os.path.exists(out):
        raise UserError(f"--out {out} exists and is not a file; choose another --out")
    check_folder_creatable(os.path.dirname(os.path.abspath(out)))  # by writing there, before any download
    source = source or default_source()
    stream, total = _open_source(source, timeout_s)
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
                    raise UserError(
                        f"{source} is not the HellaSwag validation file: sha256 of its {n_bytes} (uncompressed) "
                        f"bytes is {digest.hexdigest()}, expected {HELLASWAG_SHA256}; nothing was written. Use the "
                        f"upstream file ({HELLASWAG_URL}) or the bundled {SAMPLE_GZ}")
        except OSError as err:  # reading errors are UserErrors already: this is the writing (a full disk)
            raise UserError(f"could not write {out} ({err.strerror or err}); nothing half-written was left; "
                            f"{write_fix(err)}") from None
    return out, "written"


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
