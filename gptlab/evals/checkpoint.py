"""Evaluate a saved checkpoint with the model it carries: val loss and bpb on its run's validation set, and
HellaSwag, as the run's final evaluation computed them (final attention windows, dense masks, any device).

    python -m gptlab.evals.checkpoint experiments/RUN/checkpoints/step_000120.pt
    python -m gptlab.evals.checkpoint CKPT --val_files "data/other/val_*.bin" --hellaswag_limit 0 --json out.json
"""
import json

import torch

from gptlab.core.cli import ArgumentParser, HelpFormatter, path
from gptlab.core.distributed import DistContext, resolve_device
from gptlab.core.errors import UserError, run_cli
from gptlab.core.files import atomic_write_text
from gptlab.dataset.hellaswag_file import DEFAULT_PATH as HELLASWAG_DEFAULT_PATH
from gptlab.dataset.loader import ValidationSet
from gptlab.dataset.selection import check_shards_match_tokenizer, expand_shard_files
from gptlab.evals.bpb import evaluate_val, token_byte_lengths
from gptlab.evals.hellaswag import check_hellaswag_file, evaluate_hellaswag
from gptlab.checkpoint import checkpointing
from gptlab.checkpoint.model_source import load_model, logits_fn


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("checkpoint", type=path,
                   help="a train_gpt.py checkpoint (.pt, or the folder of a --shard_params run)")
    p.add_argument("--val_files", type=path, nargs="+", default=None,
                   help="validation shards (default: the ones the run recorded)")
    p.add_argument("--val_rows", type=int, default=None,
                   help="validation rows (default: the run's val_steps x val_batch_size / val_seq_len)")
    p.add_argument("--hellaswag_path", type=path, default=HELLASWAG_DEFAULT_PATH, help="HellaSwag validation .jsonl")
    p.add_argument("--hellaswag_limit", type=int, default=None, help="first N examples (default: all; 0: skip)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--trust_model_code", action="store_true",
                   help="run the model code of a checkpoint trained on another machine (read it first)")
    p.add_argument("--json", type=path,
                   default=None, metavar="PATH", help="also write the figures as JSON (a new file)")
    return p


def evaluate_checkpoint(path, *, val_files=None, val_rows=None, hellaswag_path=HELLASWAG_DEFAULT_PATH,
                        hellaswag_limit=None, device="cpu", trust_code=False, progress=False):
    """{"step", "val_loss", "val_bpb", "val_tokens", "hellaswag"} of the checkpoint at path (hellaswag None when
    skipped)."""
    device = torch.device(device)
    model, _, ckpt = load_model(path, device, trust_code)
    tok = checkpointing.checkpoint_tokenizer(ckpt, path)
    args, eot, windows = ckpt["args"], tok.eot, model.final_windows()
    seq_len = int(args.get("val_seq_len", 1024))
    paths = expand_shard_files(val_files or args.get("val_files") or [], "--val_files")
    check_shards_match_tokenizer(paths, tok.ranks_sha256, tok.encoding.n_vocab, "--val_files")
    if val_rows is None:
        val_rows = int(args["val_steps"]) * (int(args["val_batch_size"]) // seq_len)
    if val_rows <= 0:
        raise UserError(f"--val_rows must be positive, got {val_rows}")
    val_set = ValidationSet(paths, seq_len, val_rows, 0, 1)

    def loss_fn(x, y):
        return model(x, model.attention_masks(x, eot, windows), y)

    ctx = DistContext(0, 0, 1, device, None)
    # the run's own batching (its micro-batch), so the sums add up in the same order as in its log
    micro = args.get("device_batch_size")
    rows_per_batch = max(1, (micro if isinstance(micro, int) else 4096) // seq_len)
    val_loss, val_bpb = evaluate_val(loss_fn, val_set, rows_per_batch, token_byte_lengths(tok.encoding,
                                                                                          model.padded_vocab), ctx)
    hellaswag = None
    if hellaswag_limit != 0:
        check_hellaswag_file(hellaswag_path, hellaswag_limit, required=True)
        result = evaluate_hellaswag(logits_fn(model, eot, tok.encoding.n_vocab, windows), tok.encoding,
                                    hellaswag_path, device=str(device), limit=hellaswag_limit, progress=progress)
        hellaswag = {k: result[k] for k in ("acc", "acc_ci95", "acc_norm", "acc_norm_ci95", "n")}
    return {"checkpoint": path, "step": ckpt["step"], "val_loss": val_loss, "val_bpb": val_bpb,
            "val_tokens": val_rows * seq_len, "hellaswag": hellaswag}


def main(argv=None):
    args = build_parser().parse_args(argv)
    figures = evaluate_checkpoint(args.checkpoint, val_files=args.val_files, val_rows=args.val_rows,
                                  hellaswag_path=args.hellaswag_path, hellaswag_limit=args.hellaswag_limit,
                                  device=resolve_device(args.device), trust_code=args.trust_model_code,
                                  progress=True)
    print(f"step {figures['step']}: val_loss {figures['val_loss']:.6f} val_bpb {figures['val_bpb']:.6f} "
          f"({figures['val_tokens']:,} tokens)")
    if figures["hellaswag"]:
        h = figures["hellaswag"]
        print(f"hellaswag acc {h['acc']:.4f} acc_norm {h['acc_norm']:.4f} (n={h['n']})")
    if args.json:
        atomic_write_text(args.json, json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    run_cli(main)
