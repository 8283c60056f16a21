"""The leaderboard: its columns and sorting, building it from runs, and rendering it as text or as LEADERBOARD.md."""
import datetime
import os
from dataclasses import dataclass

from gptlab.compare.runs import MISSING, Run
from gptlab.compare.stats import (NOISE_SIGMAS, Noise, bpb_noise, compare_bpb, compare_hellaswag, pick_reference,
                                  seed_groups)
from gptlab.errors import UserError
from gptlab.fileio import atomic_write_text

LEADERBOARD_FILE = "LEADERBOARD.md"
STATUS_ORDER = {"finished": 0, "running": 1, "interrupted": 2, "crashed": 3, "failed": 4, "no metrics": 5}


def _human(value, suffixes=((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))):
    if value is None:
        return MISSING
    for scale, suffix in suffixes:
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.0f}"


def format_duration(seconds):
    if seconds is None:
        return MISSING
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def format_hellaswag(run):
    if run.hs_acc_norm is None:
        return MISSING
    text = f"{run.hs_acc_norm:.4f}"
    if run.hs_ci is not None:
        lo, hi = run.hs_ci
        if abs((hi - run.hs_acc_norm) - (run.hs_acc_norm - lo)) < 1e-4:
            text += f" ± {(hi - lo) / 2:.4f}"
        else:
            text += f" [{lo:.4f}, {hi:.4f}]"
    return text


def _mark(run, text):
    """Figures of a run that has not finished are the last measured ones: mark them."""
    return text if run.final or text == MISSING else f"{text}*"


def _num(value, digits):
    return MISSING if value is None else f"{value:.{digits}f}"


# id -> (header, cell text, sort key).  Sort keys are None when the value is missing (sorted last).
COLUMNS = {
    "model": ("Model", lambda r: r.model_name, lambda r: r.model_name.lower()),
    "date": ("Date", lambda r: r.started, lambda r: r.started),
    "params": ("Params", lambda r: _human(r.n_params), lambda r: r.n_params),
    "tokens": ("Tokens", lambda r: _mark(r, _human(r.tokens)), lambda r: r.tokens),
    "tokenizer": ("Tokenizer", lambda r: r.tokenizer or MISSING, lambda r: r.tokenizer),
    "val_loss": ("Val loss", lambda r: _mark(r, _num(r.val_loss, 4)), lambda r: r.val_loss),
    "val_bpb": ("Val bpb", lambda r: _mark(r, _num(r.val_bpb, 4)), lambda r: r.val_bpb),
    "hellaswag": ("HellaSwag acc_norm ±95% CI", lambda r: _mark(r, format_hellaswag(r)), lambda r: r.hs_acc_norm),
    "wall_time": ("Wall time", lambda r: _mark(r, format_duration(r.wall_time_s)), lambda r: r.wall_time_s),
    "gpu": ("GPU", lambda r: r.gpu or MISSING, lambda r: r.gpu),
    "mfu": ("MFU", lambda r: MISSING if r.mfu is None else _mark(r, f"{100 * r.mfu:.1f}%"), lambda r: r.mfu),
    "peak_mem": ("Peak mem", lambda r: MISSING if r.peak_mem_gb is None else
                 f"{r.peak_mem_gb:.2f} GB" + (" RSS" if r.peak_mem_is_rss else ""),
                 lambda r: r.peak_mem_gb),
    "status": ("Status", lambda r: r.status, lambda r: STATUS_ORDER.get(r.status, 9)),
    "run": ("Run", lambda r: r.name, lambda r: r.name),
}
SORT_ALIASES = {"bpb": "val_bpb", "loss": "val_loss", "acc_norm": "hellaswag", "hs": "hellaswag", "time": "wall_time",
                "wall": "wall_time", "memory": "peak_mem", "mem": "peak_mem", "name": "model", "folder": "run",
                "n_params": "params"}


def sort_column(name):
    """Normalise a --sort argument to a column id, or a UserError listing the valid ones."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = SORT_ALIASES.get(key, key)
    if key not in COLUMNS:
        raise UserError(f"unknown --sort column {name!r}; valid columns: {', '.join(COLUMNS)}")
    return key


def sort_runs(runs, column=None, descending=False):
    """Default: finished runs first by val bpb ascending, then unfinished ones; else by `column`, missing last."""
    if column is None:
        return sorted(runs, key=lambda r: (not r.final, r.val_bpb is None,
                                           r.val_bpb if r.val_bpb is not None else 0.0,
                                           STATUS_ORDER.get(r.status, 9), r.name))
    key_of = COLUMNS[column][2]
    present = [r for r in runs if key_of(r) is not None]
    missing = [r for r in runs if key_of(r) is None]
    present.sort(key=lambda r: (key_of(r), r.name), reverse=descending)
    return present + sorted(missing, key=lambda r: r.name)


@dataclass
class Leaderboard:
    runs: list          # sorted
    reference: Run
    noise: Noise
    groups: list
    headers: list
    rows: list          # list of cell-text lists (the Run column holds the folder name)
    notes: list


def build_leaderboard(runs, sort=None, descending=False, baseline=None, folder_notes=(), noise_pool=()):
    """The table for `runs`; seed groups (noise) come from `runs` plus `noise_pool` (the other runs on disk)."""
    shown = {os.path.realpath(r.path) for r in runs}
    pool = list(runs) + [r for r in noise_pool if os.path.realpath(r.path) not in shown]
    groups = [g for g in seed_groups(pool) if any(os.path.realpath(r.path) in shown for r in g.runs)]
    reference = pick_reference(runs, baseline)
    noise = bpb_noise(reference, groups) if reference else None
    ordered = sort_runs(runs, sort, descending)
    ref_label = "baseline" if baseline is not None else "best"
    headers = ["#"] + [COLUMNS[c][0] for c in COLUMNS] + [f"bpb vs {ref_label}", f"HellaSwag vs {ref_label}"]
    rows = []
    for rank, run in enumerate(ordered, start=1):
        cells = [str(rank)] + [str(COLUMNS[c][1](run)) for c in COLUMNS]
        if reference is None:
            cells += [MISSING, MISSING]
        else:
            cells += [compare_bpb(run, reference, noise), compare_hellaswag(run, reference)]
        rows.append(cells)

    notes = []
    if reference is not None:
        how = f"--baseline {reference.name}" if baseline is not None else \
            f"the finished run with the lowest val bpb, {reference.name}"
        notes.append(f"Runs are compared against {how}.")
        if noise is not None:
            notes.append(f"val bpb differences below {NOISE_SIGMAS:g} × {noise.std:.4f} ({noise.source}) are "
                         "\"not distinguishable\"; HellaSwag is \"not distinguishable\" when the 95% CIs overlap.")
        else:
            notes.append("No seed group yet, so the val bpb noise is unknown: repeat a run with another --seed to "
                         "measure it. HellaSwag is \"not distinguishable\" when the 95% CIs overlap.")
    else:
        notes.append("No finished run with a val bpb yet, so nothing to compare against.")
    tokenizers = sorted({r.tokenizer_id for r in runs if r.tokenizer_id})
    if len(tokenizers) > 1:
        names = sorted({r.tokenizer or MISSING for r in runs})
        notes.append(f"These runs use {len(tokenizers)} different tokenizers ({', '.join(names)}): val loss is per "
                     "token and NOT comparable across tokenizers; compare on val bpb (bits per byte of text), which is.")
    if any(not r.final for r in runs):
        notes.append("* last measured value: the run has not finished (running, interrupted, crashed or failed).")
    for run in ordered:
        for note in run.notes + ([f"error: {run.error}"] if run.error else []):
            notes.append(f"{run.name}: {note}")
    notes.extend(folder_notes)
    return Leaderboard(ordered, reference, noise, groups, headers, rows, notes)


def noise_rows(groups):
    rows = []
    for group in groups:
        first = group.runs[0]
        seeds = ", ".join(str(r.seed) for r in group.runs)
        bpb, acc = group.stats("val_bpb"), group.stats("hs_acc_norm")
        rows.append([first.model_name, str(len(group.runs)), seeds,
                     f"{bpb[0]:.4f} ± {bpb[1]:.4f} (n={bpb[2]})" if bpb else MISSING,
                     f"{acc[0]:.4f} ± {acc[1]:.4f} (n={acc[2]})" if acc else MISSING,
                     ", ".join(r.name for r in group.runs)])
    return rows


NOISE_HEADERS = ["Model", "Runs", "Seeds", "Val bpb mean ± std", "HellaSwag acc_norm mean ± std", "Run folders"]


def text_table(headers, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _md_escape(text):
    return text.replace("|", "\\|").replace("*", "\\*")


def markdown_table(headers, rows):
    lines = ["| " + " | ".join(map(_md_escape, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(_md_escape, row)) + " |" for row in rows]
    return "\n".join(lines)


def render_text(board):
    out = [text_table(board.headers, board.rows), ""]
    out += [f"note: {n}" for n in board.notes]
    out += ["", "Noise (runs that differ only by seed):"]
    groups = noise_rows(board.groups)
    out.append(text_table(NOISE_HEADERS, groups) if groups else
               "  no seed groups yet: rerun a config with a different --seed to measure run-to-run noise")
    return "\n".join(out) + "\n"


def render_markdown(board, markdown_dir, title):
    """LEADERBOARD.md: the same table, with each run linked relative to the markdown file's folder."""
    run_col = board.headers.index(COLUMNS["run"][0])
    rows = []
    for run, row in zip(board.runs, board.rows):
        link = os.path.relpath(run.path, markdown_dir).replace(os.sep, "/") + "/"
        target = f"<{link}>" if " " in link else link
        rows.append(row[:run_col] + [f"[{run.name}]({target})"] + row[run_col + 1:])
    out = [f"# {title}", "",
           f"Generated by `python compare_experiments.py` on "
           f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; do not edit by hand.", "",
           markdown_table(board.headers, rows), ""]
    out += [f"- {_md_escape(n)}" for n in board.notes]
    out += ["", "## Noise", "", "Runs that share a config except the seed; the std of their final val bpb is the "
            "run-to-run noise used above.", ""]
    groups = noise_rows(board.groups)
    out.append(markdown_table(NOISE_HEADERS, groups) if groups else
               "No seed groups yet: rerun a config with a different `--seed` to measure run-to-run noise.")
    return "\n".join(out) + "\n"


def write_leaderboard(board, path, title):
    atomic_write_text(path, render_markdown(board, os.path.dirname(os.path.abspath(path)), title), overwrite=True)
