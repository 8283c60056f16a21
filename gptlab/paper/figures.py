"""figures/*.pdf: the curves of gptlab.compare.plots (each setting's mean over its seeds, mean ± std as a band),
one quantity a figure, sized for a paper's column; and final val bpb against training compute."""
import math

from gptlab.compare.plots import draw_setting, focus_ylim, settings_of

FIGSIZE = (5.0, 3.2)  # inches: one column of a two-column paper at about 0.95\linewidth of a one-column one
# (file, metrics.csv column, y label)
CURVES = (("val_bpb.pdf", "val_bpb", "val bpb (bits/byte)"),
          ("train_loss.pdf", "train_loss", "train loss (nats/token, smoothed)"))


def _save(fig, path):
    # no creation date: the same runs give the same files
    fig.savefig(path, format="pdf", bbox_inches="tight", metadata={"CreationDate": None, "Producer": None})


def _plain(label):
    """A run's name as plain text in a legend: matplotlib would read $...$ in it as mathtext (and fail on bad TeX)."""
    return label.replace("$", r"\$")


def _colors(plt, n):
    return plt.get_cmap("tab10" if n <= 10 else "tab20").colors


def curve_figure(plt, runs, ycol, ylabel, path):
    """One quantity against tokens, a line and a seed band per setting; False when no run measured it."""
    from matplotlib.ticker import EngFormatter

    settings = settings_of(runs)
    colors = _colors(plt, len(settings))
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for index, (label, members) in enumerate(settings):
        draw_setting(ax, members, ycol, colors[index % len(colors)], label=_plain(label))
    limits = focus_ylim(getattr(ax, "focus", []))
    if limits is None:
        plt.close(fig)
        return False
    ax.set_ylim(*limits)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("tokens seen")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)
    plt.close(fig)
    return True


def compute_figure(plt, runs, path):
    """Final val bpb against training FLOPs: each run a point, each setting's mean ± std over its seeds a bar."""
    from matplotlib.ticker import NullFormatter

    settings = [(label, [r for r in members if r.final and r.val_bpb is not None and r.train_flops])
                for label, members in settings_of(runs)]
    settings = [(label, members) for label, members in settings if members]
    if not settings:
        return False
    colors = _colors(plt, len(settings))
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for index, (label, members) in enumerate(settings):
        color = colors[index % len(colors)]
        xs, ys = [r.train_flops for r in members], [r.val_bpb for r in members]
        ax.scatter(xs, ys, color=color, s=12, alpha=0.6)
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        std = math.sqrt(sum((y - mean_y) ** 2 for y in ys) / (len(ys) - 1)) if len(ys) > 1 else 0.0
        ax.errorbar([mean_x], [mean_y], yerr=[std], color=color, marker="D", markersize=5, capsize=3,
                    label=_plain(label))
    ax.set_xscale("log")
    low, high = min(r.train_flops for _, m in settings for r in m), max(r.train_flops for _, m in settings for r in m)
    if high < 10 * low:  # runs of one size: a decade either side, so the ticks are powers of ten, not overlapping
        ax.set_xlim(low / 10, high * 10)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training compute (FLOPs)")
    ax.set_ylabel("final val bpb (bits/byte)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)
    plt.close(fig)
    return True


def write_figures(runs, folder):
    """Draw the figures into `folder`; [(file name, caption)] of those drawn."""
    import os
    import warnings

    import matplotlib  # heavy: only when drawing
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = []
    with plt.rc_context({"font.size": 9, "pdf.fonttype": 42}), warnings.catch_warnings():
        # a run's name in a script the font lacks is drawn as boxes in the legend (the tables have it in full)
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        for name, ycol, ylabel in CURVES:
            if curve_figure(plt, runs, ycol, ylabel, os.path.join(folder, name)):
                drawn.append((name, f"{ylabel[:1].upper()}{ylabel[1:]} against tokens: each setting's mean over "
                                    "its seeds, the band mean ± std (y-range from the second half of training)."))
        if compute_figure(plt, runs, os.path.join(folder, "compute_bpb.pdf")):
            drawn.append(("compute_bpb.pdf", "Final val bpb against training compute: dots are runs, diamonds each "
                                             "setting's mean ± std over its seeds."))
    return drawn
