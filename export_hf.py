"""Export a gptlab checkpoint as a Hugging Face model folder that transformers and lm-eval load.

    python export_hf.py experiments/RUN/checkpoints/step_000120.pt hf/quickstart
    lm_eval --model hf --model_args pretrained=hf/quickstart,trust_remote_code=True --tasks hellaswag

OUT_DIR gets model.safetensors, config.json, generation_config.json, gptlab_model.py (the model source the
checkpoint carries: the architecture that trained it, whatever model.py says today), modeling_gptlab.py (a thin
transformers wrapper around it: AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True)) and the
tokenizer as tokenizer.json + tokenizer_config.json (encoding puts <|endoftext|> first, as training starts every
document with it). AutoTokenizer.from_pretrained(OUT_DIR) loads it, but transformers 5 first reads config.json and
asks whether to trust the folder's code (answer N, or pass trust_remote_code=True; PreTrainedTokenizerFast does
not ask). Then, unless --no-check, it loads the folder back with transformers and compares its tokens and float32
logits with the checkpoint's own on a short text holding two documents.

A model whose module exports itself as a standard transformers model (transformers_export: gpt2.py's for runs of
train_gpt.py --arch gpt2, llama.py's for --arch llama) is written natively instead: config.json + model.safetensors
of GPT2LMHeadModel or LlamaForCausalLM and the tokenizer, no code, loadable with trust_remote_code=False (vLLM, llama.cpp's converters, lm-eval without custom
code); the check then compares a single document (transformers counts positions from the row's start). An edit
of the module that the standard model cannot hold (a new weight) is written with its code instead, with a note.
"""
import argparse
import sys

from gptlab.core.cli import ArgumentParser, HelpFormatter, path
from gptlab.core.errors import run_cli
from gptlab.core.files import check_output_dir
from gptlab.tokenizer.format import read_tokenizer_file


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("checkpoint", type=path,
                   help="a train_gpt.py checkpoint (.pt, or the folder of a --shard_params run), e.g. "
                   "experiments/RUN/checkpoints/step_N.pt")
    p.add_argument("out_dir", type=path, help="the folder to write (must not exist, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="load the export with transformers and compare tokens and logits with the checkpoint")
    p.add_argument("--trust_model_code", action="store_true",
                   help="run model code from a checkpoint trained elsewhere (its model source differs from model.py "
                        "and no run on this machine trained it)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_output_dir(args.out_dir, args.overwrite, inputs=[args.checkpoint])  # before loading anything
    # heavy (torch, ~1.5 s): imported once the flags and the output are checked, so --help and errors answer at once
    from gptlab.core.errors import one_line
    from gptlab.export.hf_folder import (CHECK_TEXT, MODEL_SOURCE_FILE, NotNative, check_export, hf_config,  # torch
                                  native_model, write_hf_folder)
    from gptlab.checkpoint import checkpointing  # torch
    from gptlab.checkpoint.model_source import load_model, logits_fn  # torch

    model, module, ckpt = load_model(args.checkpoint, trust_code=args.trust_model_code)
    tok = checkpointing.checkpoint_tokenizer(ckpt, args.checkpoint)
    windows = model.final_windows()
    n_vocab = tok.encoding.n_vocab
    fields = hf_config(ckpt["model_config"], windows, tok.eot, n_vocab, getattr(model, "padded_vocab", None))
    native = None
    if hasattr(module, "transformers_export"):  # the module maps itself onto a standard transformers model
        try:
            native = module.transformers_export(model, n_vocab, tok.eot)
            native_model(native)
        except (ValueError, KeyError, StopIteration, NotNative) as err:  # an edit of the module: its own code goes
            print(f"note: not exported as a standard transformers model ({one_line(err, 200)}); writing the "
                  "export with the checkpoint's model code instead", file=sys.stderr)
            native = None
    write_hf_folder(args.out_dir, model_state=model.state_dict(), model_source=ckpt["model_source"],
                    config_fields=fields, tokenizer_data=read_tokenizer_file(tok.path), overwrite=args.overwrite,
                    native=native)
    n_params = sum(p.numel() for p in model.parameters())
    if native:
        print(f"wrote {args.out_dir}: model.safetensors, config.json ({native[0]['architectures'][0]}, no custom "
              f"code), tokenizer.json ({n_params:,} parameters, vocab {n_vocab}; tokenizer {tok.name})")
    else:
        print(f"wrote {args.out_dir}: model.safetensors, config.json, modeling_gptlab.py, {MODEL_SOURCE_FILE} (model "
              f"source sha256 {ckpt['model_source']['sha256'][:12]}), tokenizer.json ({n_params:,} parameters, vocab "
              f"{n_vocab}, final windows {windows[0]} and {windows[1]} blocks; tokenizer {tok.name})")
    if args.check:
        one_document = CHECK_TEXT.split("<|endoftext|>")[0]  # (native: HF's positions run from the row's start)
        result = check_export(args.out_dir, logits_fn(model, tok.eot, n_vocab), tok.encoding,
                              **(dict(text=one_document, trust_remote_code=False) if native else {}))
        print(f"checked with transformers: {result['tokens']} tokens, tokenizer "
              f"{'identical' if result['same_tokens'] else 'DIFFERENT'}, max |logits difference| "
              f"{result['max_abs_diff']:.2e}; generate() wrote {result['generated']!r}")
    return 0


if __name__ == "__main__":
    run_cli(main)
