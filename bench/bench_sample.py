"""Benchmark: sample.py's generation speed (KV cache, one token at a time) on 1 CPU thread against torch's default
thread count, in one run.

    python bench/bench_sample.py                                  # the quickstart's model size, 300 tokens
    python bench/bench_sample.py --model_dim 768 --num_layers 12 --threads 1 2 4

The model is model.py's GPT at the given size with random weights (the speed does not depend on them), fed
<|endoftext|> and then its own samples (temperature 1) through gptlab.export.generate, as sample.py does. Each
thread count runs --repeats times, interleaved (a busy machine slows them alike); the best run of each is printed,
then the ratio of each to the first. Figures: docs/using-a-model.md#sample-samplepy.
"""
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser, HelpFormatter, positive_int  # noqa: E402
from gptlab.core.errors import run_cli  # noqa: E402


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--num_layers", type=positive_int, default=6)
    p.add_argument("--model_dim", type=positive_int, default=128)
    p.add_argument("--num_heads", type=positive_int, default=4)
    p.add_argument("--vocab_size", type=positive_int, default=1001, help="the quickstart tokenizer's 1000 + 1")
    p.add_argument("--tokens", type=positive_int, default=300, help="tokens generated per run")
    p.add_argument("--repeats", type=positive_int, default=2, help="runs per thread count (the best is kept)")
    p.add_argument("--threads", type=positive_int, nargs="+", default=None,
                   help="thread counts to time (default: 1 and torch's default on this machine)")
    return p


def tokens_per_second(model, module, n_vocab, n_tokens, seed):
    import torch

    from gptlab.export.generate import cached_next_logits, generate

    eot = n_vocab - 1  # as in the project's tokenizers: <|endoftext|> is the last id
    next_logits = cached_next_logits(module.KVCache(model, eot), n_vocab=n_vocab)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    n = sum(1 for _ in generate(next_logits, [eot], n_tokens, temperature=1.0, generator=generator))
    return n / (time.perf_counter() - start)


def main(argv=None):
    args = build_parser().parse_args(argv)
    import torch

    from gptlab.checkpoint import model_source

    default_threads = torch.get_num_threads()  # torch's own choice (OMP_NUM_THREADS if set, else one per core)
    counts = args.threads or sorted({1, default_threads})
    module = model_source.import_file(model_source.MODEL_FILE, model_source.MODULE_NAME)
    config = module.GPTConfig(vocab_size=args.vocab_size, num_layers=args.num_layers, num_heads=args.num_heads,
                              model_dim=args.model_dim, window_size=1792, max_seq_len=256)
    torch.manual_seed(0)
    model = module.GPT(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {args.num_layers} layers, dim {args.model_dim}, {n_params / 1e6:.2f}M parameters; "
          f"{args.tokens} tokens a run; torch's default threads here: {default_threads}; "
          f"{os.cpu_count()} CPUs; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    torch.set_num_threads(counts[0])
    tokens_per_second(model, module, args.vocab_size, 20, 0)  # warm-up: first calls allocate and pick kernels
    best = {n: 0.0 for n in counts}
    for repeat in range(args.repeats):
        for n in counts:
            torch.set_num_threads(n)
            best[n] = max(best[n], tokens_per_second(model, module, args.vocab_size, args.tokens, repeat))
    for n in counts:
        print(f"{n} thread{'' if n == 1 else 's'}: {best[n]:8.1f} tokens/s")
    for n in counts[1:]:
        print(f"ratio {counts[0]} / {n} threads: {best[counts[0]] / best[n]:.2f}")
    return 0


if __name__ == "__main__":
    run_cli(main)
