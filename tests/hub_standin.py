"""A stand-in for the HuggingFace Hub (and raw.githubusercontent.com) on 127.0.0.1, for the tests.

The product code reaches it unchanged, through `HF_ENDPOINT=http://127.0.0.1:PORT` (and, for HellaSwag, the
documented URL override). It serves a mirror of the real repositories' layout:

- `HuggingFaceFW/fineweb-edu` and `HuggingFaceFW/fineweb`: a dataset card `README.md` whose front matter has the
  real `configs:` (`default` → `data/*/*`, `sample-10BT` → `sample/10BT/*`, `sample-100BT`, `sample-350BT`, then
  dumps), a `.gitattributes`, and parquet files named as upstream (`000_00000.parquet`, ...) with the real
  columns, holding the real FineWeb-Edu documents of ../shared/data spread over 14 files for sample-10BT (as many
  files as upstream's FineWeb-Edu sample/10BT). The first config (`default`) has a file too: `datasets` resolves
  the first config's files to pick its parquet reader.
- `Rowan/hellaswag` (the Hub copy lm-eval reads): `data/{train,validation,test}-00000-of-00001.parquet` with the
  real columns (ind, activity_label, ctx_a, ctx_b, ctx, endings, source_id, split, split_type, label as a string),
  the validation file holding the rows of ../shared/data/hellaswag_val.jsonl.
- `rowanz/hellaswag/master/data/hellaswag_val.jsonl` (the path of the raw GitHub URL).

Endpoints (what huggingface_hub 2.x / datasets 5.x ask for, found by logging unknown requests):
`HEAD`/`GET /datasets/{org}/{name}/resolve/{rev}/{path}` (and a model repository's `/{org}/{name}/resolve/...`, which
hf_hub_download asks for; models and datasets share the `repos` names) (X-Repo-Commit, ETag, Range → 206, missing → 404 with
X-Error-Code: EntryNotFound), `GET /api/datasets/{org}/{name}[/revision/{rev}]` (JSON with sha and siblings),
`GET /api/datasets/{org}/{name}/tree/{rev}[/{path}]` (list of {type, oid, size, path}, `recursive=true`),
`POST /api/datasets/{org}/{name}/paths-info/{rev}`, and the dataset viewer's `GET /info?dataset=` (datasets asks
`datasets-server.{endpoint host}` for it and ignores failures; only a proxy reaches it here). Requests in proxy form
(`GET http://host/path`) are served too, so the server also stands in for an HTTP proxy in front of the Hub.

Every request is logged (method, path, status, body bytes sent, Range, User-Agent), so tests can count the bytes
each file and each client (`HF_HUB_USER_AGENT_ORIGIN` tags a process's User-Agent) received.
"""
import contextlib
import email.utils
import hashlib
import http.server
import io
import json
import os
import re
import threading
import urllib.parse

FINEWEB_COLUMNS = ["text", "id", "dump", "url", "date", "file_path", "language", "language_score", "token_count"]
FINEWEB_EDU_COLUMNS = ["text", "id", "dump", "url", "file_path", "language", "language_score", "token_count",
                       "score", "int_score"]
SAMPLE_10BT_FILES = 14  # upstream FineWeb-Edu sample/10BT: 000_00000.parquet ... 013_00000.parquet
DUMPS = ["CC-MAIN-2013-20", "CC-MAIN-2017-04", "CC-MAIN-2019-22", "CC-MAIN-2021-43", "CC-MAIN-2024-10"]
HELLASWAG_PATH = "/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
HELLASWAG_REPO = "Rowan/hellaswag"
HELLASWAG_VALIDATION = "data/validation-00000-of-00001.parquet"
HELLASWAG_COLUMNS = ["ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split", "split_type",
                     "label"]  # the Hub copy's columns, in its order (label a string: "3")


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def dataset_card(pretty_name, dumps):
    """README.md with the upstream `configs:` front matter (default first, then the samples, then dumps)."""
    lines = ["---", "license: odc-by", "task_categories:", "- text-generation", "language:", "- en",
             f"pretty_name: {pretty_name}", "size_categories:", "- n>1T", "configs:"]
    configs = [("default", "data/*/*"), ("sample-10BT", "sample/10BT/*"), ("sample-100BT", "sample/100BT/*"),
               ("sample-350BT", "sample/350BT/*")] + [(d, f"data/{d}/*") for d in dumps]
    for name, path in configs:
        lines += [f"- config_name: {name}", "  data_files:", "  - split: train", f"    path: {path}"]
    lines += ["---", f"# {pretty_name} (test stand-in)", "", "A few real documents laid out like the real repo.", ""]
    return "\n".join(lines).encode()


def parquet_bytes(docs, columns, first_index, row_group_size=4):
    """A parquet file of `docs` with the upstream columns (metadata values are stand-ins; the text is real)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for k, text in enumerate(docs):
        i = first_index + k
        digest = hashlib.sha256(text.encode()).hexdigest()
        dump = DUMPS[i % len(DUMPS)]
        score = 2.5 + int(digest[:4], 16) / 0xFFFF * 2.5
        rows.append({
            "text": text, "id": f"<urn:uuid:{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-"
                                f"{digest[20:32]}>",
            "dump": dump, "url": f"http://standin.invalid/{digest[:16]}", "date": f"{dump[8:12]}-05-18T05:48:54Z",
            "file_path": f"s3://commoncrawl/crawl-data/{dump}/segments/{digest[:10]}/warc/{digest[10:20]}.warc.gz",
            "language": "en", "language_score": 0.9 + int(digest[4:6], 16) / 0xFF * 0.1,
            "token_count": len(text.split()), "score": score, "int_score": int(round(score)),
        })
    types = {"text": pa.string(), "id": pa.string(), "dump": pa.string(), "url": pa.string(), "date": pa.string(),
             "file_path": pa.string(), "language": pa.string(), "language_score": pa.float64(),
             "token_count": pa.int64(), "score": pa.float64(), "int_score": pa.int64()}
    table = pa.table({c: pa.array([r[c] for r in rows], type=types[c]) for c in columns})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size, compression="snappy")
    return sink.getvalue()


def hellaswag_parquet(rows):
    """A parquet file of HellaSwag rows (dicts as in the upstream jsonl) laid out as the Hub copy: its columns,
    label as a string."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"ind": pa.int32(), "endings": pa.list_(pa.string())}
    table = pa.table({c: pa.array([str(r[c]) if c == "label" else r[c] for r in rows], type=types.get(c, pa.string()))
                      for c in HELLASWAG_COLUMNS})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=1000)
    return sink.getvalue()


def hellaswag_repo(jsonl_bytes, change_ending=None):
    """{path: bytes} of the Hub copy of HellaSwag: validation from `jsonl_bytes` (the upstream file), small train
    and test files (their first rows, labels blanked in test as upstream), a card. change_ending=(row, i, text):
    that row's ending i replaced (a copy whose rows differ from upstream)."""
    rows = [json.loads(line) for line in jsonl_bytes.decode("utf-8").splitlines()]
    if change_ending is not None:
        row, i, text = change_ending
        rows[row] = dict(rows[row], endings=[text if k == i else e for k, e in enumerate(rows[row]["endings"])])
    card = b"---\nlicense: mit\npretty_name: HellaSwag\n---\n# HellaSwag (test stand-in)\n"
    return {"README.md": card, ".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n",
            "data/train-00000-of-00001.parquet": hellaswag_parquet([dict(r, split="train") for r in rows[:5]]),
            HELLASWAG_VALIDATION: hellaswag_parquet(rows),
            "data/test-00000-of-00001.parquet": hellaswag_parquet([dict(r, split="test", label="") for r in rows[:5]])}


def split_evenly(items, parts):
    """`items` cut into `parts` contiguous runs whose lengths differ by at most one (the longer ones first)."""
    out, start = [], 0
    for p in range(parts):
        size = len(items) // parts + (1 if p < len(items) % parts else 0)
        out.append(items[start:start + size])
        start += size
    return out


def fineweb_repo(docs, edu, num_files=SAMPLE_10BT_FILES):
    """{path: bytes} of a FineWeb(-Edu) mirror: sample/10BT holds `docs` in order over `num_files` files; the
    other configs (default/dumps, 100BT, 350BT) get one small file each."""
    columns = FINEWEB_EDU_COLUMNS if edu else FINEWEB_COLUMNS
    files = {"README.md": dataset_card("FineWeb-Edu" if edu else "FineWeb", DUMPS[::-1]),
             ".gitattributes": b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"}
    first = 0
    for n, part in enumerate(split_evenly(list(docs), num_files)):
        files[f"sample/10BT/{n:03d}_00000.parquet"] = parquet_bytes(part, columns, first)
        first += len(part)
    files["sample/100BT/000_00000.parquet"] = parquet_bytes(docs[:20], columns, 0)
    files["sample/350BT/000_00000.parquet"] = parquet_bytes(docs[:3], columns, 0)
    for dump in DUMPS:
        files[f"data/{dump}/000_00000.parquet"] = parquet_bytes(docs[:2], columns, 0)
    return files


class HubStandin:
    """The server: `start()` it (port 0, a daemon thread), read `.endpoint`, `.log`; `stop()` at the end."""

    def __init__(self, repos, raw_files=None, prefix=""):
        self.prefix = prefix.rstrip("/")  # a mirror under a path ("/mirror"): every request must start with it
        self.repos = {repo_id: dict(files) for repo_id, files in repos.items()}  # "org/name" → {path: bytes}
        self.shas = {repo_id: hashlib.sha1(json.dumps(sorted((p, git_blob_sha1(b)) for p, b in files.items()))
                                           .encode()).hexdigest() for repo_id, files in self.repos.items()}
        self.raw_files = dict(raw_files or {})  # URL path → bytes
        self.log = []
        self._lock = threading.Lock()
        self._server = None

    # ---- lifecycle
    def start(self):
        standin = self

        class Handler(_Handler):
            hub = standin

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="hub-standin").start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"

    # ---- log queries
    def record(self, entry):
        with self._lock:
            self.log.append(entry)

    def entries(self):
        with self._lock:
            return list(self.log)

    def clear_log(self):
        with self._lock:
            self.log.clear()

    def bytes_by_file(self, entries=None, suffix=".parquet"):
        """{file path in its repo: body bytes served} over resolve requests for files ending in `suffix`."""
        out = {}
        for e in entries if entries is not None else self.entries():
            if e.get("file") and e["file"].endswith(suffix):
                out[e["file"]] = out.get(e["file"], 0) + e["bytes"]
        return out

    def unknown(self):
        return [e for e in self.entries() if e.get("unknown")]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many clients connect at once (8 ranks, each with parallel readers)


class _Handler(http.server.BaseHTTPRequestHandler):
    hub = None  # the HubStandin, set by a subclass
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: the structured log is in hub.log
        pass

    # ---- helpers
    def _target(self):
        """(path, query dict) of the request; a proxy-form target `http://host/path` is reduced to its path."""
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        if self.hub.prefix:  # outside the prefix nothing matches a route: an unknown request
            path = path[len(self.hub.prefix):] if path.startswith(self.hub.prefix + "/") else "/outside-the-prefix"
        return path, urllib.parse.parse_qs(url.query)

    def _send(self, status, body=b"", headers=None, content_type="application/json", entry=None, total=None):
        head_only = self.command == "HEAD"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(total if total is not None and head_only else len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        sent = 0
        if not head_only and body:
            try:
                self.wfile.write(body)
                sent = len(body)
            except (BrokenPipeError, ConnectionResetError):
                pass
        record = {"method": self.command, "path": self.path, "status": status, "bytes": sent,
                  "range": self.headers.get("Range"), "agent": self.headers.get("User-Agent", "")}
        record.update(entry or {})
        self.hub.record(record)

    def _json(self, obj, status=200, headers=None, entry=None):
        self._send(status, json.dumps(obj).encode(), headers, entry=entry)

    def _not_found(self, code, message, entry=None):
        self._json({"error": message}, 404, {"X-Error-Code": code, "X-Error-Message": message}, entry=entry)

    # ---- dispatch
    def do_HEAD(self):
        self._dispatch()

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(length) if length else b""
        self._dispatch()

    def _dispatch(self):
        path, query = self._target()
        m = re.fullmatch(r"/(?:datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)  # a dataset's or a model's
        if m:
            return self._resolve(m.group(1), m.group(2), m.group(3))
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if m:
            return self._info(m.group(1), m.group(2) or "main")
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
        if m:
            return self._tree(m.group(1), m.group(2), (m.group(3) or "").strip("/"), query)
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/paths-info/([^/]+)", path)
        if m and self.command == "POST":
            return self._paths_info(m.group(1), m.group(2))
        if path == "/info" and "dataset" in query:  # datasets-server.{endpoint host}: only reachable via a proxy
            return self._viewer_info(query["dataset"][0])
        if path in self.hub.raw_files:
            return self._file(self.hub.raw_files[path], entry={"file": path}, content_type="text/plain")
        self._json({"error": f"stand-in: no route for {self.command} {path}"}, 404, entry={"unknown": True})

    def _repo(self, repo_id, revision):
        files = self.hub.repos.get(repo_id)
        if files is None:
            self._json({"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"})
            return None
        if revision not in ("main", self.hub.shas[repo_id]):
            self._not_found("RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return files

    def _resolve(self, repo_id, revision, filename):
        files = self._repo(repo_id, urllib.parse.unquote(revision))
        if files is None:
            return
        entry = {"repo": repo_id, "file": filename}
        sha = self.hub.shas[repo_id]
        if filename not in files:
            return self._not_found("EntryNotFound", f"{filename} does not exist on \"{revision}\"",
                                   entry=dict(entry, missing=True))
        self._file(files[filename], {"X-Repo-Commit": sha}, entry)

    def _file(self, data, headers=None, entry=None, content_type="application/octet-stream"):
        headers = dict(headers or {})
        headers.update({"ETag": f'"{git_blob_sha1(data)}"', "Accept-Ranges": "bytes",
                        "Last-Modified": email.utils.formatdate(0, usegmt=True)})
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if m and (m.group(1) or m.group(2)):
            size = len(data)
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:  # suffix range: the last N bytes
                start, end = max(0, size - int(m.group(2))), size - 1
            if start >= size:
                return self._send(416, b"", dict(headers, **{"Content-Range": f"bytes */{size}"}), entry=entry)
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            return self._send(206, data[start:end + 1], headers, content_type, entry)
        self._send(200, data, headers, content_type, entry, total=len(data))

    def _entry(self, path, data):
        oid = git_blob_sha1(data)
        out = {"type": "file", "oid": oid, "size": len(data), "path": path}
        if path.endswith(".parquet"):
            out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out

    def _info(self, repo_id, revision):
        files = self._repo(repo_id, revision)
        if files is None:
            return
        sha = self.hub.shas[repo_id]
        self._json({"_id": sha[:24], "id": repo_id, "author": repo_id.split("/")[0], "sha": sha,
                    "lastModified": "2025-01-01T00:00:00.000Z", "createdAt": "2024-04-01T00:00:00.000Z",
                    "private": False, "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                    "cardData": {}, "siblings": [{"rfilename": p} for p in sorted(files)]},
                   headers={"X-Repo-Commit": sha}, entry={"repo": repo_id, "api": "info"})

    def _directories(self, files):
        dirs = set()
        for path in files:
            parts = path.split("/")[:-1]
            dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
        return dirs

    def _tree(self, repo_id, revision, folder, query):
        files = self._repo(repo_id, urllib.parse.unquote(revision))
        if files is None:
            return
        recursive = (query.get("recursive") or ["false"])[0].lower() == "true"
        dirs = self._directories(files)
        if folder and folder not in dirs:
            return self._not_found("EntryNotFound", f"{folder} does not exist on \"{revision}\"")
        prefix = folder + "/" if folder else ""

        def wanted(path):
            if not path.startswith(prefix):
                return False
            return recursive or "/" not in path[len(prefix):]

        listing = [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                   for d in sorted(dirs) if wanted(d)]
        listing += [self._entry(p, files[p]) for p in sorted(files) if wanted(p)]
        self._json(listing, entry={"repo": repo_id, "api": "tree"})

    def _viewer_info(self, repo_id):
        """The dataset viewer's /info. For datasets this large the viewer reports info computed on a first part
        only ("partial": true), which datasets ignores, as it ignores any failure of this call."""
        if repo_id not in self.hub.repos:
            return self._json({"error": "Not found."}, 404, entry={"api": "viewer-info"})
        features = {c: {"dtype": "string", "_type": "Value"} for c in FINEWEB_COLUMNS}
        self._json({"dataset_info": {"default": {"features": features}}, "pending": [], "failed": [],
                    "partial": True}, headers={"X-Revision": self.hub.shas[repo_id]},
                   entry={"repo": repo_id, "api": "viewer-info"})

    def _paths_info(self, repo_id, revision):
        files = self._repo(repo_id, urllib.parse.unquote(revision))
        if files is None:
            return
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            paths = json.loads(self._body or b"{}").get("paths", [])
        else:
            paths = urllib.parse.parse_qs(self._body.decode()).get("paths", [])
        paths = [paths] if isinstance(paths, str) else paths
        dirs = self._directories(files)
        out = []
        for p in paths:
            p = p.strip("/")
            if p in files:
                out.append(self._entry(p, files[p]))
            elif p in dirs:
                out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
        self._json(out, entry={"repo": repo_id, "api": "paths-info"})


def standin_for_tests(shared_docs, hellaswag_bytes=None, prefix=""):
    """A started stand-in serving both FineWeb repos (the same real documents) and, if given, HellaSwag (its Hub
    copy and the GitHub file), at the server's root or under `prefix`."""
    repos = {"HuggingFaceFW/fineweb-edu": fineweb_repo(shared_docs, edu=True),
             "HuggingFaceFW/fineweb": fineweb_repo(shared_docs, edu=False)}
    if hellaswag_bytes is not None:
        repos[HELLASWAG_REPO] = hellaswag_repo(hellaswag_bytes)
    raw = {HELLASWAG_PATH: hellaswag_bytes} if hellaswag_bytes is not None else {}
    return HubStandin(repos, raw, prefix).start()


@contextlib.contextmanager
def running_standin(shared_docs, hellaswag_path):
    """standin_for_tests(shared_docs, the bytes at hellaswag_path), stopped on leaving the block (a fixture's
    `with running_standin(...) as server: yield server`)."""
    with open(hellaswag_path, "rb") as f:
        server = standin_for_tests(shared_docs, f.read())
    try:
        yield server
    finally:
        server.stop()


def hub_env(standin, hf_home, **extra):
    """Environment changes for a product process that must reach the stand-in and nothing else (None: unset)."""
    # the libraries' 10 s metadata and download timeouts raised: under a loaded CI machine (two test workers beside
    # several ranks) a stand-in thread can wait its turn longer; a dead endpoint is still refused at once
    env = {"HF_ENDPOINT": standin.endpoint, "HF_HOME": str(hf_home), "HF_UPDATE_DOWNLOAD_COUNTS": "0",
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_ETAG_TIMEOUT": "60",
           "HF_HUB_DOWNLOAD_TIMEOUT": "60"}
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HTTP_PROXY",
                 "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        env[name] = None  # unset: the machine's own settings must not leak into a test
    env.update({k: (None if v is None else str(v)) for k, v in extra.items()})
    return env


if __name__ == "__main__":  # manual use: serve the test data and print the endpoint
    import sys
    import time

    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                                   "data")
    docs = [json.loads(line)["text"] for line in open(os.path.join(shared, "fineweb_edu_150docs.jsonl"))]
    server = standin_for_tests(docs, open(os.path.join(shared, "hellaswag_val.jsonl"), "rb").read())
    print(server.endpoint, flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        server.stop()
