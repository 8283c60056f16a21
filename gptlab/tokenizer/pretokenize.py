"""Pre-tokenization: a stream of documents → deduplicated {pre-token bytes: count}, in parallel, in bounded memory.

Each document is split on its own (so nothing spans two documents), and only the table of distinct pre-tokens
with their counts is kept; raw text is never held whole. The parent process reads documents and hands chunks of
about `chunk_chars` characters to `workers` processes through a bounded queue; each worker keeps its own table
and returns it once at the end, so the parent merges only `workers` tables.

Two splitters give the same table: "native" (the built-in patterns gpt4 and gpt2 scanned and counted in C,
native.NativeCounter: chunks travel as UTF-8 bytes, tables as packed arrays; ~10x faster) and "regex"
(`Counter.update` over `regex.findall`, any pattern). "auto" picks native for a built-in pattern when the C
scanner compiled (see resolve_pretokenizer).

Lone surrogates (possible in JSON text) are replaced with U+FFFD before splitting, as tiktoken does when
encoding, so the trainer sees the same text the tokenizer will later encode.

`regex` is imported by the functions that split text: train_tokenizer.py --help imports this module (through
gptlab.tokenizer.job) and should not pay for it.
"""
import functools
import itertools
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
from collections import Counter

from gptlab.core.errors import UserError
from gptlab.core.processes import die_with_parent
from gptlab.tokenizer import native
from gptlab.tokenizer.format import PATTERNS

PRETOKENIZERS = ("auto", "native", "regex")

DEFAULT_CHUNK_CHARS = 1 << 20
PARENT_POLL_S = 2.0  # how often a waiting worker checks that its parent is alive
SPLIT_TIMEOUT_S = 10.0  # a user pattern may take this long per document, plus SPLIT_S_PER_CHAR per character:
SPLIT_S_PER_CHAR = 1e-5  # ~100x the time gpt4 takes with regex (10 MB/s), so only a runaway pattern reaches it


def clean_document(doc):
    """Text as tiktoken encodes it: lone surrogates become U+FFFD."""
    try:
        doc.encode("utf-8")
        return doc
    except UnicodeEncodeError:
        return doc.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def count_documents(docs, pattern):
    """Single-process reference path: {pre-token str: count} of an iterable of documents."""
    import regex  # ~10 ms: see the module docstring

    split = splitter(regex.compile(pattern), pattern_timeout(pattern))
    counter = Counter()
    for doc in docs:
        counter.update(split(clean_document(doc)))
    return counter


class _RegexCount:
    """A worker's table on the regex path: {pre-token str: count}."""

    def __init__(self, pattern, timeout_s):
        import regex  # ~10 ms: see the module docstring

        self.split = splitter(regex.compile(pattern), timeout_s)
        self.counter = Counter()

    def add(self, docs):
        self.counter.update(itertools.chain.from_iterable(map(self.split, docs)))

    def result(self):
        return dict(self.counter)


class _NativeCount:
    """A worker's table on the native path: a C table, sent back packed (NativeCounter.export)."""

    def __init__(self, pattern_name):
        self.counter = native.NativeCounter(pattern_name)

    def add(self, docs):
        self.counter.scan(docs)

    def result(self):
        exported = self.counter.export()
        self.counter.close()  # before the packed copy is pickled or merged: one table at a time
        return exported


def _worker(make_count, tasks, results, parent_pid=None):
    if parent_pid is not None:  # end with the parent, instead of waiting forever on a queue nobody fills; where
        die_with_parent(parent_pid, signal.SIGKILL)  # prctl is missing, the wait below also checks the parent
    # Ctrl-C reaches the whole process group: the parent handles it (and terminates us), so no traceback here;
    # SIGTERM (the parent's terminate()) ends us at once, whatever handler the parent had when it forked us
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    count = make_count()
    while True:
        try:
            docs = tasks.get(timeout=PARENT_POLL_S)
        except queue_mod.Empty:
            if parent_pid is not None and os.getppid() != parent_pid:
                os._exit(1)  # orphaned: nobody will read our table
            continue
        if docs is None:
            break
        try:
            count.add(docs)
        except UserError as err:
            results.put(err)
            return
    results.put(count.result())


def splitter(compiled, timeout_s=None):
    """doc → its pre-tokens (compiled.findall). With timeout_s (a user's pattern), a document that takes longer
    than timeout_s + SPLIT_S_PER_CHAR per character is a UserError naming the pattern, not an endless hang: a
    pattern can backtrack catastrophically on some text. The built-in patterns pass None: regex's timeout check
    makes findall 2-3x slower (0.27 s → 0.83 s for 10 MB of FineWeb-Edu with gpt4), and they cannot backtrack
    that way (possessive quantifiers, no nested repetition)."""
    findall = compiled.findall
    if timeout_s is None:
        return findall

    def split(doc):
        limit = timeout_s + SPLIT_S_PER_CHAR * len(doc)
        try:
            return findall(doc, timeout=limit)
        except TimeoutError:
            raise UserError(f"the pre-tokenization pattern {compiled.pattern!r} took over {limit:.0f} s to split "
                            f"one document of {len(doc):,} characters (catastrophic backtracking: nested "
                            "repetition such as (a+)+ or (\\w|\\w\\w)+); rewrite it with possessive quantifiers "
                            "(++, *+) or atomic groups, or use --pattern gpt4 / gpt2") from None

    return split


def pattern_timeout(pattern):
    """The per-document time limit for splitting with `pattern`: None (no limit, full speed) for the built-in
    patterns, SPLIT_TIMEOUT_S for any other."""
    return None if pattern in PATTERNS.values() else SPLIT_TIMEOUT_S


def to_bytes_table(str_counts):
    """{str: count} → {UTF-8 bytes: count} (distinct strings give distinct bytes, so no counts collide)."""
    return {word.encode("utf-8"): count for word, count in str_counts.items()}


def _check_clean(docs):
    """Replace lone surrogates in place; cheap check on the joined chunk first."""
    try:
        "".join(docs).encode("utf-8")
    except UnicodeEncodeError:
        docs[:] = [clean_document(d) for d in docs]
    return docs


def _encode_clean(docs):
    """The documents as UTF-8 bytes (what the native scanner reads), lone surrogates replaced as clean_document
    does."""
    out = []
    for doc in docs:
        try:
            out.append(doc.encode("utf-8"))
        except UnicodeEncodeError:
            out.append(clean_document(doc).encode("utf-8"))
    return out


def resolve_pretokenizer(pattern, choice="auto"):
    """The splitter for `pattern` (a pattern string): "native" or "regex". auto: native for a built-in pattern
    (format.PATTERNS) when the C scanner compiled, else regex; native where it cannot run is a UserError."""
    if choice not in PRETOKENIZERS:
        raise UserError(f"--pretokenizer {choice!r} is not one of {', '.join(PRETOKENIZERS)}")
    if choice == "regex":
        return "regex"
    name = native_pattern_name(pattern)
    if choice == "native":
        if name is None:
            raise UserError("--pretokenizer native splits only the built-in patterns (--pattern gpt4 or gpt2); "
                            "use --pretokenizer regex (or auto) for a custom --pattern")
        if not native.scanner_available():
            raise UserError(f"--pretokenizer native is unavailable ({native.scanner_unavailable_reason()}); "
                            "install a C compiler or use --pretokenizer regex")
    return "native" if name is not None and native.scanner_available() else "regex"


def native_pattern_name(pattern):
    """The name of `pattern` among the patterns the C scanner implements, or None."""
    return next((name for name in native.SCAN_PATTERNS if PATTERNS[name] == pattern), None)


def pretokenize(docs, pattern, workers=1, chunk_chars=DEFAULT_CHUNK_CHARS, progress=None, pretokenizer="auto"):
    """Iterable of documents → ({pre-token bytes: count}, characters, documents).

    `progress(n_chars)` is called as text is handed out. `workers` <= 1 counts in this process (no start-up cost).
    pretokenizer: auto, native or regex (resolve_pretokenizer); every choice gives the same table.
    """
    use_native = resolve_pretokenizer(pattern, pretokenizer) == "native"
    prepare = _encode_clean if use_native else _check_clean
    if use_native:
        make_count = functools.partial(_NativeCount, native_pattern_name(pattern))
    else:
        make_count = functools.partial(_RegexCount, pattern, pattern_timeout(pattern))
    chars = 0
    n_docs = 0

    def chunks():
        nonlocal chars, n_docs
        batch, size = [], 0
        for doc in docs:
            batch.append(doc)
            size += len(doc)
            n_docs += 1
            if size >= chunk_chars:
                chars += size
                yield prepare(batch)
                if progress is not None:
                    progress(size)
                batch, size = [], 0
        if batch:
            chars += size
            yield prepare(batch)
            if progress is not None:
                progress(size)

    if workers <= 1:
        count = make_count()
        for batch in chunks():
            count.add(batch)
        tables = [count.result()]
    else:
        tables = _run_workers(chunks(), make_count, workers)
    if use_native:
        total = native.NativeCounter(native_pattern_name(pattern))
        while tables:
            total.add(tables.pop())  # each packed table is freed once added
        return total.into_dict(), chars, n_docs
    tables.sort(key=len, reverse=True)
    total = Counter(tables[0])
    for table in tables[1:]:
        total.update(table)
    return to_bytes_table(total), chars, n_docs


def _run_workers(chunks, make_count, workers):
    """Hand `chunks` to `workers` processes running make_count(); their tables (count.result()), in order of
    arrival."""
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    tasks = ctx.Queue(maxsize=2 * workers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(make_count, tasks, results, os.getpid()), daemon=True)
             for _ in range(workers)]
    for proc in procs:
        proc.start()
    try:
        for batch in chunks:
            _put(tasks, batch, procs)
        for _ in procs:
            _put(tasks, None, procs)
        tables = []
        for _ in procs:
            table = _get(results, procs)
            if isinstance(table, UserError):  # a worker's pattern timed out
                raise table
            tables.append(table)
    except BaseException:
        # Ctrl-C or a dead worker: stop the workers and do not let the queues' feeder threads wait at exit for
        # pipes nobody reads any more (that would hang the process forever)
        for queue in (tasks, results):
            queue.cancel_join_thread()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        raise
    for proc in procs:
        proc.join()
    return tables


def _alive_or_raise(procs):
    dead = [p for p in procs if p.exitcode not in (None, 0)]
    if dead:
        raise UserError(f"a pre-tokenization worker died (exit code {dead[0].exitcode}: killed, often for lack "
                        "of memory); try fewer --workers or a smaller --samples")


def _put(queue, item, procs):
    while True:
        try:
            queue.put(item, timeout=1.0)
            return
        except queue_mod.Full:
            _alive_or_raise(procs)


def _get(queue, procs):
    while True:
        try:
            return queue.get(timeout=1.0)
        except queue_mod.Empty:
            _alive_or_raise(procs)
