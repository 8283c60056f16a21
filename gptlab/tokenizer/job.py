"""A whole tokenizer training run in one call (train_tokenizer.py is its command line).

    from gptlab.tokenizer.job import train_tokenizer
    trained = train_tokenizer(inputs=["data/sample/fineweb_edu_150docs.jsonl"], samples=400_000, vocabsize=1000,
                              out_path="tokenizers/t_v1000_n400000.pkl")

Steps: check the settings → pick the engine and device → rank 0 checks that the output can be written and locks it
(a second trainer of the same file is refused; every rank stops with the same error) → every rank pre-tokenizes its
share of the documents → the ranks' (pre-token → count) tables are summed exactly → every rank runs the merge loop
→ the ranks' merges are compared → rank 0 saves the tokenizer with its metadata and the trainer's source. Under
torchrun (RANK / WORLD_SIZE set) the ranks meet in a process group; a plain single-process CPU run never imports
torch.

Which text: with local --input, the first `samples` characters of the files (in order, the last document cut) are
used whatever the world size; every rank reads that text and pre-tokenizes every W-th document of it, so 1 rank and
W ranks train on the same text and give byte-identical merges. From the Hub, each rank streams its own files of the
dataset (text.sources.hub_share: no file is downloaded by two ranks), shuffled within the rank, and takes
`samples / W` characters of them, so runs with different world sizes see different (equally sized) text.
"""
import contextlib
import glob
import os
import platform
import sys
import time
from dataclasses import dataclass

from gptlab.core import distributed
from gptlab.core.distributed import check_device_flag, default_workers, resolve_device
from gptlab.core.errors import UserError
from gptlab.core.files import check_writable, exclusive_lock, write_fix
from gptlab.core.paths import REPO_ROOT, git_commit, repo_path
from gptlab.core.progress import is_terminal, progress_bar
from gptlab.text.sources import (HUB_DATASETS, MAX_UTF8_BYTES, ReadStats, iter_hub_documents, iter_local_documents,
                                 take_every)
from gptlab.tokenizer import native
from gptlab.tokenizer.demo import render
from gptlab.tokenizer.format import (EOT, MAX_TOKENIZER_BYTES, MIN_BYTES_PER_MERGE, max_trainable_vocab,
                                     ranks_sha256, resolve_pattern, save_tokenizer)
from gptlab.tokenizer.merges import train_merges_python, train_merges_torch
from gptlab.tokenizer.native import train_merges_native
from gptlab.tokenizer.pretokenize import DEFAULT_CHUNK_CHARS, native_pattern_name, pretokenize, resolve_pretokenizer

DATASET_CONFIG = "sample-10BT"  # the Hub config streamed when no local inputs are given
CLI_SCRIPT = "train_tokenizer.py"  # recorded in script_content with this package's sources
SAMPLE_CHARS = 400  # --demo: the start of the first non-blank document is rendered while merging
ERROR_ACK_TIMEOUT_S = 10  # how long rank 0 waits for the other ranks to read its error


@dataclass
class TrainedTokenizer:
    result: object  # trainer.MergeResult: merges, mergeable_ranks, counts
    metadata: dict  # what the pickle records under "metadata" (the same on every rank)
    pattern_name: str
    pat_str: str
    vocabsize: int  # 256 + merges; <|endoftext|> gets this id
    is_main: bool  # rank 0 (the rank that saves)
    out_path: str = None  # where rank 0 wrote it, None when not saved


def check_settings(samples, vocabsize, workers, pattern):
    """Bad numbers or pattern → UserError naming the flag and the fix; returns (pattern name, pattern string)."""
    if samples <= 0:
        raise UserError(f"--samples must be a positive number of characters, got {samples}")
    if vocabsize < 256:
        raise UserError(f"--vocabsize {vocabsize} is below 256: the 256 byte tokens are always in the "
                        "vocabulary; use --vocabsize 256 or more")
    if vocabsize > max_trainable_vocab():  # its file would be larger than the loader reads
        raise UserError(f"--vocabsize {vocabsize:,} is too large: each merge takes at least {MIN_BYTES_PER_MERGE} "
                        f"bytes in the tokenizer file, which the loader reads only up to "
                        f"{MAX_TOKENIZER_BYTES // 2**20} MiB; the largest --vocabsize is {max_trainable_vocab():,}")
    if vocabsize - 256 >= MAX_UTF8_BYTES * samples:  # <= 4 bytes a character: at most 4 * samples - 1 merges
        raise UserError(f"--vocabsize {vocabsize} needs {vocabsize - 256} merges but --samples "
                        f"{samples} characters cannot make that many; raise --samples or lower --vocabsize")
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    return resolve_pattern(pattern)


def gpu_possible():
    """False when this machine has no GPU device node, so device "auto" can skip importing torch."""
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd")) or sys.platform == "win32"


def choose_engine(device="auto", engine="auto"):
    """(engine, device string) for the merge loop: the native and Python loops need no torch at all."""
    check_device_flag(device)
    if device == "auto":
        # The C loop on the CPU unless the torch loop is asked for (or there is no C compiler and maybe a GPU):
        # at 921 MB / vocab 65534 the C loop took 8.5 s for 65,278 merges (0.13 ms each, 6% of the run), while the
        # torch loop launches ~125 small kernels per merge, which alone costs more than that on a GPU.
        wants_torch = engine == "torch" or (engine == "auto" and not native.available())
        if not (wants_torch and gpu_possible()):
            device = "cpu"
    if device != "cpu":
        device = str(resolve_device(device))
    if engine == "auto" and device != "cpu":
        engine = "torch"
    elif engine in ("auto", "native"):
        if native.available():
            engine = "native"
        elif engine == "native":
            raise UserError(f"--engine native is unavailable ({native.unavailable_reason()}); install a C "
                            "compiler or use --engine python")
        else:
            engine = "python"
            print(f"note: the C merge loop is unavailable ({native.unavailable_reason()}); using the slower "
                  "pure-Python loop (identical results)", file=sys.stderr, flush=True)
    if engine in ("python", "native") and device != "cpu":
        raise UserError(f"--engine {engine} runs on the CPU only; use --device cpu or --engine torch")
    return engine, device


def choose_pretokenizer(pat_str, choice="auto", announce=True):
    """"native" or "regex" for --pretokenizer `choice` (pretokenize.resolve_pretokenizer); auto falling back to
    regex for a built-in pattern (no C compiler) is announced in a note."""
    kind = resolve_pretokenizer(pat_str, choice)
    if choice == "auto" and kind == "regex" and native_pattern_name(pat_str) is not None and announce:
        print(f"note: the native pre-tokenizer is unavailable ({native.scanner_unavailable_reason()}); using the "
              "slower regex splitter (identical results)", file=sys.stderr, flush=True)
    return kind


def choose_workers(requested, budget_chars, announce=True):
    """Pre-tokenization processes for one rank: the request (default: this rank's cores), lowered to this rank's
    cores and to one per chunk of its `budget_chars` characters (workers are handed whole chunks, so more would
    sit idle). A lowered request is announced in a note."""
    cores = default_workers()
    chunks = max(1, -(-budget_chars // DEFAULT_CHUNK_CHARS))
    workers = min(requested or cores, cores, chunks)
    if requested and workers < requested and announce:
        print(f"note: --workers {requested} lowered to {workers}: each rank uses at most its {cores} core(s) and "
              f"one worker per {DEFAULT_CHUNK_CHARS:,} characters of its text ({budget_chars:,} here)",
              file=sys.stderr, flush=True)
    return workers


def rank_budget(samples, rank, world_size):
    """This rank's share of `samples` characters (the first `samples % world_size` ranks take one more)."""
    return samples // world_size + (1 if rank < samples % world_size else 0)


def limit_chars(docs, budget, sample_box):
    """Documents until `budget` characters (the last one cut); the first non-blank one's start goes to sample_box.

    Stops without reading the document after the budget, so read statistics count only the text used."""
    used = 0
    if budget <= 0:
        return
    for doc in docs:
        if len(doc) > budget - used:
            doc = doc[:budget - used]
        if not sample_box and doc.strip():
            sample_box.append(doc[:SAMPLE_CHARS])
        used += len(doc)
        yield doc
        if used >= budget:
            return


def open_documents(inputs, dataset, seed, samples, rank, world_size, stats, sample_box):
    """(this rank's documents, already cut to the character budget; source description for the metadata).

    Local files: the global budget is applied to the whole stream first (exactly the text one rank would use), then
    the documents are dealt out round robin, so the text does not depend on the world size. The Hub: each rank
    streams its own part and takes its share of the budget. sample_box gets the first non-blank document's start."""
    if inputs:
        source = {"input": list(inputs)}
        docs = take_every(limit_chars(iter_local_documents(inputs, stats, max_chars=samples), samples, sample_box),
                         rank, world_size)
    else:
        repo_id = HUB_DATASETS[dataset]
        source = {"dataset": repo_id, "config": DATASET_CONFIG, "seed": seed}
        docs = limit_chars(iter_hub_documents(repo_id, DATASET_CONFIG, seed, rank, world_size, stats=stats),
                           rank_budget(samples, rank, world_size), sample_box)
    return docs, source


def combine_tables(tables):
    """{pre-token bytes: count} tables → one table with the counts summed (exact: Python ints)."""
    table = {}
    for part in tables:
        for word, count in part.items():
            table[word] = table.get(word, 0) + count
    return table


def merges_digest(result):
    """A fingerprint of the merges and ranks, compared across ranks."""
    return ranks_sha256(result.mergeable_ranks) + str(hash(tuple(result.merges)))


def script_content():
    """train_tokenizer.py and every gptlab/tokenizer/*.py and *.c source (the C merge loop is the default engine),
    each under a `# ===== path =====` header."""
    cli = repo_path(CLI_SCRIPT)
    bpe_dir = repo_path("gptlab", "tokenizer")
    sources = sorted(glob.glob(os.path.join(bpe_dir, "*.py")) + glob.glob(os.path.join(bpe_dir, "*.c")))
    paths = ([cli] if os.path.exists(cli) else []) + sources
    parts = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            parts.append(f"# ===== {os.path.relpath(path, REPO_ROOT)} =====\n{f.read()}")
    return "\n".join(parts)


def library_versions(uses_torch):
    # lazy: train_tokenizer.py --help imports this module, and these are only read for their versions here
    import numpy  # ~45 ms
    import regex  # ~10 ms
    import tiktoken  # ~15 ms

    versions = {"python": platform.python_version(), "regex": str(regex.__version__), "numpy": str(numpy.__version__),
                "tiktoken": str(tiktoken.__version__)}
    if uses_torch:
        import torch  # heavy (~1 s): only when the run used it

        versions["torch"] = str(torch.__version__)  # TorchVersion is a str subclass the safe loader refuses
    return versions


def _bar(enabled, **kwargs):
    if not enabled:
        return None
    return progress_bar(file=sys.stderr, unit_scale=True, dynamic_ncols=True, mininterval=0.5, **kwargs)


def _read_rate_updater(bar, stats):
    """progress(n_chars) for the pre-tokenize bar that also shows the read rate (MB/s of input, documents/s),
    which for a Hub stream is the download's."""
    t0 = time.perf_counter()

    def update(n_chars):
        elapsed = max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix_str(f"{stats.bytes_read / elapsed / 1e6:.1f} MB/s, {stats.docs / elapsed:.0f} docs/s",
                            refresh=False)
        bar.update(n_chars)

    return update


def run_merges(table, num_merges, engine, device, show_progress=False, demo_sample="", pat_str=None):
    """The merge loop on `engine`; a non-empty demo_sample is printed split into tokens as the merges grow."""
    on_merge = None
    if demo_sample:
        shows = {max(0, int(num_merges * f) - 1) for f in (0.01, 0.1, 0.5, 1.0)} if num_merges else set()
        colour = is_terminal(sys.stdout)  # escape codes only where a terminal draws them
        print(render(demo_sample, pat_str, [], colour), flush=True)

        def show_sample(k, merges):
            if k in shows:
                print(render(demo_sample, pat_str, merges, colour), flush=True)

        on_merge = show_sample

    bar = _bar(show_progress, total=num_merges, desc=f"merges ({engine}, {device})", unit="merge")
    progress = bar.update if bar is not None else None
    try:
        if engine == "native":
            return train_merges_native(table, num_merges, progress=progress, on_merge=on_merge)
        if engine == "python":
            return train_merges_python(table, num_merges, progress=progress, on_merge=on_merge)
        return train_merges_torch(table, num_merges, device=device, progress=progress, on_merge=on_merge)
    finally:
        if bar is not None:
            bar.close()


def save(trained, out_path, overwrite=False):
    """Write the tokenizer pickle (+ .merges.txt) at out_path; sets and returns trained.out_path. A failed write
    (a full disk) is a UserError, with nothing half-written left."""
    result = trained.result
    try:
        save_tokenizer(out_path, pat_str=trained.pat_str, pattern_name=trained.pattern_name, merges=result.merges,
                       mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: trained.vocabsize},
                       metadata=trained.metadata, script_content=script_content(),
                       script_commit=git_commit(REPO_ROOT), overwrite=overwrite)
    except OSError as err:
        raise UserError(f"could not write the tokenizer {out_path} ({err.strerror or err}); nothing half-written "
                        f"was left; {write_fix(err)}, then train again") from None
    trained.out_path = out_path
    return out_path


def lock_path_for(out_path):
    """The lock file beside a tokenizer file: tokenizers/.NAME.pkl.lock."""
    folder, name = os.path.split(out_path)
    return os.path.join(folder, f".{name}.lock")


@contextlib.contextmanager
def claim_output(out_path, overwrite=False):
    """Check that out_path can be written (by writing in its folder) and hold its lock for the block, so a second
    trainer of the same file is refused at once, naming this one."""
    check_writable(out_path, overwrite)  # before the lock creates the folder
    with exclusive_lock(lock_path_for(out_path), f"tokenizer {out_path}"):
        check_writable(out_path, overwrite)  # again: a writer that just finished may have made it
        yield


def on_rank0_for_all(store, key, action):
    """Run action() on rank 0 only (the rank that writes) and tell every rank its outcome through `store`
    (distributed.rendezvous_store; None: a single process) under `key`: a UserError it raises is raised on every
    rank, so all ranks stop together with the same clear error instead of waiting for rank 0 or being killed."""
    if store is None:
        action()
        return
    others = int(os.environ.get("WORLD_SIZE", "1")) - 1
    if int(os.environ.get("RANK", "0")) == 0:
        try:
            action()
        except UserError as err:
            store.set(key, "error:" + str(err))
            # wait (briefly) until the others have read it, so they exit with it rather than being killed
            deadline = time.time() + ERROR_ACK_TIMEOUT_S
            while store.add(key + "/read", 0) < others and time.time() < deadline:
                time.sleep(0.05)
            raise
        store.set(key, "ok")
        return
    outcome = store.get(key).decode()  # waits for rank 0
    if outcome.startswith("error:"):
        store.add(key + "/read", 1)
        raise UserError(outcome[len("error:"):])


def train_tokenizer(*, samples, vocabsize, inputs=None, dataset="fineweb-edu", seed=0, pattern="gpt4",
                    device="auto", engine="auto", workers=None, demo=False, progress=True, out_path=None,
                    overwrite=False, pretokenizer="auto"):
    """Train on `samples` characters of `inputs` (local files/globs) or, without them, the Hub `dataset`.

    With out_path, before any work rank 0 refuses an existing file (unless overwrite) or an unwritable folder and
    locks the file against a second trainer; it saves there at the end. Under torchrun every rank calls this; all
    return the same TrainedTokenizer. progress: tqdm bars on rank 0; demo: rank 0 prints a sample coloured by
    token during training. pretokenizer: auto, native (the C scanner, built-in patterns) or regex; all give the
    same merges."""
    t0 = time.time()
    pattern_name, pat_str = check_settings(samples, vocabsize, workers, pattern)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    is_main = rank == 0
    requested_device = device
    engine, device = choose_engine(device, engine)
    pretokenizer = choose_pretokenizer(pat_str, pretokenizer, announce=is_main)
    workers = choose_workers(workers, rank_budget(samples, rank, world_size), announce=is_main)
    num_merges = vocabsize - 256

    store = None
    if world_size > 1:
        store = distributed.rendezvous_store()  # the process group itself starts after pre-tokenization
    ctx = None
    with contextlib.ExitStack() as held:  # the output's lock, held until the end
        if out_path is not None:
            on_rank0_for_all(store, "gptlab/train_tokenizer/claim",
                             lambda: held.enter_context(claim_output(out_path, overwrite)))
        try:
            # ---- this rank's documents → deduplicated pre-token table
            stats = ReadStats()
            sample_box = []
            docs, source = open_documents(inputs, dataset, seed, samples, rank, world_size, stats, sample_box)
            bar = _bar(is_main and progress, desc=f"pre-tokenize (rank 0 of {world_size}, {workers} workers)",
                       unit="char")
            try:
                update = _read_rate_updater(bar, stats) if bar is not None else None
                table, chars, n_docs = pretokenize(docs, pat_str, workers=workers, pretokenizer=pretokenizer,
                                                   progress=update)
            finally:
                if bar is not None:
                    bar.close()
            # every rank reads all the local text, so its count of replaced documents is already the total: rank 0
            # reports it
            replaced_docs = stats.replaced_docs if (not inputs or is_main) else 0
            local = {"table": table, "chars": chars, "docs": n_docs, "replaced_docs": replaced_docs,
                     "sample": sample_box[0] if sample_box else ""}

            # ---- combine the ranks' tables exactly (sum of counts)
            if world_size > 1:
                ctx = distributed.setup("cpu" if device == "cpu" else requested_device)  # it resolves it again
                parts = distributed.all_gather_objects(ctx, local)
                table = combine_tables(p["table"] for p in parts)
            else:
                parts = [local]
            total_chars = sum(p["chars"] for p in parts)
            total_docs = sum(p["docs"] for p in parts)
            replaced_docs = sum(p["replaced_docs"] for p in parts)
            sample = next((p["sample"] for p in parts if p["sample"]), "")
            if total_chars == 0:
                raise UserError("the input holds no text (0 characters in "
                                f"{total_docs} documents); check --input or the dataset")
            if total_chars < samples and is_main:
                print(f"note: --samples {samples} asked for more text than the input has; trained on all "
                      f"{total_chars} characters ({total_docs} documents) and recorded that in the metadata",
                      file=sys.stderr, flush=True)
            if replaced_docs and is_main:
                print(f"note: {replaced_docs} documents held invalid UTF-8; those bytes were replaced with U+FFFD",
                      file=sys.stderr, flush=True)

            # ---- the merge loop (every rank runs it; the results are compared below)
            result = run_merges(table, num_merges, engine, device, show_progress=is_main and progress,
                                demo_sample=sample if demo and is_main else "", pat_str=pat_str)
            if ctx is not None:
                digests = distributed.all_gather_objects(ctx, merges_digest(result))
                if len(set(digests)) != 1:
                    raise RuntimeError(f"ranks disagree on the merges ({digests}); this is a bug, please report it")
            metadata = {
                "vocabsize": vocabsize, "samples_requested": samples, "chars_used": total_chars,
                "docs": total_docs, "replaced_docs": replaced_docs, "source": source,
                "pattern_name": pattern_name, "wall_time_s": round(time.time() - t0, 3), "device": device,
                "engine": engine, "pretokenizer": pretokenizer, "world_size": world_size, "workers_per_rank": workers,
                "versions": library_versions(engine == "torch" or world_size > 1),
                "merge_counts": result.counts,
            }
            trained = TrainedTokenizer(result=result, metadata=metadata, pattern_name=pattern_name,
                                       pat_str=pat_str, vocabsize=vocabsize, is_main=is_main)
            if out_path is not None:  # rank 0 saves; the others end only once it has, with its error if any
                on_rank0_for_all(store, "gptlab/train_tokenizer/save", lambda: save(trained, out_path, overwrite))
        finally:
            if ctx is not None:
                distributed.cleanup(ctx)
    return trained
