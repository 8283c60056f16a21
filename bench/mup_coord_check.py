"""muP coordinate check (microsoft/mup's test; docs/mup.md): train a few steps at several widths under the standard
parametrisation (SP) and under --mup, record the mean |x| of each layer group's output at every step, and fit its
log-log slope against width. Verdicts: "flat" (|slope| <= --bound), "grows" (slope > --bound: the check fails)
or "shrinks" (slope < -bound: a part muP sends to zero with width, such as a tied head's init logits, still
dominates at these widths; not a blow-up, so not a failure, but named). Under muP nothing grows; under SP the
groups that Adam or the readout blow up do.

    python bench/mup_coord_check.py --arch gpt2                  # widths 64..512, 4 steps, 2 seeds: a few minutes
    python bench/mup_coord_check.py --arch modded --out docs/mup  # the plot, the table and the verdicts in docs/mup

It builds each model and its optimizers with train_gpt.py's own build_model and build_recipe_optimizers (muP's
init and LR multipliers included), at the recipe's default learning rates x --lr_scale held constant (no warm-up,
no decay, no clipping: the check is about the parametrisation, not the schedule), on random tokens (the same
batches at every width). Layer groups: the token embedding's output, every block's attention and MLP outputs and
the residual stream after it (averaged over blocks), the logits (mean |logit - its row's mean|) and their update
(the same of logits minus the initial model's logits on the same batch; judged instead of the logits, which muP
lets vanish at init).

A flat check alone does not prove that learning rates transfer (microsoft/mup issues #22, #23): docs/mup.md's LR
sweep does that.
"""
import argparse
import copy
import csv
import os
import re
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import train_gpt  # noqa: E402
from gptlab.core.cli import ArgumentParser, HelpFormatter  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402
from gptlab.checkpoint import model_source  # noqa: E402

GROUPS = ("embedding", "attention", "mlp", "residual", "logit update", "logits")
# judged: every group but the raw logits. muP wants the logits' change Theta(1) and their value at init vanishing
# (readout init variance 1/fan_in^2, or zero: Tensor Programs V, table 3), so a tied GPT-2 head's logits at init
# shrink as 1/sqrt(width) by design; their update ("logit update": logits minus the initial model's on the same
# batch) is what must stay flat
JUDGED = GROUPS[:-1]
# |slope| of log mean|x| against log width within which a group counts as flat. Justification: over the 8x of
# widths 64..512 a slope of 0.2 changes a coordinate by 8**0.2 = 1.5x, within the seed-to-seed and
# finite-width wobble of a few steps; the blow-up muP removes is Adam's update moving a width-n dot product by
# ~n x lr, a slope near +1 for hidden layers and +0.5 or more for the logits (Tensor Programs V, section 4), so
# 0.2 separates the two with room on both sides
DEFAULT_BOUND = 0.2


def parse_args(argv):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--arch", choices=list(model_source.ARCHITECTURES), default="gpt2")
    p.add_argument("--widths", default="64,128,256,512", help="comma-separated model_dims (4-6, each a multiple of "
                   "the first, the base)")
    p.add_argument("--num_heads", type=int, default=2, help="heads at every width (head dim grows with width)")
    p.add_argument("--num_layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="training steps recorded (one panel each)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--rows", type=int, default=4, help="rows of 128 tokens per batch")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lr_scale", type=float, default=1.0, help="multiplies the recipe's default learning rates "
                   "(gpt2's AdamW: 6e-4)")
    p.add_argument("--bound", type=float, default=DEFAULT_BOUND, help="a group is flat when |slope| <= this")
    p.add_argument("--modes", default="sp,mup", help="sp, mup or both")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "out", "mup_coord"),
                   help="folder for coord_<arch>.png and coord_<arch>.csv")
    args = p.parse_args(argv)
    try:
        args.widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        raise UserError(f"--widths {args.widths!r}: comma-separated integers, e.g. 64,128,256,512") from None
    base = args.widths[0]
    if len(args.widths) < 2 or any(w <= 0 or w % base for w in args.widths) or sorted(args.widths) != args.widths:
        raise UserError(f"--widths {args.widths}: at least two increasing widths, each a multiple of the first (the "
                        "muP base)")
    args.modes = [m for m in args.modes.split(",") if m]
    if args.steps < 2:
        raise UserError(f"--steps {args.steps}: at least 2 (the logits' update is judged after a step)")
    if not args.modes or set(args.modes) - {"sp", "mup"}:
        raise UserError(f"--modes {','.join(args.modes)}: sp, mup or sp,mup")
    for name in ("num_heads", "num_layers", "steps", "seeds", "rows", "vocab"):
        if getattr(args, name) <= 0:
            raise UserError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    return args


def group_of(name):
    """The layer group of a module's name, with block indices dropped (None: not recorded)."""
    generic = re.sub(r"\.\d+(?=\.|$)", ".*", name)
    return {"embed": "embedding", "blocks.*.attn": "attention", "blocks.*.mlp": "mlp",
            "blocks.*": "residual"}.get(generic)


def coordinates(arch, width, mup, seed, args):
    """{(step, group): mean |x|} of one model trained args.steps steps."""
    module = model_source.current_module(model_source.ARCHITECTURES[arch])
    seq = module.SEQ_MULTIPLE * max(1, 128 // module.SEQ_MULTIPLE)
    fields = dict(vocab_size=args.vocab, num_layers=args.num_layers, num_heads=args.num_heads, model_dim=width,
                  max_seq_len=seq)
    known = set(module.GPTConfig.__dataclass_fields__)
    if "window_size" in known:
        fields["window_size"] = seq
    if "num_kv_heads" in known:  # llama: every query head its own key/value head, the SwiGLU width 8/3 x width
        fields.update(num_kv_heads=args.num_heads, multiple_of=1)   # unrounded (so it scales with the width)
    if mup:
        fields.update(mup_base_width=args.widths[0], mup_base_heads=args.num_heads)
    cfg = argparse.Namespace(dtype="float32", fp8_head=False, optimizer=train_gpt.recipe_of(module))
    train_gpt.fill_recipe(cfg)
    torch.manual_seed(seed)
    model = train_gpt.build_model(module, module.GPTConfig(**fields).__dict__, cfg, torch.device("cpu"))
    optimizers = train_gpt.build_recipe_optimizers(cfg, model)
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * args.lr_scale
    sums, hooks = {}, []

    def record(group):
        def hook(_module, _inputs, out):
            sums.setdefault(group, []).append(out.detach().abs().mean().item())
        return hook

    for name, sub in model.named_modules():
        if group_of(name):
            hooks.append(sub.register_forward_hook(record(group_of(name))))
    initial = copy.deepcopy(model)
    data = torch.Generator().manual_seed(1000 + seed)  # the same batches at every width
    eot = 0
    out = {}
    for step in range(args.steps):
        tokens = torch.randint(1, args.vocab, (args.rows, seq + 1), generator=data)
        tokens[:, 0] = eot
        x, y = tokens[:, :-1], tokens[:, 1:]
        masks = model.attention_masks(x, eot, model.final_windows())
        sums.clear()
        hidden = model.hidden_states(x, masks)
        logits = model.logits(hidden)
        for group, values in sums.items():
            out[step, group] = float(np.mean(values))
        out[step, "logits"] = centred_mean_abs(logits)
        with torch.no_grad():
            change = logits - initial.logits(initial.hidden_states(x, masks))
        out[step, "logit update"] = centred_mean_abs(change) if step else float("nan")
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
    for h in hooks:
        h.remove()
    return out


def centred_mean_abs(logits):
    return (logits - logits.mean(dim=-1, keepdim=True)).abs().mean().item()


def slope(widths, values):
    """Least-squares slope of log(values) against log(widths)."""
    return float(np.polyfit(np.log(widths), np.log(np.maximum(values, 1e-30)), 1)[0])


def verdict(s, bound):
    return "grows" if s > bound else "shrinks" if s < -bound else "flat"


def run_check(args, log=print):
    """{mode: {group: (slope at the last step, verdict)}}, and {(mode, width, step, group): mean over seeds}."""
    table = {}
    for mode in args.modes:
        for width in args.widths:
            started = time.monotonic()
            runs = [coordinates(args.arch, width, mode == "mup", seed, args) for seed in range(args.seeds)]
            for key in runs[0]:
                table[(mode, width) + key] = float(np.mean([r[key] for r in runs]))
            log(f"{mode} width {width}: {time.monotonic() - started:.1f}s")
    verdicts = {}
    last = args.steps - 1
    for mode in args.modes:
        verdicts[mode] = {}
        for group in JUDGED:
            s = slope(args.widths, [table[mode, w, last, group] for w in args.widths])
            verdicts[mode][group] = (s, verdict(s, args.bound))
    return verdicts, table


def write_outputs(args, verdicts, table):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"coord_{args.arch}")
    with open(stem + ".csv.tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mode", "width", "step", "group", "mean_abs"])
        for (mode, width, step, group), value in sorted(table.items()):
            w.writerow([mode, width, step, group, f"{value:.6g}"])
    os.replace(stem + ".csv.tmp", stem + ".csv")
    fig, axes = plt.subplots(len(args.modes), args.steps, figsize=(3.2 * args.steps, 3 * len(args.modes)),
                             squeeze=False, sharey="row")
    for r, mode in enumerate(args.modes):
        for step in range(args.steps):
            ax = axes[r][step]
            for group in GROUPS:
                ax.plot(args.widths, [table[mode, w, step, group] for w in args.widths], marker="o", label=group)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{'muP' if mode == 'mup' else 'SP'}, step {step}")
            ax.set_xlabel("width (model_dim)")
            if step == 0:
                ax.set_ylabel("mean |x|")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"coordinate check, --arch {args.arch} ({args.seeds} seeds, lr x{args.lr_scale:g})")
    fig.tight_layout()
    fig.savefig(stem + ".png.tmp.png", dpi=90)
    os.replace(stem + ".png.tmp.png", stem + ".png")
    plt.close(fig)
    return stem


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    verdicts, table = run_check(args)
    stem = write_outputs(args, verdicts, table)
    print(f"slopes of log mean|x| vs log width at step {args.steps - 1} (flat: |slope| <= {args.bound}; grows: the "
          "check fails)")
    for mode, groups in verdicts.items():
        for group, (s, word) in groups.items():
            print(f"  {'muP' if mode == 'mup' else 'SP':3s} {group:12s} slope {s:+.3f}  {word}")
        failed = [g for g, (_, word) in groups.items() if word == "grows"]
        print(f"  {'muP' if mode == 'mup' else 'SP'}: " + (f"FAIL ({', '.join(failed)} grow with width)" if failed
                                                          else "pass (nothing grows with width)"))
    print(f"wrote {stem}.png and {stem}.csv")
    return verdicts


if __name__ == "__main__":
    run_cli(main)
