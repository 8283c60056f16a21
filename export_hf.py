"""Export a gptlab checkpoint as a Hugging Face model folder that transformers and lm-eval load.

    python export_hf.py experiments/RUN/checkpoints/step_000120.pt hf/quickstart
    lm_eval --model hf --model_args pretrained=hf/quickstart,trust_remote_code=True --tasks hellaswag

OUT_DIR gets model.safetensors, config.json, generation_config.json, modeling_gptlab.py (the architecture:
AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True)) and the tokenizer as tokenizer.json +
tokenizer_config.json (AutoTokenizer.from_pretrained(OUT_DIR)). Then, unless --no-check, it loads the folder back
with transformers and compares its tokens and float32 logits with the checkpoint's own on a short text holding two
documents.
"""
import argparse

from gptlab.cli import ArgumentParser, HelpFormatter
from gptlab.errors import run_cli
from gptlab.fileio import check_output_dir


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("checkpoint", help="a train_gpt.py checkpoint (.pt), e.g. experiments/RUN/checkpoints/step_N.pt")
    p.add_argument("out_dir", help="the folder to write (must not exist, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="load the export with transformers and compare tokens and logits with the checkpoint")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_output_dir(args.out_dir, args.overwrite)  # before loading anything
    import contextlib

    import train_gpt
    from gptlab import experiment as exp
    from gptlab.hf_export import check_export, hf_config, write_hf_folder
    from gptlab.tokenizer import read_tokenizer_file

    model, ckpt = train_gpt.load_model(args.checkpoint)
    tok = exp.checkpoint_tokenizer(ckpt, args.checkpoint)
    windows = train_gpt.checkpoint_windows(ckpt)
    fields = hf_config(ckpt["model_config"], model.padded_vocab, windows,
                       train_gpt.attention_scale(ckpt["model_config"]["head_dim"]), tok.eot, tok.encoding.n_vocab)
    write_hf_folder(args.out_dir, model_state=model.state_dict(), config_fields=fields,
                    tokenizer_data=read_tokenizer_file(tok.path), overwrite=args.overwrite)
    print(f"wrote {args.out_dir}: model.safetensors, config.json, modeling_gptlab.py, tokenizer.json "
          f"({model.num_layers} layers, dim {fields['model_dim']}, vocab {tok.encoding.n_vocab}, windows "
          f"{windows[0]} and {windows[1]} blocks of {train_gpt.BLOCK_SIZE}; tokenizer {tok.name})")
    if args.check:
        logits_fn = train_gpt.make_logits_fn(model, tok.eot, windows, False, contextlib.nullcontext,
                                             tok.encoding.n_vocab)
        result = check_export(args.out_dir, logits_fn, tok.encoding)
        print(f"checked with transformers: {result['tokens']} tokens, tokenizer "
              f"{'identical' if result['same_tokens'] else 'DIFFERENT'}, max |logits difference| "
              f"{result['max_abs_diff']:.2e}; generate() wrote {result['generated']!r}")
    return 0


if __name__ == "__main__":
    run_cli(main)
