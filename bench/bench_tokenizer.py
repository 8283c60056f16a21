"""Benchmark: our exact BPE trainer vs HuggingFace `tokenizers` on the same corpus and vocabulary, in one run.

    pip install tokenizers          # in requirements.txt (the tests run this comparison)
    python bench/bench_tokenizer.py --mb 50 --vocab 32768
    python bench/bench_tokenizer.py --corpus my.jsonl --vocab 8192
    python bench/bench_tokenizer.py --corpus big.jsonl --vocab 65534 --ours native:cpu torch:cuda   # GPU machine

Each trainer runs as a whole subprocess (interpreter start-up and file reading included); we print wall time,
peak resident memory of the child (ru_maxrss) and the ratio ours/HF. HF gets the same split regex
(`Split(Regex(pattern), behavior="isolated")` then `ByteLevel(use_regex=False)`), the same 256-byte initial
alphabet and the same vocabulary size (bytes + merges, no special tokens). The corpus is built reproducibly with
../shared/bench/make_corpus.py when --corpus is not given.
"""
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser  # noqa: E402
from gptlab.tokenizer.format import PATTERNS  # noqa: E402

MAKE_CORPUS = os.path.join(os.path.dirname(REPO), "shared", "bench", "make_corpus.py")

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
    ap.add_argument("--pattern", default="gpt4", help="gpt4 or gpt2")
    ap.add_argument("--workers", type=int, default=None, help="our --workers (default: all cores)")
    ap.add_argument("--ours", nargs="+", default=["auto:cpu"], metavar="ENGINE:DEVICE",
                    help="our runs, each an --engine:--device pair (engines auto, native, python, torch; devices "
                         "cpu, cuda), e.g. native:cpu torch:cuda; every one is timed against the same HF run")
    ap.add_argument("--skip-hf", action="store_true", help="time ours only")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_tok_") as tmp:
        corpus = args.corpus
        if corpus is None:
            corpus = os.path.join(tmp, f"corpus{args.mb:g}.jsonl")
            print(subprocess.run([sys.executable, MAKE_CORPUS, "--mb", str(args.mb), "--out", corpus],
                                 check=True, capture_output=True, text=True).stdout.strip())
        size_mb = os.path.getsize(corpus) / 1e6
        env = dict(os.environ, PYTHONPATH=REPO)
        ours = []
        for spec in args.ours:
            engine, _, device = spec.partition(":")
            ours_cmd = [sys.executable, os.path.join(REPO, "train_tokenizer.py"), "--input", corpus,
                        "--samples", str(10**12), "--vocabsize", str(args.vocab), "--pattern", args.pattern,
                        "--engine", engine, "--device", device or "cpu", "--out", tmp, "--name", "bench",
                        "--overwrite"]
            if args.workers:
                ours_cmd += ["--workers", str(args.workers)]
            wall, rss, out = run_child(ours_cmd, env)
            ours.append((spec, wall))
            print(f"ours {spec}: {wall:7.2f} s  peak RSS {rss:7.0f} MiB   ({size_mb:.1f} MB file, vocab {args.vocab})")
            print("      " + out.strip().splitlines()[-1])
        if args.skip_hf:
            return
        import tokenizers  # optional (HF); without it, the repo's tokenizers/ folder imports as an empty namespace

        if not hasattr(tokenizers, "Tokenizer"):
            sys.exit("HuggingFace tokenizers is not installed: pip install tokenizers (benchmark only)")
        hf_cmd = [sys.executable, "-c", HF_SCRIPT, corpus, str(args.vocab), PATTERNS[args.pattern],
                  os.path.join(tmp, "hf.json")]
        hf_wall, hf_rss, _ = run_child(hf_cmd, env)
        print(f"HF:   {hf_wall:7.2f} s  peak RSS {hf_rss:7.0f} MiB   (tokenizers {tokenizers.__version__})")
        for spec, wall in ours:
            print(f"ratio ours {spec}/HF: {wall / hf_wall:.2f}")


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    from gptlab.core.errors import run_cli  # a bad flag: one error line, exit status 2

    run_cli(main)
