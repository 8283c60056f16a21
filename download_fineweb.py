"""Tokenize FineWeb(-Edu) (streamed from the HuggingFace Hub) or local text into llm.c / modded-nanogpt shards.

    python download_fineweb.py --num_shards 1 --version 10B --shard_size 10000000 \
        --tokenizer readmetokenizer_v1000_n100000.pkl
    python download_fineweb.py --input data/sample/fineweb_edu_150docs.jsonl --tokenizer mytok.pkl \
        --num_shards 4 --shard_size 20000 --val_tokens 10000          # offline, from local files

Writes <out>/<dataset>_<tokenizer stem>/val_000000.bin, train_000001.bin, ... plus manifest.json. Re-running the
same command resumes where it stopped; several processes split one job with --rank/--world_size (or torchrun),
each numbering its own shards (train_r000_000001.bin, ..., train_r001_000001.bin, ...: sorted names are the
reading order, rank 0's documents first).
See gptlab/dataset/fineweb.py for the exact layout, document order and resume rules.
"""
import os

from gptlab.core.cli import ArgumentParser, HelpFormatter, int_in, path
from gptlab.core.distributed import default_workers
from gptlab.core.errors import UserError, run_cli
from gptlab.dataset.fineweb import VERSIONS, hub_dataset_name, make_shards

DEFAULT_VERSION = "10Bedu"


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--tokenizer", type=path, required=True,
                   help="tokenizer file in tokenizers/ or a path to one; also GPT-2's vocab.bpe/encoder.json, a "
                        "tokenizer.json, a tiktoken file or hf:ORG/NAME (docs/tokenizer.md)")
    # default None: only an explicitly given --version can conflict with --input
    p.add_argument("--version", default=None,
                   help=f"FineWeb sample: {', '.join(VERSIONS)} (default: {DEFAULT_VERSION}; not with --input)")
    p.add_argument("--input", type=path, nargs="+", metavar="PATH", default=None,
                   help="local .txt (documents split on <|endoftext|>), .jsonl (field text) or .parquet (column "
                        "text) files or globs, instead of the Hub; the dataset folder is then local_<first stem>")
    p.add_argument("--num_shards", type=int_in(1), default=1, help="train shards in total (one val shard is extra)")
    p.add_argument("--shard_size", type=int_in(1, message="must be a positive number of tokens, got {value}"),
                   default=10_000_000, help="tokens per train shard")
    p.add_argument("--val_tokens", type=int_in(0, message="must be 0 (no validation shard) or more, got {value}"),
                   default=1_000_000, help="validation shard size: whole documents until this many tokens (0: no val "
                   "shard)")
    p.add_argument("--seed", type=int, default=0, help="seed of the document shuffle (Hub and local)")
    p.add_argument("--shuffle_buffer", type=int_in(0, message="must be 0 (keep order) or more, got {value}"),
                   default=10_000, help="documents in the shuffle buffer (0: keep the stream order)")
    p.add_argument("--out", type=path, default="data", help="parent folder of the dataset folder")
    p.add_argument("--workers", type=int_in(1), default=default_workers(),
                   help="tokenizer threads (cores / processes on this machine)")
    p.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)),
                   help="this process's part of a split job (torchrun sets RANK)")
    p.add_argument("--world_size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)),
                   help="processes splitting the job (torchrun sets WORLD_SIZE)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace shards made earlier with other settings instead of refusing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    check_flags(args)
    args.version = args.version or DEFAULT_VERSION
    return args


def check_flags(args):
    """What the flags' types cannot check: the flags that go together (before any work)."""
    if args.input is not None and args.version is not None:
        raise UserError(f"--version {args.version} selects a Hub sample, but --input reads local files instead; "
                        "drop one of them")
    if not 0 <= args.rank < args.world_size:
        raise UserError(f"--rank {args.rank} / --world_size {args.world_size}: need 0 <= rank < world_size")
    if args.input is None:
        hub_dataset_name(args.version or DEFAULT_VERSION)  # a sample the Hub has (its list is in fineweb.py)


def main(argv=None):
    args = parse_args(argv)
    manifest, out_dir = make_shards(args)
    return out_dir


if __name__ == "__main__":
    run_cli(main)
