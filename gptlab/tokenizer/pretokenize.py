"""Pre-tokenization: a stream of documents → deduplicated {pre-token bytes: count}, in parallel, in bounded memory.

Each document is split on its own with the regex (so nothing spans two documents), and only the table of distinct
pre-tokens with 64-bit (Python int) counts is kept; raw text is never held whole. The parent process reads
documents and hands chunks of about `chunk_chars` characters to `workers` processes through a bounded queue; each
worker keeps its own table (`Counter.update` over `regex.findall`, both in C) and returns it once at the end, so
the parent merges only `workers` tables.

Lone surrogates (possible in JSON text) are replaced with U+FFFD before splitting, as tiktoken does when
encoding, so the trainer sees the same text the tokenizer will later encode.

`regex` is imported by the functions that split text: train_tokenizer.py --help imports this module (through
gptlab.tokenizer.job) and should not pay for it.
"""
import itertools
import multiprocessing as mp
import queue as queue_mod
import signal
import sys
from collections import Counter

from gptlab.core.errors import UserError

DEFAULT_CHUNK_CHARS = 1 << 20


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

    findall = regex.compile(pattern).findall
    counter = Counter()
    for doc in docs:
        counter.update(findall(clean_document(doc)))
    return counter


def _worker(pattern, tasks, results):
    import regex  # ~10 ms: see the module docstring

    # Ctrl-C reaches the whole process group: the parent handles it (and terminates us), so no traceback here
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    findall = regex.compile(pattern).findall
    counter = Counter()
    while True:
        docs = tasks.get()
        if docs is None:
            break
        counter.update(itertools.chain.from_iterable(map(findall, docs)))
    results.put(dict(counter))


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


def pretokenize(docs, pattern, workers=1, chunk_chars=DEFAULT_CHUNK_CHARS, progress=None):
    """Iterable of documents → ({pre-token bytes: count}, characters, documents).

    `progress(n_chars)` is called as text is handed out. `workers` <= 1 counts in this process (no start-up cost).
    """
    import regex  # ~10 ms: see the module docstring

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
                yield _check_clean(batch)
                if progress is not None:
                    progress(size)
                batch, size = [], 0
        if batch:
            chars += size
            yield _check_clean(batch)
            if progress is not None:
                progress(size)

    if workers <= 1:
        findall = regex.compile(pattern).findall
        counter = Counter()
        for batch in chunks():
            counter.update(itertools.chain.from_iterable(map(findall, batch)))
        return to_bytes_table(counter), chars, n_docs

    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    tasks = ctx.Queue(maxsize=2 * workers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(pattern, tasks, results), daemon=True) for _ in range(workers)]
    for proc in procs:
        proc.start()
    try:
        for batch in chunks():
            _put(tasks, batch, procs)
        for _ in procs:
            _put(tasks, None, procs)
        tables = [_get(results, procs) for _ in procs]
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
    tables.sort(key=len, reverse=True)
    total = Counter(tables[0])
    for table in tables[1:]:
        total.update(table)
    return to_bytes_table(total), chars, n_docs


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
