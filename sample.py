"""Generate text from a train_gpt.py checkpoint, streamed token by token.

    python sample.py experiments/RUN/checkpoints/step_000120.pt --prompt "Once upon a time," --max_tokens 100
    python sample.py CHECKPOINT --interactive            # one prompt per line, until EOF (Ctrl-D)
    python sample.py CHECKPOINT --temperature 0          # greedy

Each prompt starts a new document (<|endoftext|> + its tokens; an <|endoftext|> inside it starts another) and is
continued until the model ends the document or --max_tokens. A KV cache keeps, per layer, the keys and values that
layer's sliding window can still see; --no_cache runs a full forward pass per token instead (same tokens, slower).
After each generation, a line on stderr gives the tokens, tokens/s and CPU threads.

--interactive at a terminal: arrow keys edit the line and Up recalls earlier prompts (readline, in memory only);
the continuation starts on the line after the one typed; Ctrl-C stops the generation under way and returns to
"> "; Ctrl-D at "> " ends. From a pipe: stdout gets each prompt followed by its continuation, as --prompt prints.
"""
import sys
import time

from gptlab.core.cli import (MAX_THREADS, ArgumentParser, HelpFormatter, float_in, int_in, path, positive_int,
                             threads_flag)
from gptlab.core.distributed import resolve_device
from gptlab.core.errors import UserError, run_cli


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("checkpoint", type=path,
                   help="a train_gpt.py checkpoint (.pt, or the folder of a --shard_params run)")
    p.add_argument("--prompt", default="", help="text to continue (default: empty, a document from its start)")
    p.add_argument("--interactive", action="store_true", help="read prompts from stdin, one per line, until EOF "
                   "(Ctrl-D); at a terminal with line editing and history")
    p.add_argument("--max_tokens", type=positive_int, default=200, help="most tokens generated per prompt")
    p.add_argument("--temperature", type=float_in(0, message="must be >= 0 (0: greedy), got {value}"),
                   default=0.8, help="softmax temperature (0: greedy)")
    p.add_argument("--top_k", type=positive_int, default=None, help="sample among the k most likely tokens only")
    p.add_argument("--top_p", type=float, default=None,
                   help="sample among the most likely tokens whose probabilities reach p (nucleus sampling)")
    p.add_argument("--seed", type=int_in(0, 2**63 - 1, "must be between 0 and 2**63 - 1, got {value}"), default=0,
                   help="seed of the sampler")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=threads_flag, default="auto", help="CPU threads torch uses, 1 to "
                   f"{MAX_THREADS} (auto: $OMP_NUM_THREADS when set, else 1, fastest for a token at a time)")
    p.add_argument("--no_cache", action="store_true", help="a full forward pass per token, no KV cache")
    p.add_argument("--trust_model_code", action="store_true", help="run the model code of a checkpoint trained on "
                   "another machine (it differs from model.py; read it first)")
    return p


def check_flags(args):
    # the one check not declared with its flag: tests/test_sample.py pins this exact line (no "see --help" part)
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UserError(f"--top_p must be in (0, 1], got {args.top_p}")


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_flags(args)
    # heavy (torch, ~1.5 s): imported once the flags are checked, so --help and a bad flag answer at once
    import torch  # heavy

    from gptlab.export.console import PromptReader
    from gptlab.export.generate import (TextStream, cached_next_logits, generate, generation_threads,  # torch
                                        uncached_next_logits)
    from gptlab.checkpoint import checkpointing  # torch
    from gptlab.checkpoint.model_source import load_model, logits_fn  # torch

    threads = generation_threads(args.threads)
    if threads is not None:
        torch.set_num_threads(threads)
    device = resolve_device(args.device)
    model, module, ckpt = load_model(args.checkpoint, device, args.trust_model_code)  # the checkpoint's own model.py
    tok = checkpointing.checkpoint_tokenizer(ckpt, args.checkpoint)
    n_vocab = tok.encoding.n_vocab
    generator = torch.Generator(device="cpu").manual_seed(args.seed)
    prompts = PromptReader() if args.interactive else None
    for prompt in [args.prompt] if prompts is None else prompts:
        prompt_tokens = [tok.eot] + tok.encoding.encode(prompt, allowed_special="all")
        if args.no_cache:
            next_logits = uncached_next_logits(logits_fn(model, tok.eot, n_vocab), device)
        else:
            next_logits = cached_next_logits(module.KVCache(model, tok.eot), device, n_vocab)
        stream = TextStream(tok.encoding)
        if prompts is None or prompts.echo:  # at a terminal the typed line is on the screen already
            print(prompt, end="", flush=True)
        budget, outcome = args.max_tokens, "--max_tokens reached"
        limit = getattr(model, "context_limit", None)  # a learned position table (gpt2.py): no token past it
        if limit is not None:
            if len(prompt_tokens) >= limit:
                raise UserError(f"the prompt is {len(prompt_tokens)} tokens with <|endoftext|>, and this model reads "
                                f"at most {limit}; shorten it")
            if limit - len(prompt_tokens) < budget:
                budget, outcome = limit - len(prompt_tokens), f"the model's context of {limit} tokens is full"
        start, n_tokens = time.perf_counter(), 0
        try:
            for token in generate(next_logits, prompt_tokens, budget, temperature=args.temperature,
                                  top_k=args.top_k, top_p=args.top_p, generator=generator, stop_token=tok.eot):
                if token == tok.eot:
                    outcome = "the model ended the document"
                    break
                n_tokens += 1
                print(stream.add(token), end="", flush=True)
        except KeyboardInterrupt:
            if prompts is None:
                raise
            outcome = "stopped (Ctrl-C)"  # this generation only: back to "> "
        print(stream.flush(), flush=True)
        seconds = time.perf_counter() - start
        n_threads = torch.get_num_threads()
        print(f"[{n_tokens} tokens in {seconds:.2f}s: {n_tokens / seconds:,.1f} tokens/s ({len(prompt_tokens)} "
              f"prompt tokens first); {outcome}; {'no cache' if args.no_cache else 'KV cache'}; {n_threads} CPU "
              f"thread{'' if n_threads == 1 else 's'}]", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
