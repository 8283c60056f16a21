"""Build a large (≥ 1 GB) benchmark corpus from the text files a machine already has, with no network.

    python bench/make_large_corpus.py --mb 1200 --out /tmp/corpus1200.jsonl --roots data/sample /usr /opt

../shared/bench/make_corpus.py stops at what its fixed sources hold (about 90 MB on this project's CPU machine);
the tokenizer's GPU target needs ≥ 1 GB. This walks the given folders in sorted order and takes every file with
a text extension (.py .md .rst .txt .c .h .cpp .cu .json .yaml .html .tex ...) that decodes as UTF-8, one
document per file, skipping exact duplicates, until --mb megabytes (10^6 bytes of UTF-8). Mostly source code and
documentation: harder and more varied than web text, and it holds many more distinct pre-tokens per MB, which is
what makes a BPE merge loop slow. Use it to compare trainers in the same run on the same machine; it prints the
file count, bytes and sha256 so two runs can tell whether they saw the same corpus.
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # gptlab, run from anywhere
TEXT_EXTENSIONS = {".py", ".pyi", ".md", ".rst", ".txt", ".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh", ".json",
                   ".yaml", ".yml", ".toml", ".cfg", ".ini", ".html", ".htm", ".css", ".js", ".ts", ".tex", ".sh",
                   ".java", ".go", ".rs", ".jsonl", ".csv", ".xml", ".ipynb"}
MAX_FILE_BYTES = 20_000_000  # one huge generated file would otherwise dominate the corpus


def text_files(roots):
    """Paths of candidate files under roots, in a deterministic order (sorted walk, symlinks not followed)."""
    seen_dirs = set()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            real = os.path.realpath(folder)
            if real in seen_dirs:
                dirs[:] = []
                continue
            seen_dirs.add(real)
            dirs.sort()
            for name in sorted(files):
                if os.path.splitext(name)[1].lower() in TEXT_EXTENSIONS:
                    path = os.path.join(folder, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        yield path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1200, help="target size in MB (10^6 bytes of UTF-8)")
    ap.add_argument("--out", required=True, help="output .jsonl path ({'text': ...} per line)")
    ap.add_argument("--roots", nargs="+", default=[sys.prefix, "/usr/share", "/usr/include", "/usr/lib", "/opt"],
                    help="folders to take text files from (default: this Python's prefix, /usr/share, /usr/include, "
                         "/usr/lib, /opt)")
    args = ap.parse_args(argv)
    if os.path.exists(args.out):
        sys.exit(f"error: {args.out} exists; remove it or choose another --out")
    target = int(args.mb * 1e6)
    total = files = 0
    seen = set()
    digest = hashlib.sha256()
    tmp = args.out + ".tmp"
    try:
        import tqdm  # noqa: F401 (optional: no bar without it)
        from gptlab.core.progress import progress_bar  # a tqdm bar on a terminal, plain lines in a log

        bar = progress_bar(total=target, unit="B", unit_scale=True, desc="corpus", file=sys.stderr)
    except ImportError:
        bar = None
    with open(tmp, "w", encoding="utf-8") as out:
        for path in text_files(args.roots):
            try:
                if os.path.getsize(path) > MAX_FILE_BYTES:
                    continue
                with open(path, "rb") as f:
                    raw = f.read()
                text = raw.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            key = hashlib.sha1(raw).digest()
            if not text.strip() or key in seen:
                continue
            seen.add(key)
            line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
            out.write(line)
            digest.update(line.encode("utf-8"))
            total += len(raw)
            files += 1
            if bar is not None:
                bar.update(len(raw))
            if total >= target:
                break
    if bar is not None:
        bar.close()
    os.replace(tmp, args.out)
    print(f"{files} files, {total} bytes, sha256 {digest.hexdigest()}")
    if total < target:
        print(f"warning: only {total} bytes of text found under {args.roots} (asked for {target})", file=sys.stderr)


if __name__ == "__main__":
    main()
