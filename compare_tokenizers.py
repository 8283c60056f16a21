"""Compare tokenizers: compression (bytes per token) on held-out text, per domain; the share of the vocabulary the
text uses; the longest tokens; the merges every two tokenizers have in common; encode throughput; a PNG of
compression by domain.

    python compare_tokenizers.py tokenizers/quickstart_v1000_n400000.pkl             # on its validation shards
    python compare_tokenizers.py A.pkl B.pkl --text web.jsonl code.txt shakespeare.txt --plot tokenizers.png
"""

from gptlab.core.cli import ArgumentParser, HelpFormatter, png_path, path
from gptlab.core.errors import run_cli
from gptlab.core.files import check_writable


def parse_args(argv):
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("tokenizers", type=path, nargs="+", metavar="TOKENIZER",
                        help="tokenizer .pkl files (paths or names in tokenizers/)")
    parser.add_argument("--text", type=path, nargs="+", default=[], metavar="FILE",
                        help="held-out text, one domain per file (.txt, .jsonl with field text, .parquet); default: "
                             "each tokenizer's validation shards (data/*_<name>/val_*.bin), else the bundled sample")
    parser.add_argument("--data_dir", type=path, default="data", help="where the shard folders are")
    parser.add_argument("--plot", type=png_path, metavar="PATH",
                        help="write the bytes-per-token bars by domain to this PNG")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    # heavy (~0.1 s: numpy, tabulate, the rest of gptlab.compare): after the flags, so --help answers at once
    from gptlab.compare.tokenizers import plot_report, render_report, tokenizer_report  # heavy

    if args.plot:
        check_writable(args.plot, args.overwrite)  # before any work
    report = tokenizer_report(args.tokenizers, args.text, args.data_dir)
    print(render_report(report), end="")
    if args.plot:
        plot_report(report, args.plot, overwrite=args.overwrite)
        print(f"\nwrote {args.plot}")
    return report


if __name__ == "__main__":
    run_cli(main)
