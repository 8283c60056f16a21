"""Train an exact byte-level BPE tokenizer → tokenizers/{name}_v{vocabsize}_n{samples}.pkl (+ .merges.txt).

    python   train_tokenizer.py --samples 100000 --vocabsize 1000 --name readmetokenizer --demo
    python   train_tokenizer.py --input data/sample/fineweb_edu_150docs.jsonl --samples 500000 --vocabsize 2048
    torchrun --nproc_per_node=G train_tokenizer.py --samples 1000000000 --vocabsize 65534 --name gpt4regex
    python   train_tokenizer.py --from_pretrained gpt2/ --name gpt2          # GPT-2's, Llama 3's: ids unchanged

--samples counts characters of text: with --input, the first --samples characters of the files, whatever the
world size; streamed from the Hub, --samples / world_size per rank. --vocabsize counts the 256 bytes plus the
merges (the one special token, <|endoftext|>, gets id vocabsize). Every rank pre-tokenizes its own share of the
documents with --workers processes, the deduplicated (pre-token → count) tables are combined exactly, and the
merge loop (gptlab/tokenizer/merges.py) gives the same merges on CPU, GPU and any number of ranks.
The work is gptlab/tokenizer/job.py's train_tokenizer(); this file only reads the flags and reports.
--from_pretrained converts a released tokenizer instead (GPT-2's vocab.bpe + encoder.json, a byte-level BPE
tokenizer.json, a tiktoken file such as Llama 3's tokenizer.model, or hf:ORG/NAME) into tokenizers/{name}.pkl with
every id unchanged (gptlab/tokenizer/pretrained.py); --tokenizer of the other commands also takes those directly.
"""
import os
import signal
import time

from gptlab.core.cli import ArgumentParser, FlagValueError, HelpFormatter, path
from gptlab.core.errors import StopRequested, run_cli
from gptlab.text.sources import HUB_DATASETS
from gptlab.tokenizer.format import EOT, tokenizer_filename
from gptlab.tokenizer.job import DATASET_CONFIG, train_tokenizer


def file_prefix(name):
    """--name: the start of the tokenizer's file name."""
    if not name.strip():
        raise FlagValueError(f"{name!r} is empty; give a file name prefix, e.g. --name mytok")
    if "/" in name:
        raise FlagValueError(f"{name!r} must be a plain file name prefix (no '/')")
    return name


def parse_args(argv=None):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0],
                        formatter_class=HelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--samples", type=int, default=10_000_000, help="characters of text to train on (all ranks)")
    ap.add_argument("--vocabsize", type=int, default=8192, help="256 bytes + merges, excluding <|endoftext|>")
    ap.add_argument("--name", type=file_prefix, default="tokenizer", help="file name prefix")
    ap.add_argument("--input", type=path, nargs="+", metavar="PATH", help="local .txt/.jsonl/.parquet files or globs; "
                    "without it FineWeb(-Edu) is streamed from the HuggingFace Hub")
    ap.add_argument("--dataset", choices=sorted(HUB_DATASETS), default="fineweb",
                    help=f"Hub dataset when no --input is given (config {DATASET_CONFIG})")
    ap.add_argument("--seed", type=int, default=0, help="shuffle seed of the streamed dataset")
    ap.add_argument("--pattern", default="gpt4", help="pre-tokenization regex: gpt4, gpt2 or a regex")
    ap.add_argument("--device", default="auto",
                    help="where the merge loop runs: auto (the CPU's C loop, which beats a GPU at this job; a GPU "
                         "only with --engine torch or without a C compiler), cpu, cuda or cuda:N")
    ap.add_argument("--engine", choices=["auto", "native", "python", "torch"], default="auto",
                    help="merge loop: auto = native (C, built on first use) or else python on CPU, torch on "
                         "CUDA; all give identical merges")
    ap.add_argument("--pretokenizer", choices=["auto", "native", "regex"], default="auto",
                    help="splitter: auto = native (C scanner of the gpt4/gpt2 patterns, built on first use) or "
                         "else regex, which any --pattern uses; both give identical merges")
    ap.add_argument("--workers", type=int, default=None,
                    help="pre-tokenization processes per rank (default: this rank's share of the cores)")
    ap.add_argument("--out", type=path, default="tokenizers", help="output folder")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing tokenizer file")
    ap.add_argument("--demo", action="store_true", help="print a sample coloured by token during training")
    ap.add_argument("--from_pretrained", type=path, metavar="SOURCE",
                    help="convert a released tokenizer instead of training one: GPT-2's vocab.bpe/encoder.json (or "
                         "their folder), a tokenizer.json, a tiktoken file (Llama 3's tokenizer.model) or "
                         "hf:ORG/NAME; writes OUT/NAME.pkl (--name, default the source's name)")
    args = ap.parse_args(argv)
    if args.from_pretrained:
        trained_only = [f"--{k}" for k in ("samples", "vocabsize", "input", "dataset", "seed", "pattern", "device",
                                           "engine", "pretokenizer", "workers", "demo")
                        if getattr(args, k) != ap.get_default(k)]
        if trained_only:
            ap.error(f"{', '.join(trained_only)} only apply to training; --from_pretrained converts a tokenizer "
                     "as released, so drop them (with it only --name, --out and --overwrite apply)")
    return args


def convert_pretrained(args):
    """--from_pretrained: the released tokenizer as OUT/NAME.pkl (+ .merges.txt, its tokens by id)."""
    from gptlab.tokenizer.format import read_tokenizer_file, save_tokenizer

    data = read_tokenizer_file(args.from_pretrained)
    name = args.name if args.name != "tokenizer" else data["name"]
    out_path = os.path.join(args.out, f"{name}.pkl")
    save_tokenizer(out_path, pat_str=data["pat_str"], pattern_name=data["pattern_name"], merges=[],
                   mergeable_ranks=data["mergeable_ranks"], special_tokens=data["special_tokens"],
                   metadata=data["metadata"], script_content=data["script_content"], overwrite=args.overwrite)
    print(f"wrote {out_path} ({len(data['mergeable_ranks']):,} tokens + {len(data['special_tokens'])} special, "
          f"ids unchanged, from {args.from_pretrained})", flush=True)
    return out_path


def stop_on_sigterm(signum, frame):
    """SIGTERM (kill, a scheduler's preemption) ends a single-process run as Ctrl-C does (StopRequested is a
    KeyboardInterrupt): the pre-tokenizer workers are terminated and the output's lock released on the way out, and
    run_cli exits 143. Under torchrun a rank keeps the default action (torchrun's SIGTERM must end a rank blocked in
    a collective, where no Python handler runs); its workers end with it all the same (die_with_parent)."""
    raise StopRequested(signum)


def main(argv=None):
    # not a torchrun rank: see stop_on_sigterm; the caller's handler comes back after (main called in-process)
    previous = signal.signal(signal.SIGTERM, stop_on_sigterm) if "WORLD_SIZE" not in os.environ else None
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv):
    t0 = time.time()
    args = parse_args(argv)
    if args.from_pretrained:
        return convert_pretrained(args)
    out_path = os.path.join(args.out, tokenizer_filename(args.name, args.vocabsize, args.samples))
    trained = train_tokenizer(inputs=args.input, dataset=args.dataset, seed=args.seed, samples=args.samples,
                              vocabsize=args.vocabsize, pattern=args.pattern, device=args.device, engine=args.engine,
                              workers=args.workers, demo=args.demo, out_path=out_path, overwrite=args.overwrite,
                              pretokenizer=args.pretokenizer)
    if trained.is_main:
        meta = trained.metadata
        print(f"wrote {out_path} ({args.vocabsize} tokens + {EOT}, {meta['chars_used']:,} characters, "
              f"{meta['docs']:,} documents) in {time.time() - t0:.1f}s", flush=True)
    return out_path


if __name__ == "__main__":
    run_cli(main)
