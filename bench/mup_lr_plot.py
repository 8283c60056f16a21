"""The LR-transfer figure of bench/mup_lr_sweep.sh (docs/mup.md): final validation loss against the learning-rate
multiplier, one line per width (mean of the seeds, each seed a dot), SP and muP side by side; a table of every
point and the best multiplier per width, and how far it moves over the widths in grid steps.

    python bench/mup_lr_plot.py                         # reads experiments/mup_lr, writes docs/mup/lr_transfer.*

The muP sweep has no runs at its base width (there --mup is SP bit for bit: tests/unit/test_mup.py): the SP
sweep's runs at that width stand for both.
"""
import glob
import json
import math
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from gptlab.core.cli import ArgumentParser, HelpFormatter  # noqa: E402
from gptlab.core.errors import UserError, run_cli  # noqa: E402


def read_sweep(path):
    """{(width, lr_scale): [final val loss per finished seed]} of one sweep record (failed runs: inf)."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read the sweep record {path}: {err}; run bench/mup_lr_sweep.sh first") from None
    folder = os.path.dirname(os.path.abspath(path))  # the run folders sit beside the record
    losses = {}
    for point in record["points"]:
        settings = dict(point["settings"])
        key = (int(settings["model_dim"]), float(settings["lr_scale"]))
        loss = math.inf if point["status"] == "failed" else None
        if point["status"] == "finished" and point["run_dir"]:
            run_dir = os.path.join(folder, os.path.basename(os.path.normpath(point["run_dir"])))
            with open(os.path.join(run_dir, "results.json")) as f:
                loss = json.load(f).get("final_val_loss")
            loss = math.inf if loss is None or not math.isfinite(loss) else loss
        if loss is not None:
            losses.setdefault(key, []).append(loss)
    return losses


def read_sweeps(pattern):
    """read_sweep of every record matching pattern (bench/mup_lr_sweep.sh runs one sweep per width), merged."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise UserError(f"no sweep record matches {pattern}; run bench/mup_lr_sweep.sh first")
    losses = {}
    for path in paths:
        losses.update(read_sweep(path))
    return losses


def best_per_width(losses):
    """{width: (best lr multiplier, its mean loss)} over the multipliers every seed finished."""
    best = {}
    for (width, lr), values in losses.items():
        mean = float(np.mean(values))
        if width not in best or mean < best[width][1]:
            best[width] = (lr, mean)
    return dict(sorted(best.items()))


def main(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--experiments_dir", default=os.path.join(REPO, "experiments", "mup_lr"))
    p.add_argument("--out", default=os.path.join(REPO, "docs", "mup"))
    args = p.parse_args(argv)
    sp, mp = (read_sweeps(os.path.join(args.experiments_dir, f"sweep_MupLr{name}W*.json")) for name in ("SP", "MuP"))
    base = min(w for w, _ in sp)
    mp.update({k: v for k, v in sp.items() if k[0] == base})  # --mup at the base width is SP
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(args.out, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    lines = ["| parametrisation | width | " + " | ".join(f"lr x{lr:g}" for lr in sorted({k[1] for k in sp}))
             + " | best |", "|---|---|" + "---|" * (len({k[1] for k in sp}) + 1)]
    summary = []
    for ax, (name, losses) in zip(axes, (("SP", sp), ("muP", mp))):
        lrs = sorted({k[1] for k in losses})
        best = best_per_width(losses)
        for width in sorted({k[0] for k in losses}):
            means = [float(np.mean(losses.get((width, lr), [math.nan]))) for lr in lrs]
            line, = ax.plot(lrs, means, marker="o", label=f"width {width} (best x{best[width][0]:g})")
            for lr in lrs:
                ax.scatter([lr] * len(losses.get((width, lr), [])), losses.get((width, lr), []), s=8,
                           color=line.get_color(), alpha=0.5)
            cells = [f"{m:.4f}" if math.isfinite(m) else "diverged" for m in means]
            lines.append(f"| {name} | {width} | " + " | ".join(cells) + f" | x{best[width][0]:g} |")
        steps = [round(math.log2(b[0])) for b in best.values()]
        summary.append(f"{name}: best lr multiplier per width " + ", ".join(f"{w}: x{b[0]:g}" for w, b in best.items())
                       + f"; it moves {max(steps) - min(steps)} grid step(s) (x2 each) over {max(best) // min(best)}x "
                       "width")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning-rate multiplier (x --lr 4e-3)")
        ax.set_title(f"{name}: final val loss vs LR")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("final validation loss (nats)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "lr_transfer.png"), dpi=90)
    with open(os.path.join(args.out, "lr_transfer.md"), "w") as f:
        f.write("\n".join(lines + [""] + summary) + "\n")
    print("\n".join(lines + [""] + summary))


if __name__ == "__main__":
    run_cli(main)
