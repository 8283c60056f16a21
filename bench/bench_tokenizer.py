"""Benchmark: our exact BPE trainer vs HuggingFace `tokenizers` and rustbpe on the same corpus and vocabulary.

    pip install tokenizers rustbpe  # tokenizers is in requirements.txt (the tests run it); rustbpe is optional
    python bench/bench_tokenizer.py --mb 20 --vocab 8192 --repeats 3
    python bench/bench_tokenizer.py --corpus my.jsonl --vocab 8192
    python bench/bench_tokenizer.py --corpus big.jsonl --vocab 65534 --ours native:cpu torch:cuda   # GPU machine

Each trainer runs as a whole subprocess (interpreter start-up and file reading included); we print wall time,
peak resident memory of the child (ru_maxrss) and the ratios ours/HF and ours/rustbpe. With --repeats N the
trainers run N times back to back (ours, rustbpe, HF) and each ratio is the median of the N pairs, which a
machine loaded by others disturbs less than single runs. HF gets the same split regex
(`Split(Regex(pattern), behavior="isolated")` then `ByteLevel(use_regex=False)`), the same 256-byte initial
alphabet and the same vocabulary size (bytes + merges, no special tokens); rustbpe (nanochat's trainer) gets the
pattern and the vocabulary size. The corpus is built reproducibly with ../shared/bench/make_corpus.py when
--corpus is not given. Last, the pre-tokenizer alone, in this process: MB of UTF-8 per CPU second (one process,
so per core) of pretokenize() with the native scanner and with regex, on the corpus and on English web text
(../shared/data/fineweb_edu_*).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser  # noqa: E402
from gptlab.core.errors import UserError  # noqa: E402
from gptlab.tokenizer.format import PATTERNS  # noqa: E402

MAKE_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "bench", "make_corpus.py")
WEB_TEXT = [os.path.join(os.path.dirname(REPO), "shared", "data", name)
            for name in ("fineweb_edu_stream_head1M.txt", "fineweb_edu_150docs.jsonl")]

HF_SCRIPT = r"""
import json, sys
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
corpus, vocab, pattern, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                              special_tokens=[], show_progress=False)
def docs():
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]
tok.train_from_iterator(docs(), trainer=trainer)
tok.save(out)
print("hf vocab", tok.get_vocab_size())
"""


RUST_SCRIPT = r"""
import json, sys
import rustbpe
corpus, vocab, pattern = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def docs():
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]
tok = rustbpe.Tokenizer()
tok.train_from_iterator(docs(), vocab, pattern=pattern)
print("rustbpe vocab", tok.vocab_size)
"""


def read_documents(path):
    """A .jsonl file's "text" fields, or a text file as one document."""
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            return [json.loads(line)["text"] for line in f if line.strip()]
        return [f.read()]


def pretokenize_rate(docs, pattern, kind, repeats):
    """MB of UTF-8 per CPU second of pretokenize() in this process (best of `repeats`)."""
    from gptlab.tokenizer.pretokenize import pretokenize

    size_mb = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) / 1e6
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        pretokenize(docs, pattern, workers=1, pretokenizer=kind)
        best = min(best, time.process_time() - start)
    return size_mb / max(best, 1e-9), size_mb


def report_pretokenize(corpus, pattern_name):
    from gptlab.tokenizer.format import PATTERNS
    from gptlab.tokenizer.pretokenize import resolve_pretokenizer

    kinds = ["regex"] + (["native"] if resolve_pretokenizer(PATTERNS[pattern_name]) == "native" else [])
    texts = [("corpus", read_documents(corpus))]
    if all(os.path.exists(p) for p in WEB_TEXT):
        texts.append(("English web text (FineWeb-Edu samples)", [d for p in WEB_TEXT for d in read_documents(p)]))
    for label, docs in texts:
        rates = {}
        for kind in kinds:
            rates[kind], size_mb = pretokenize_rate(docs, PATTERNS[pattern_name], kind, 3 if kind == "native" else 1)
            print(f"pre-tokenize {pattern_name} {kind:6s} {rates[kind]:7.1f} MB/s per core   "
                  f"({label}, {size_mb:.1f} MB)")
        if "native" in rates:
            print(f"      native / regex speed: {rates['native'] / rates['regex']:.1f}x")
    if "native" not in kinds:
        print("      (native pre-tokenizer unavailable: regex only)")


def run_child(cmd, env=None):
    """(wall seconds, peak RSS in MiB, stdout+stderr) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"benchmark child failed ({proc.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    return wall, usage.ru_maxrss / 1024, out


def main(argv=None):
    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20, help="corpus size in MB when building one")
    ap.add_argument("--vocab", type=int, default=8192, help="vocabulary size (bytes + merges)")
    ap.add_argument("--corpus", help="an existing .jsonl corpus (field text) instead of building one")
    ap.add_argument("--pattern", default="gpt4", choices=sorted(PATTERNS), help="the split pattern")
    ap.add_argument("--workers", type=int, default=None, help="our --workers (default: all cores)")
    ap.add_argument("--ours", nargs="+", default=["auto:cpu"], metavar="ENGINE:DEVICE",
                    help="our runs, each an --engine:--device pair (engines auto, native, python, torch; devices "
                         "cpu, cuda), e.g. native:cpu torch:cuda; every one is timed against the same HF run")
    ap.add_argument("--repeats", type=int, default=1, help="run the trainers this many times back to back; "
                    "ratios are medians of the pairs")
    ap.add_argument("--skip-hf", action="store_true", help="do not time HuggingFace tokenizers")
    ap.add_argument("--skip-rustbpe", action="store_true", help="do not time rustbpe")
    ap.add_argument("--skip-pretokenize", action="store_true", help="do not measure the pre-tokenizer alone")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {args.repeats}")

    with tempfile.TemporaryDirectory(prefix="bench_tok_") as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = os.path.join(tmp, f"corpus{args.mb:g}.jsonl")
            print(subprocess.run([sys.executable, MAKE_CORPUS, "--mb", str(args.mb), "--out", corpus],
                                 check=True, capture_output=True, text=True).stdout.strip())
        size_mb = os.path.getsize(corpus) / 1e6
        env = dict(os.environ, PYTHONPATH=REPO)
        others = {}  # name → (command, version)
        if not args.skip_rustbpe:
            try:
                from importlib.metadata import PackageNotFoundError, version
                others["rustbpe"] = ([sys.executable, "-c", RUST_SCRIPT, corpus, str(args.vocab),
                                      PATTERNS[args.pattern]], f"rustbpe {version('rustbpe')}")
            except PackageNotFoundError:
                print("rustbpe: not installed (pip install rustbpe), skipped")
        if not args.skip_hf:
            import tokenizers  # optional (HF); without it, the repo's tokenizers/ folder imports as an empty namespace

            if not hasattr(tokenizers, "Tokenizer"):
                sys.exit("HuggingFace tokenizers is not installed: pip install tokenizers (benchmark only)")
            others["HF"] = ([sys.executable, "-c", HF_SCRIPT, corpus, str(args.vocab), PATTERNS[args.pattern],
                             os.path.join(tmp, "hf.json")], f"tokenizers {tokenizers.__version__}")
        walls = {}  # name → wall time of each repeat
        for _ in range(args.repeats):
            for spec in args.ours:
                engine, _, device = spec.partition(":")
                ours_cmd = [sys.executable, os.path.join(REPO, "train_tokenizer.py"), "--input", corpus,
                            "--samples", str(10**12), "--vocabsize", str(args.vocab), "--pattern", args.pattern,
                            "--engine", engine, "--device", device or "cpu", "--out", tmp, "--name", "bench",
                            "--overwrite"]
                if args.workers:
                    ours_cmd += ["--workers", str(args.workers)]
                wall, rss, out = run_child(ours_cmd, env)
                walls.setdefault(spec, []).append(wall)
                print(f"ours {spec}: {wall:7.2f} s  peak RSS {rss:7.0f} MiB   ({size_mb:.1f} MB file, "
                      f"vocab {args.vocab})")
                print("      " + out.strip().splitlines()[-1])
            for name, (cmd, version) in others.items():
                wall, rss, _ = run_child(cmd, env)
                walls.setdefault(name, []).append(wall)
                print(f"{name + ':':9s}{wall:7.2f} s  peak RSS {rss:7.0f} MiB   ({version})")
        for name in others:
            for spec in args.ours:
                ratios = [o / t for o, t in zip(walls[spec], walls[name])]
                spread = (f"   (median of {len(ratios)} pairs: {min(ratios):.2f}-{max(ratios):.2f})"
                          if len(ratios) > 1 else "")
                print(f"ratio ours {spec}/{name}: {statistics.median(ratios):.2f}{spread}")
        if not args.skip_pretokenize:  # last: what it reads would count in the children's peak RSS (fork)
            report_pretokenize(corpus, args.pattern)


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    from gptlab.core.errors import run_cli  # a bad flag: one error line, exit status 2

    run_cli(main)
