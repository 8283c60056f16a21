"""Curves of runs (val bpb, train loss, HellaSwag against tokens and wall time) in one PNG; matplotlib is imported
only when a plot is drawn."""
import math
import re

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write

PLOT_FILE = "compare.png"
MIN_PLOT_SIZE = (800, 600)


def parse_size(text):
    match = re.fullmatch(r"\s*([0-9]{1,9})\s*[xX×]\s*([0-9]{1,9})\s*", text or "")
    if not match:
        raise UserError(f"--size {text!r} is not WIDTHxHEIGHT in pixels; use e.g. --size 1600x1200")
    width, height = int(match.group(1)), int(match.group(2))
    if not (MIN_PLOT_SIZE[0] <= width <= 10000 and MIN_PLOT_SIZE[1] <= height <= 10000):
        raise UserError(f"--size {width}x{height} is out of range: six labelled panels need at least "
                        f"{MIN_PLOT_SIZE[0]}x{MIN_PLOT_SIZE[1]} (at most 10000 per side); use e.g. 1600x1200")
    return width, height


def _smooth(values):
    """Centred moving average (no lag, unlike an EMA) over ~1/40 of the points: shows the trend of a noisy loss."""
    half = max(0, len(values) // 80)
    if half == 0:
        return list(values)
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    out = []
    for i in range(len(values)):
        lo, hi = max(0, i - half), min(len(values), i + half + 1)
        out.append((prefix[hi] - prefix[lo]) / (hi - lo))
    return out


def _time_unit(max_seconds):
    if max_seconds >= 2 * 3600:
        return 3600.0, "h"
    if max_seconds >= 2 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _use_log(xs):
    """Log x when the points span more than ~2 decades (early steps would otherwise be squashed into one pixel)."""
    positive = [x for x in xs if x > 0]
    return len(positive) >= 2 and max(positive) / min(positive) > 100


def plot_runs(runs, paths, size=(1600, 1200)):
    """One PNG of val bpb / train loss / HellaSwag acc_norm (rows) against tokens and wall time (columns)."""
    import matplotlib  # heavy (~0.4 s with pyplot): only when a PNG is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

    # Fonts follow the figure size: small PNGs stay legible, large ones are not sparse.
    font_scale = max(0.6, min(1.6, min(size[0] / 1600, size[1] / 1200) ** 0.7))
    with plt.rc_context({"font.size": 10 * font_scale}):
        fig = _draw_curves(plt, runs, size, dpi=100)
        for path in paths:
            with atomic_write(path, "wb", overwrite=True) as f:
                fig.savefig(f, format="png", dpi=100)
        plt.close(fig)


def _draw_curves(plt, runs, size, dpi):
    from matplotlib.lines import Line2D  # heavy: as in plot_runs
    from matplotlib.ticker import EngFormatter, NullFormatter  # heavy: as in plot_runs

    fig, axes = plt.subplots(3, 2, figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi,
                             gridspec_kw={"height_ratios": [1.2, 1.2, 1.0]})
    colors = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20").colors
    all_times = [t for r in runs for t in r.metrics.series("elapsed_s", "elapsed_s")[0]]
    time_scale, time_unit = _time_unit(max(all_times, default=0.0))
    many_tokenizers = len({r.tokenizer_id for r in runs if r.tokenizer_id}) > 1
    # metrics.csv's elapsed_s is the training wall time (evaluations excluded, as modded-nanogpt times runs)
    xaxes = [("tokens", "tokens seen"), ("elapsed_s", f"training wall time ({time_unit}, evals excluded)")]
    panels = [("val_bpb", "val bpb (bits/byte)", "validation bits per byte (lower is better)"),
              ("train_loss", "train loss (nats/token)",
               "train loss (faint: raw, solid: smoothed)"
               + ("\nper token: not comparable across tokenizers (val bpb is)" if many_tokenizers else "")),
              ("hellaswag_acc_norm", "HellaSwag acc_norm",
               "HellaSwag acc_norm (higher is better; ◆ = final ± 95% CI)")]
    plotted = [[False, False] for _ in panels]
    # Tokens on log x per panel when its points span decades (early training would be one pixel wide otherwise);
    # wall time stays linear, where the end of training (the comparison that matters) gets the most room.
    log_tokens = [_use_log([x for r in runs for x in r.metrics.series("tokens", ycol)[0]]) for ycol, _, _ in panels]

    handles = []
    for color_index, run in enumerate(runs):
        color = colors[color_index % len(colors)]
        label = run.name + ("" if run.final else f" ({run.status})")
        handles.append(Line2D([], [], color=color, linewidth=2, label=label))
        for col, (xcol, _) in enumerate(xaxes):
            scale = time_scale if xcol == "elapsed_s" else 1.0
            for row, (ycol, _, _) in enumerate(panels):
                ax = axes[row][col]
                log_x = log_tokens[row] and xcol == "tokens"
                # A point needs x and y in the same metrics row (the trainer logs tokens/time on every row).
                xs, ys = run.metrics.series(xcol, ycol)
                if log_x:  # step 0 (x = 0) has no place on a log axis
                    xs, ys = [x for x in xs if x > 0], [y for x, y in zip(xs, ys) if x > 0]
                xs = [x / scale for x in xs]
                if ycol == "train_loss":
                    if xs:
                        ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.7)
                        ax.plot(xs, _smooth(ys), color=color, linewidth=1.6)
                elif xs:
                    ax.plot(xs, ys, color=color, linewidth=1.6, marker="o" if len(xs) <= 40 else None,
                            markersize=3.5)
                if ycol == "hellaswag_acc_norm" and run.final and run.hs_acc_norm is not None and run.hs_ci:
                    if xcol == "tokens":
                        final_x = run.tokens
                    else:  # on the same clock as the curve: the last row where HellaSwag was measured
                        hs_times = run.metrics.series("elapsed_s", "hellaswag_acc_norm")[0]
                        final_x = hs_times[-1] / scale if hs_times else None
                    if final_x is not None and (final_x > 0 or not log_x):
                        lo, hi = run.hs_ci
                        ax.errorbar([final_x], [run.hs_acc_norm], color=color, marker="D", markersize=6, capsize=4,
                                    yerr=[[run.hs_acc_norm - lo], [hi - run.hs_acc_norm]], linewidth=1.5)
                        xs = xs + [final_x]
                plotted[row][col] = plotted[row][col] or bool(xs)

    for col, (xcol, xlabel) in enumerate(xaxes):
        for row, (ycol, ylabel, title) in enumerate(panels):
            ax = axes[row][col]
            log_x = log_tokens[row] and xcol == "tokens"
            if log_x:
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(NullFormatter())
            if xcol == "tokens":
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.set_xlabel(xlabel + (" (log scale)" if log_x else ""))
            ax.set_ylabel(ylabel)
            ax.set_title(title, fontsize="medium")
            ax.grid(True, which="major", alpha=0.3)
            if ycol == "hellaswag_acc_norm":
                ax.axhline(0.25, color="gray", linestyle="--", linewidth=1, label="chance (0.25)")
                ax.legend(loc="lower right", fontsize="small")
            if not plotted[row][col]:
                ax.text(0.5, 0.5, "not measured yet", transform=ax.transAxes, ha="center", va="center",
                        color="gray")

    # One legend for all panels, below them, with as many entries per line as the width allows.
    font_px = plt.rcParams["font.size"] * dpi / 72
    entry_px = max(len(h.get_label()) for h in handles) * 0.62 * font_px + 4 * font_px
    ncol = max(1, min(len(handles), int(0.95 * size[0] // entry_px)))
    legend_rows = math.ceil(len(handles) / ncol)
    bottom = min(0.4, (1.45 * font_px * legend_rows + font_px) / size[1])
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig
