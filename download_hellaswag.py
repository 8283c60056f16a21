"""Download the HellaSwag validation set (10042 rows) and verify its sha256.

    python download_hellaswag.py                                              # the Hub copy, else GitHub
    python download_hellaswag.py --source data/sample/hellaswag_val.jsonl.gz  # offline, from the bundled copy
    HF_ENDPOINT=https://hf-mirror.example python download_hellaswag.py        # the Hub copy from a Hub mirror
    HF_HUB_OFFLINE=1 python download_hellaswag.py                             # the Hub copy from the HF cache
    GPTLAB_HELLASWAG_URL=http://mirror/hellaswag_val.jsonl python download_hellaswag.py   # GitHub's from a mirror

Without --source: the Hub copy (--hub_repo, parquet, through huggingface_hub: HF_ENDPOINT, HF_HUB_OFFLINE, the
HF_HOME cache and HTTPS_PROXY count), its rows turned back into the upstream lines; if it cannot be used (missing,
no pyarrow, failing the checksum), the GitHub file ($GPTLAB_HELLASWAG_URL overrides its URL), unless offline.
Writes data/hellaswag/hellaswag_val.jsonl atomically; does nothing (and says so) when the verified file is
already there. A source whose uncompressed bytes fail the checksum is refused and nothing is written.
"""
from gptlab.core.cli import ArgumentParser, HelpFormatter, float_in, hub_repo, hub_revision, path
from gptlab.core.errors import run_cli
from gptlab.dataset.hellaswag_file import (DEFAULT_PATH, DEFAULT_TIMEOUT_S, HELLASWAG_SHA256, HELLASWAG_URL, HUB_REPO,
                                   HUB_REVISION, SAMPLE_GZ, URL_ENV, fetch_hellaswag)


MAX_TIMEOUT_S = 86400  # a day; the socket layer cannot hold much more (1e10 s overflows its clock)


def parse_args(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--source", type=path, default=None,
                        help=f"URL or local .jsonl / .jsonl.gz to copy from, and nothing else (default: the Hub "
                             f"copy --hub_repo, then ${URL_ENV} if set, a mirror, else {HELLASWAG_URL}; "
                             f"offline: {SAMPLE_GZ})")
    parser.add_argument("--hub_repo", type=hub_repo, default=HUB_REPO,
                        help=f"Hub dataset holding the validation split as parquet (default: {HUB_REPO}; "
                             "HF_ENDPOINT picks the Hub or a mirror)")
    parser.add_argument("--revision", type=hub_revision, default=HUB_REVISION,
                        help=f"branch, tag or commit of --hub_repo (default: {HUB_REVISION})")
    parser.add_argument("--out", type=path,
                        default=DEFAULT_PATH, help=f"where to write the file (default: {DEFAULT_PATH})")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out that fails the checksum (a verified file is always kept)")
    parser.add_argument("--timeout", type=float_in(0, MAX_TIMEOUT_S, low_open=True,
                                                   message=f"must be a number of seconds in (0, {MAX_TIMEOUT_S}], "
                                                           "got {value}"),
                        default=DEFAULT_TIMEOUT_S,
                        help=f"network timeout in seconds (default: {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    out, status, source = fetch_hellaswag(args.source, args.out, overwrite=args.overwrite, timeout_s=args.timeout,
                                          progress=not args.quiet, hub_repo=args.hub_repo, revision=args.revision)
    if status == "present":
        print(f"{out} is already there and verified (sha256 {HELLASWAG_SHA256[:16]}...); nothing to do")
    else:
        print(f"wrote {out} from {source} (sha256 {HELLASWAG_SHA256[:16]}... verified)")
    return 0


if __name__ == "__main__":
    run_cli(main)
