"""Curves of settings (val bpb, train loss, HellaSwag, learning rate against tokens; mean ± std over each setting's
seeds) in one PNG; matplotlib is imported only when a plot is drawn."""
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
        raise UserError(f"--size {width}x{height} is out of range: four labelled panels need at least "
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


def plot_runs(runs, paths, size=(1600, 1200)):
    """One PNG of val bpb / train loss / HellaSwag acc_norm / learning rate (and, when a run has them, the --evals
    suite's core and gold bpb) against tokens, per setting."""
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


def settings_of(runs):
    """[(label, runs)] of the runs grouped by setting (configs equal but the seed), in order of appearance; the
    label is the model name with the number of runs (and #2, #3 for a second setting of one name)."""
    from gptlab.compare.stats import setting_key

    groups = {}
    for run in runs:
        groups.setdefault(setting_key(run), []).append(run)
    labels, seen = [], {}
    for members in groups.values():
        name = members[0].model_name
        seen[name] = seen.get(name, 0) + 1
        unfinished = sum(not r.final for r in members)
        labels.append((f"{name}{'' if seen[name] == 1 else f' #{seen[name]}'} ({len(members)} "
                       f"{'seeds' if len(members) > 1 else 'run'}" + (f", {unfinished} not finished" if unfinished
                                                                      else "") + ")", members))
    return labels


def mean_band(series):
    """(xs, means, stds) over the runs' (xs, ys) series: at each x any run measured, the mean and the std of the
    values there (0 where only one run has a value)."""
    at = {}
    for xs, ys in series:
        for x, y in zip(xs, ys):
            at.setdefault(x, []).append(y)
    xs = sorted(at)
    means = [sum(at[x]) / len(at[x]) for x in xs]
    stds = [math.sqrt(sum((v - m) ** 2 for v in at[x]) / (len(at[x]) - 1)) if len(at[x]) > 1 else 0.0
            for x, m in zip(xs, means)]
    return xs, means, stds


def focus_ylim(points, share=0.5):
    """A y-range from the points (x, low, high) in the last `share` of the x-range (the end of training, where the
    settings are compared), 10% margin: step 0's loss does not squash the final differences into a pixel."""
    if not points:
        return None
    end = max(x for x, _, _ in points)
    start = min(x for x, _, _ in points)
    late = [(lo, hi) for x, lo, hi in points if x >= start + (1 - share) * (end - start)]
    low, high = min(lo for lo, _ in late), max(hi for _, hi in late)
    margin = 0.1 * (high - low) or 0.05 * abs(high) or 0.1
    return low - margin, high + margin


# train_gpt.py --evals' suite figures in metrics.csv: two more panels when a plotted run has them
SUITE_PANELS = [("evals_core", "core (mean centred accuracy)", "--evals core over training (higher is better)"),
                ("evals_gold_bpb", "gold-answer bpb (bits/byte)", "--evals gold-answer bpb over training (lower is "
                 "better)")]


def has_suite_rows(runs):
    """True when a run's metrics.csv holds an evaluation of the --evals suite (an evals_core value)."""
    return any(r.metrics is not None and r.metrics.series("tokens", "evals_core")[0] for r in runs)


def draw_setting(ax, members, ycol, color, label=None):
    """One setting's curve of metrics.csv's `ycol` against tokens on `ax`: the mean over its runs as a line, mean ±
    std as a band (train loss smoothed); the points (x, low, high) are added to ax.focus (for focus_ylim)."""
    series = [r.metrics.series("tokens", ycol) for r in members if r.metrics is not None]
    if ycol == "train_loss":
        series = [(xs, _smooth(ys)) for xs, ys in series]
    xs, means, stds = mean_band(series)
    if not xs:
        return
    ax.plot(xs, means, color=color, linewidth=1.6, marker="o" if len(xs) <= 40 else None, markersize=3, label=label)
    if len(xs) == 1:  # measured once (a final HellaSwag): a band has no width, so an error bar
        ax.errorbar(xs, means, yerr=stds, color=color, marker="D", markersize=6, capsize=4)
    elif len(members) > 1 and any(stds):
        ax.fill_between(xs, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                        color=color, alpha=0.2, linewidth=0)
    ax.focus = getattr(ax, "focus", []) + [(x, m - s, m + s) for x, m, s in zip(xs, means, stds)]


def _draw_curves(plt, runs, size, dpi):
    """2×2 panels against tokens: val bpb, train loss (smoothed), HellaSwag acc_norm, learning rate, and a third
    row (--evals core and gold bpb) when a run has them; one colour per setting, its mean over the seeds as a line
    and mean ± std as a band; y-ranges from the second half of training. Returns the figure."""
    from matplotlib.lines import Line2D  # heavy (~0.4 s with pyplot): only when a PNG is drawn
    from matplotlib.ticker import EngFormatter  # heavy: as above

    settings = settings_of(runs)
    colors = plt.get_cmap("tab10" if len(settings) <= 10 else "tab20").colors
    many_tokenizers = len({r.tokenizer_id for r in runs if r.tokenizer_id}) > 1
    panels = [("val_bpb", "val bpb (bits/byte)", "validation bits per byte (lower is better)"),
              ("train_loss", "train loss (nats/token)", "train loss, smoothed"
               + ("\nper token: not comparable across tokenizers (val bpb is)" if many_tokenizers else "")),
              ("hellaswag_acc_norm", "HellaSwag acc_norm", "HellaSwag acc_norm over training (higher is better)"),
              ("lr", "lr multiplier (× each group's base lr)", "learning-rate schedule (metrics.csv's lr)")]
    if has_suite_rows(runs):
        panels += SUITE_PANELS
    fig, axes = plt.subplots(len(panels) // 2, 2, figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    handles = []
    for index, (label, members) in enumerate(settings):
        color = colors[index % len(colors)]
        handles.append(Line2D([], [], color=color, linewidth=2, label=label))
        for ax, (ycol, _, _) in zip(axes.flat, panels):
            draw_setting(ax, members, ycol, color)
    most = max((x for r in runs if r.metrics is not None for x in r.metrics.series("tokens", "step")[0]), default=0)
    for ax, (ycol, ylabel, title) in zip(axes.flat, panels):
        if most > 0:  # one x-range for every panel, a final-only HellaSwag included
            ax.set_xlim(-0.02 * most, 1.03 * most)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_xlabel("tokens seen")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize="medium")
        ax.grid(True, which="major", alpha=0.3)
        limits = focus_ylim(getattr(ax, "focus", []), share=1.0 if ycol == "lr" else 0.5)
        if limits is None:
            ax.text(0.5, 0.5, "not in metrics.csv" if ycol == "lr" else "not measured yet", transform=ax.transAxes,
                    ha="center", va="center", color="gray")
        elif ycol != "lr":
            ax.set_ylim(*limits)
        if ycol == "hellaswag_acc_norm" and limits is not None and limits[0] <= 0.25 <= limits[1]:
            ax.axhline(0.25, color="gray", linestyle="--", linewidth=1, label="chance (0.25)")
            ax.legend(loc="lower right", fontsize="small")

    # One legend for all panels, below them, with as many entries per line as the width allows.
    font_px = plt.rcParams["font.size"] * dpi / 72
    entry_px = max(len(h.get_label()) for h in handles) * 0.62 * font_px + 4 * font_px
    ncol = max(1, min(len(handles), int(0.95 * size[0] // entry_px)))
    legend_rows = math.ceil(len(handles) / ncol)
    bottom = min(0.4, (1.45 * font_px * legend_rows + font_px) / size[1])
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig
