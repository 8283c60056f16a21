"""Convert a checkpoint from before checkpoints carried their model's source (format 2) to today's format, or show
the model code a checkpoint carries.

    python -m gptlab.checkpoint.convert_checkpoint experiments/RUN/checkpoints/step_000120.pt      # → step_000120_v3.pt
    python -m gptlab.checkpoint.convert_checkpoint --show CHECKPOINT                               # print its model.py

A format-2 checkpoint holds no model code. Its weights were made by the GPT that train_gpt.py defined then; the
converter attaches a model source (today's model.py, or --model_source FILE) only after checking that the weights
load into that model exactly (every name and shape), adds the fields format 3 records (window_size, head_dim), and
turns the optimizer state of the former hand-written Adam into torch.optim.Adam's. It writes a new file and never
replaces one without --overwrite. Attach the model code that really trained the run: a model.py whose weights fit
but whose computation changed since (an activation, say) would load without complaint.
"""
import dataclasses
import os

import torch

from gptlab.core.cli import ArgumentParser, HelpFormatter, path
from gptlab.core.errors import UserError, one_line, run_cli
from gptlab.core.files import check_writable
from gptlab.checkpoint import checkpointing, model_source as ms
from gptlab.checkpoint.format import CHECKPOINT_VERSION


def build_parser():
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("checkpoint", type=path, help="a train_gpt.py checkpoint (.pt)")
    p.add_argument("out", type=path,
                   nargs="?", default=None, help="the converted file (default: CHECKPOINT with _v3 before .pt)")
    p.add_argument("--model_source", type=path, default=None, metavar="FILE",
                   help="the model.py to attach (default: today's model.py)")
    p.add_argument("--show", action="store_true", help="print the model source the checkpoint carries and exit")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.add_argument("--trust_model_code", action="store_true",
                   help="read a sharded checkpoint folder whose DCP index names code (refused by default)")
    p.add_argument("--unverified", action="store_true",
                   help="convert a format-1 checkpoint, which carries no checksum (its content cannot be verified)")
    return p


def convert_payload(old, source, module):
    """A format-3 payload from a format-2 one and the model source (and its module) to attach."""
    new = {k: v for k, v in old.items() if k != "sha256"}
    config = dict(old["model_config"])
    config.setdefault("window_size", old["args"].get("window_size", 1792))
    fields = {f.name for f in dataclasses.fields(module.GPTConfig)}
    unknown = sorted(set(config) - fields)
    if unknown:
        raise UserError(f"the model source has no field(s) {', '.join(unknown)} of this checkpoint's configuration; "
                        "attach the model.py that trained it with --model_source FILE")
    config = dataclasses.asdict(module.GPTConfig(**config))
    model = ms.model_from_config(module, config)
    try:
        model.load_state_dict(old["model"], strict=True)
    except RuntimeError as err:
        problems = one_line(err)
        raise UserError(f"the weights do not fit the model of {source['file']} ({problems}); attach the model.py "
                        "that trained it with --model_source FILE") from None
    new["model_config"] = config
    new["model_source"] = source
    new["optimizers"] = [_torch_adam_state(state) for state in old.get("optimizers", [])]
    new["format_version"] = CHECKPOINT_VERSION
    return new


def _torch_adam_state(state):
    """The former hand-written Adam kept one step count per group; torch.optim.Adam keeps one per parameter."""
    groups = state.get("param_groups", [])
    if not groups or "step" not in groups[0]:
        return state
    defaults = torch.optim.Adam([torch.zeros(1)]).defaults
    new_groups, new_state = [], {k: dict(v) for k, v in state.get("state", {}).items()}
    for group in groups:
        group = dict(group)
        step = group.pop("step")
        new_groups.append({**defaults, "foreach": None, "fused": None, **group})
        for index in group["params"]:
            if index in new_state:
                new_state[index]["step"] = torch.tensor(float(step))
    return {"state": new_state, "param_groups": new_groups}


def main(argv=None):
    args = build_parser().parse_args(argv)
    payload = checkpointing.load_checkpoint(args.checkpoint, allow_old=True, trust_code=args.trust_model_code)
    if args.show:
        source = payload.get("model_source")
        if not source:
            raise UserError(f"{args.checkpoint} carries no model source (format {payload.get('format_version')}); "
                            "it was trained with the GPT in its run folder's code/train_gpt.py")
        print(f"# {source['file']} carried by {args.checkpoint} (sha256 {source['sha256']})")
        print(source["code"], end="")
        return 0
    if payload.get("format_version", 0) >= CHECKPOINT_VERSION:
        raise UserError(f"{args.checkpoint} is already format {payload['format_version']}; nothing to convert")
    if "sha256" not in payload and not args.unverified:  # only format 1 was written without one
        raise UserError(f"{args.checkpoint} is format {payload['format_version']} and carries no checksum, so its "
                        "content cannot be verified; convert it only if you trust it, with --unverified")
    out = args.out or os.path.splitext(args.checkpoint)[0] + "_v3.pt"
    check_writable(out, args.overwrite)
    if args.model_source:
        try:
            with open(args.model_source, "r", encoding="utf-8") as f:
                code = f.read()
        except OSError as err:
            raise UserError(f"cannot read --model_source {args.model_source} ({err.strerror or err})") from None
        source = {"file": "model.py", "code": code, "sha256": ms.sha256_text(code)}
        module = ms.import_file(args.model_source, f"gptlab_model_{source['sha256'][:16]}")
    else:
        source, module = ms.current_source(), ms.current_module()
    new = convert_payload(payload, source, module)
    checkpointing.save_checkpoint(out, model_state=new["model"], model_config=new["model_config"], step=new["step"],
                                  model_source=source, args=new["args"], tokenizer=new["tokenizer"],
                                  optimizer_states=new["optimizers"], dataloader_state=new["dataloader"],
                                  rng_states=new["rng"], extra=new["extra"], data=new.get("data"),
                                  overwrite=args.overwrite)
    ms.record_trained_source(source)  # a run here made these weights with this code
    print(f"wrote {out}: format {CHECKPOINT_VERSION}, model source {source['file']} (sha256 "
          f"{source['sha256'][:12]}), weights checked against it")
    return 0


if __name__ == "__main__":
    run_cli(main)
