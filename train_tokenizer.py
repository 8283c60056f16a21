"""Train an exact byte-level BPE tokenizer → tokenizers/{name}_v{vocabsize}_n{samples}.pkl (+ .merges.txt).

    python   train_tokenizer.py --samples 100000 --vocabsize 1000 --name readmetokenizer --demo
    python   train_tokenizer.py --input data/sample/fineweb_edu_150docs.jsonl --samples 500000 --vocabsize 2048
    torchrun --nproc_per_node=G train_tokenizer.py --samples 1000000000 --vocabsize 65534 --name gpt4regex

--samples counts characters of text, split evenly over ranks; --vocabsize counts the 256 bytes plus the merges
(the one special token, <|endoftext|>, gets id vocabsize). Every rank pre-tokenizes its own share of the
documents with --workers processes, the deduplicated (pre-token → count) tables are combined exactly, and the
merge loop (gptlab/bpe/trainer.py) gives the same merges on CPU, GPU and any number of ranks.
"""
import argparse
import glob
import os
import platform
import sys
import time

from gptlab.errors import UserError, run_cli

DATASET_CONFIG = "sample-10BT"


def parse_args(argv=None):
    from gptlab.text_sources import HUB_DATASETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--samples", type=int, default=10_000_000, help="characters of text to train on (all ranks)")
    ap.add_argument("--vocabsize", type=int, default=8192, help="256 bytes + merges, excluding <|endoftext|>")
    ap.add_argument("--name", default="tokenizer", help="file name prefix")
    ap.add_argument("--input", nargs="+", metavar="PATH", help="local .txt/.jsonl/.parquet files or globs; "
                    "without it FineWeb(-Edu) is streamed from the HuggingFace Hub")
    ap.add_argument("--dataset", choices=sorted(HUB_DATASETS), default="fineweb-edu",
                    help=f"Hub dataset when no --input is given (config {DATASET_CONFIG})")
    ap.add_argument("--seed", type=int, default=0, help="shuffle seed of the streamed dataset")
    ap.add_argument("--pattern", default="gpt4", help="pre-tokenization regex: gpt4, gpt2 or a regex")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda (where the merge loop runs)")
    ap.add_argument("--engine", choices=["auto", "native", "python", "torch"], default="auto",
                    help="merge loop: auto = native (C, built on first use) or else python on CPU, torch on "
                         "CUDA; all give identical merges (torch on CPU is for testing)")
    ap.add_argument("--workers", type=int, default=None,
                    help="pre-tokenization processes per rank (default: this rank's share of the cores)")
    ap.add_argument("--out", default="tokenizers", help="output folder")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer file")
    ap.add_argument("--demo", action="store_true", help="print a sample coloured by token during training")
    return ap.parse_args(argv)


def validate(args):
    from gptlab.tokenizer import MAX_VOCAB, resolve_pattern

    if args.samples <= 0:
        raise UserError(f"--samples must be a positive number of characters, got {args.samples}")
    if args.vocabsize < 256:
        raise UserError(f"--vocabsize {args.vocabsize} is below 256: the 256 byte tokens are always in the "
                        "vocabulary; use --vocabsize 256 or more")
    if args.vocabsize > MAX_VOCAB:
        raise UserError(f"--vocabsize {args.vocabsize} is too large (at most {MAX_VOCAB})")
    if args.vocabsize - 256 > args.samples:
        raise UserError(f"--vocabsize {args.vocabsize} needs {args.vocabsize - 256} merges but --samples "
                        f"{args.samples} characters cannot make that many; raise --samples or lower --vocabsize")
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    if "/" in args.name or not args.name.strip():
        raise UserError(f"--name {args.name!r} must be a plain file name prefix (no '/')")
    return resolve_pattern(args.pattern)


def gpu_possible():
    """False when this machine has no GPU device node, so --device auto can skip importing torch."""
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd")) or sys.platform == "win32"


def choose_engine(args, world_size):
    """(engine, device string): the Python loop needs no torch at all."""
    device = args.device
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise UserError(f"--device {device!r} is not one of auto, cpu, cuda")
    if device == "auto" and not gpu_possible():
        device = "cpu"
    if device != "cpu":
        from gptlab.distributed import resolve_device

        device = str(resolve_device(device, int(os.environ.get("LOCAL_RANK", "0"))))
    engine = args.engine
    if engine == "auto" and device != "cpu":
        engine = "torch"
    elif engine in ("auto", "native"):
        from gptlab.bpe import native

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


def limit_chars(docs, budget, sample_box):
    """Documents until `budget` characters (the last one cut); the first document's start goes to sample_box."""
    used = 0
    for doc in docs:
        if used >= budget:
            return
        if len(doc) > budget - used:
            doc = doc[:budget - used]
        if not sample_box and doc.strip():
            sample_box.append(doc[:400])
        used += len(doc)
        yield doc


def script_content():
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.abspath(__file__)] + sorted(glob.glob(os.path.join(here, "gptlab", "bpe", "*.py")))
    parts = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            parts.append(f"# ===== {os.path.relpath(path, here)} =====\n{f.read()}")
    return "\n".join(parts)


def library_versions(uses_torch):
    import numpy
    import regex
    import tiktoken

    versions = {"python": platform.python_version(), "regex": str(regex.__version__), "numpy": str(numpy.__version__),
                "tiktoken": str(tiktoken.__version__)}
    if uses_torch:
        import torch

        versions["torch"] = str(torch.__version__)  # TorchVersion is a str subclass the safe loader refuses
    return versions


def main(argv=None):
    from gptlab.bpe.pretokenize import default_workers, pretokenize
    from gptlab.fileio import check_writable
    from gptlab.text_sources import HUB_DATASETS, ReadStats, iter_hub_documents, iter_local_documents, take_every
    from gptlab.tokenizer import EOT, ranks_sha256, save_tokenizer, tokenizer_filename

    t0 = time.time()
    args = parse_args(argv)
    pattern_name, pat_str = validate(args)
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    is_main = rank == 0
    out_path = os.path.join(args.out, tokenizer_filename(args.name, args.vocabsize, args.samples))
    check_writable(out_path, args.overwrite)  # before any work
    engine, device = choose_engine(args, world_size)
    workers = args.workers or default_workers()
    num_merges = args.vocabsize - 256

    # ---- this rank's documents → deduplicated pre-token table
    stats = ReadStats()
    if args.input:
        source = {"input": list(args.input)}
        docs = take_every(iter_local_documents(args.input, stats), rank, world_size)
    else:
        repo_id = HUB_DATASETS[args.dataset]
        source = {"dataset": repo_id, "config": DATASET_CONFIG, "seed": args.seed}
        docs = iter_hub_documents(repo_id, DATASET_CONFIG, args.seed, rank, world_size, stats=stats)
    budget = args.samples // world_size + (1 if rank < args.samples % world_size else 0)
    sample_box = []
    bar = _bar(is_main, desc=f"pre-tokenize (rank 0 of {world_size}, {workers} workers)", unit="B")
    try:
        table, chars, n_docs = pretokenize(limit_chars(docs, budget, sample_box), pat_str, workers=workers,
                                           progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    local = {"table": table, "chars": chars, "docs": n_docs, "replaced_docs": stats.replaced_docs,
             "sample": sample_box[0] if sample_box else ""}
    if os.environ.get("GPTLAB_TEST_DIE_RANK") == str(rank):  # test hook: a rank that dies after counting
        os._exit(1)

    # ---- combine the ranks' tables exactly (sum of counts)
    ctx = None
    if world_size > 1:
        from gptlab import distributed

        ctx = distributed.setup("cpu" if device == "cpu" else device)
        parts = distributed.all_gather_objects(ctx, local)
        table = {}
        for part in parts:
            for word, count in part["table"].items():
                table[word] = table.get(word, 0) + count
        parts_info = [(p["chars"], p["docs"], p["replaced_docs"], p["sample"]) for p in parts]
    else:
        parts_info = [(chars, n_docs, stats.replaced_docs, local["sample"])]
    total_chars = sum(p[0] for p in parts_info)
    total_docs = sum(p[1] for p in parts_info)
    replaced_docs = sum(p[2] for p in parts_info)
    sample = next((p[3] for p in parts_info if p[3]), "")
    try:
        if total_chars == 0:
            raise UserError("the input holds no text (0 characters in "
                            f"{total_docs} documents); check --input or the dataset")
        if total_chars < args.samples and is_main:
            print(f"note: --samples {args.samples} asked for more text than the input has; trained on all "
                  f"{total_chars} characters ({total_docs} documents) and recorded that in the metadata",
                  file=sys.stderr, flush=True)
        if replaced_docs and is_main:
            print(f"note: {replaced_docs} documents held invalid UTF-8; those bytes were replaced with U+FFFD",
                  file=sys.stderr, flush=True)

        # ---- the merge loop (every rank runs it; the results are compared below)
        result = run_merges(table, num_merges, engine, device, is_main, args.demo, sample, pat_str)
        digest = ranks_sha256(result.mergeable_ranks) + str(hash(tuple(result.merges)))
        if ctx is not None:
            digests = distributed.all_gather_objects(ctx, digest)
            if len(set(digests)) != 1:
                raise RuntimeError(f"ranks disagree on the merges ({digests}); this is a bug, please report it")
        if is_main:
            metadata = {
                "vocabsize": args.vocabsize, "samples_requested": args.samples, "chars_used": total_chars,
                "docs": total_docs, "replaced_docs": replaced_docs, "source": source,
                "pattern_name": pattern_name, "wall_time_s": round(time.time() - t0, 3), "device": device,
                "engine": engine, "world_size": world_size, "workers_per_rank": workers,
                "versions": library_versions(engine == "torch" or world_size > 1),
                "duplicates": result.duplicates, "merge_counts": result.counts,
            }
            save_tokenizer(out_path, pat_str=pat_str, pattern_name=pattern_name, merges=result.merges,
                           mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: args.vocabsize},
                           metadata=metadata, script_content=script_content(), overwrite=args.overwrite)
            dup = f", {result.duplicates} duplicate byte strings" if result.duplicates else ""
            print(f"wrote {out_path} ({args.vocabsize} tokens + {EOT}, {total_chars:,} characters, "
                  f"{total_docs:,} documents{dup}) in {time.time() - t0:.1f}s", flush=True)
        if ctx is not None:
            distributed.barrier(ctx)
    finally:
        if ctx is not None:
            distributed.cleanup(ctx)
    return out_path


def _bar(enabled, **kwargs):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(file=sys.stderr, unit_scale=True, dynamic_ncols=True, mininterval=0.5, **kwargs)


def run_merges(table, num_merges, engine, device, is_main, demo, sample, pat_str):
    from gptlab.bpe.native import train_merges_native
    from gptlab.bpe.trainer import train_merges_python, train_merges_torch

    on_merge = None
    if demo and is_main and sample:
        from gptlab.bpe.demo import render

        shows = {max(0, int(num_merges * f) - 1) for f in (0.01, 0.1, 0.5, 1.0)} if num_merges else set()
        print(render(sample, pat_str, []), flush=True)

        def show_sample(k, merges):
            if k in shows:
                print(render(sample, pat_str, merges), flush=True)

        on_merge = show_sample

    bar = _bar(is_main, total=num_merges, desc=f"merges ({engine}, {device})", unit="merge")
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


if __name__ == "__main__":
    run_cli(main)
