"""The leaderboard: its columns and sorting, building it from runs, and rendering it as text or as LEADERBOARD.md."""
import datetime
import math
import os
import statistics
import textwrap
from dataclasses import dataclass

# tabulate over rich: small and plain text only (no terminal codes or box drawing), so a pipe gets the same text.
from tabulate import tabulate

from gptlab.compare.diff import research_code_notes
from gptlab.compare.judged import format_judged
from gptlab.compare.runs import MISSING, Run
from gptlab.compare.stats import (RECORD_P, RECORD_POWER, SIGNIFICANCE_LEVEL, Noise, _unjudged, _values, bpb_noise,
                                  compare_groups, compare_settings, format_p, group_of, hellaswag_holm_verdict,
                                  holm_verdict, pick_reference, runs_needed, seed_groups, setting_key)
from gptlab.core.errors import UserError, escape_controls
from gptlab.core.files import atomic_write_text
from gptlab.dataset.hellaswag_file import HELLASWAG_ROWS

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


def _with_interval(value, ci):
    """`value` with its 95% interval: ± half its width when symmetric, else [lo, hi]."""
    text = f"{value:.4f}"
    if ci is not None:
        lo, hi = ci
        if abs((hi - value) - (value - lo)) < 1e-4:
            text += f" ± {(hi - lo) / 2:.4f}"
        else:
            text += f" [{lo:.4f}, {hi:.4f}]"
    return text


def format_hellaswag(run):
    if run.hs_acc_norm is None:
        return MISSING
    text = _with_interval(run.hs_acc_norm, run.hs_ci)
    if run.hs_n and run.hs_n < HELLASWAG_ROWS:  # the first n examples only: not the published figure
        text += f" (first {int(run.hs_n)})"
    return text


def format_suite(run, attr):
    """A --evals suite figure (attr "evals_core" or "evals_gold_bpb") with its interval; "(first N)" when the run
    scored only the first N examples of each task (--evals_limit), as the HellaSwag cell does."""
    value = getattr(run, attr)
    if value is None:
        return MISSING
    text = _with_interval(value, getattr(run, attr + "_ci"))
    if run.evals_limit:
        text += f" (first {run.evals_limit})"
    return text


def _mark(run, text):
    """Figures of a run that has not finished are the last measured ones: mark them."""
    return text if run.final or text == MISSING else f"{text}*"


OVERLOADED_MARK = "†"


def _timed(run, text):
    """A timing taken while the machine's load average was above its cores measures the load: mark it."""
    return f"{text}{OVERLOADED_MARK}" if run.overloaded and text != MISSING else text


def _num(value, digits):
    return MISSING if value is None else f"{value:.{digits}f}"


def _three_digits(value):
    """3 significant digits without an exponent: 0.0167, 0.000019 (not 1.9e-05)."""
    text = f"{value:.3g}"
    if "e" in text:
        text = f"{value:.{2 - math.floor(math.log10(abs(value)))}f}".rstrip("0").rstrip(".")
    return text


def format_hours(hours):
    return MISSING if hours is None else f"{hours:.2f}" if abs(hours) >= 10 else _three_digits(hours)


def format_usd(usd):
    if usd is None:
        return MISSING
    if abs(usd) >= 100:
        return f"${usd:,.0f}"
    return f"${usd:.2f}" if abs(usd) >= 1 else f"${_three_digits(usd)}"


def _gpu_hours_cell(run):
    return _mark(run, _timed(run, format_hours(run.gpu_hours) + ("" if run.on_gpu or run.gpu_hours is None
                                                                 else " (CPU)")))


# The unit of "cost per ... bpb": the leaderboard prices each 0.01 bpb of difference.
BPB_STEP = 0.01


def cost_per_bpb(run, reference, same_config=False):
    """What 0.01 val bpb costs between the reference and `run`: the extra dollars (GPU-hours when a price is
    unknown) of `run` divided by its gain in units of 0.01 bpb."""
    if run is reference:
        return "reference"
    if not (run.final and reference.final) or run.val_bpb is None or reference.val_bpb is None:
        return MISSING
    if same_config:
        return "same config"
    if run.cost_usd is not None and reference.cost_usd is not None:
        extra, show = run.cost_usd - reference.cost_usd, format_usd
    elif run.gpu_hours is not None and reference.gpu_hours is not None:
        extra, show = run.gpu_hours - reference.gpu_hours, lambda h: f"{format_hours(h)} GPU-h"
    else:
        return MISSING
    gain = (reference.val_bpb - run.val_bpb) / BPB_STEP
    if gain == 0 and extra == 0:
        return "same"
    if gain == 0 and extra < 0:  # a tie on val bpb at a lower cost (no gain to divide by)
        return "same bpb, cheaper"
    if gain > 0 and extra <= 0:
        return "better and cheaper"
    if gain <= 0 and extra >= 0:
        return "worse and costlier"
    if gain > 0:
        return f"{show(extra / gain)} per {BPB_STEP:g} gained"
    return f"saves {show(extra / gain)} per {BPB_STEP:g} lost"


# id -> (header, cell text, sort key).  Sort keys are None when the value is missing (sorted last).
COLUMNS = {
    "model": ("Model", lambda r: r.model_name, lambda r: r.model_name.lower()),
    "date": ("Date", lambda r: r.started, lambda r: r.started),
    "params": ("Params", lambda r: _human(r.n_params), lambda r: r.n_params),
    "tokens": ("Tokens", lambda r: _mark(r, _human(r.tokens)), lambda r: r.tokens),
    "tokenizer": ("Tokenizer", lambda r: r.tokenizer or MISSING, lambda r: r.tokenizer),
    "bytes_per_token": ("Bytes/token", lambda r: _num(r.bytes_per_token, 3), lambda r: r.bytes_per_token),
    "val_loss": ("Val loss", lambda r: _mark(r, _num(r.val_loss, 4)), lambda r: r.val_loss),
    "val_bpb": ("Val bpb", lambda r: _mark(r, _num(r.val_bpb, 4)), lambda r: r.val_bpb),
    "hellaswag": ("HellaSwag acc_norm ±95% CI", lambda r: _mark(r, format_hellaswag(r)), lambda r: r.hs_acc_norm),
    "core": ("Core ±95% CI", lambda r: _mark(r, format_suite(r, "evals_core")), lambda r: r.evals_core),
    "gold_bpb": ("Gold bpb ±95% CI", lambda r: _mark(r, format_suite(r, "evals_gold_bpb")),
                 lambda r: r.evals_gold_bpb),
    "judged": ("Judged win ±95% CI vs", lambda r: format_judged(r.judged or []) or MISSING,
               lambda r: next((j.win_rate for j in r.judged or [] if j.win_rate is not None), None)),
    "wall_time": ("Wall time", lambda r: _mark(r, _timed(r, format_duration(r.wall_time_s))),
                  lambda r: r.wall_time_s),
    "gpu": ("GPU", lambda r: r.gpu or MISSING, lambda r: r.gpu),
    "gpu_hours": ("GPU-h", _gpu_hours_cell, lambda r: r.gpu_hours),
    "cost": ("Cost", lambda r: _mark(r, _timed(r, format_usd(r.cost_usd))), lambda r: r.cost_usd),
    "mfu": ("MFU", lambda r: MISSING if r.mfu is None else _mark(r, f"{100 * r.mfu:.1f}%"), lambda r: r.mfu),
    "peak_mem": ("Peak mem", lambda r: MISSING if r.peak_mem_gb is None else
                 f"{r.peak_mem_gb:.2f} GB" + (" RSS" if r.peak_mem_is_rss else ""),
                 lambda r: r.peak_mem_gb),
    "status": ("Status", lambda r: r.status, lambda r: STATUS_ORDER.get(r.status, 9)),
    "run": ("Run", lambda r: r.name, lambda r: r.name),
}
SORT_ALIASES = {"bpb": "val_bpb", "loss": "val_loss", "acc_norm": "hellaswag", "hs": "hellaswag", "time": "wall_time",
                "wall": "wall_time", "memory": "peak_mem", "mem": "peak_mem", "name": "model", "folder": "run",
                "n_params": "params", "gpuh": "gpu_hours", "gpu_h": "gpu_hours", "usd": "cost", "dollars": "cost",
                "bpt": "bytes_per_token", "compression": "bytes_per_token", "evals_core": "core", "centred": "core",
                "evals_gold_bpb": "gold_bpb", "gold": "gold_bpb", "gold_answer_bpb": "gold_bpb", "win_rate": "judged",
                "judge": "judged"}
# The leaderboard's columns against the reference, after COLUMNS; ids of board.headers, in order.
VERSUS_COLUMNS = ("setting_bpb", "bpb_vs", "hellaswag_vs", "cost_per_bpb")
COLUMN_IDS = ("rank", *COLUMNS, *VERSUS_COLUMNS)
# The text view keeps the columns in this order while they fit the terminal. Run (the folder name: date, time and
# model name) is what a command takes to act on a row, so it comes before Model and Date, which it repeats.
TEXT_PRIORITY = ("rank", "run", "val_bpb", "setting_bpb", "bpb_vs", "hellaswag", "core", "gold_bpb", "judged", "cost",
                 "hellaswag_vs", "status", "tokens", "params", "wall_time", "gpu_hours", "cost_per_bpb", "model",
                 "val_loss", "tokenizer", "bytes_per_token", "gpu", "mfu", "peak_mem", "date")
# Piped (into head, less, a file) without --wide or --columns: these, unwrapped (issue 39: 21 columns hard-wrapped);
# core after hellaswag when a run has --evals figures
COMPACT_COLUMNS = ("run", "val_bpb", "setting_bpb", "bpb_vs", "hellaswag", "cost")
# The --evals suite's columns: a figure is a mean over the run's tasks and examples, so comparable only between
# runs scored on the same ones
SUITE_COLUMNS = ("core", "gold_bpb")
# Never left out as "the same in every row": what a row is
ALWAYS_SHOWN = ("rank", "run", "val_bpb")


def _column_key(name):
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    return SORT_ALIASES.get(key, key)


def sort_column(name):
    """Normalise a --sort argument to a column id, or a UserError listing the valid ones."""
    key = _column_key(name)
    if key not in COLUMNS:
        raise UserError(f"unknown --sort column {name!r}; valid columns: {', '.join(COLUMNS)}")
    return key


def text_columns(spec):
    """Normalise --columns a,b,c to column ids, or a UserError naming the unknown ones and listing the valid ones."""
    names = [n for n in spec.split(",") if n.strip()]
    unknown = [n.strip() for n in names if _column_key(n) not in COLUMN_IDS[1:]]
    if unknown or not names:
        raise UserError(f"unknown --columns column(s) {', '.join(map(repr, unknown)) or repr(spec)}; valid "
                        f"columns: {', '.join(COLUMN_IDS[1:])}")
    return [_column_key(n) for n in names]


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
    comparisons: list = ()  # stats.GroupComparison of each other seed group against the reference's
    runs_needed: str = None  # the line saying how many runs a comparison of this noise needs
    alpha: float = SIGNIFICANCE_LEVEL  # the p below which a difference is a verdict (--alpha)
    family: list = ()  # stats.SettingComparison: the settings compared, Holm-corrected
    match: str = "all"
    pairs: bool = False


def _compare_groups_with_reference(reference, groups, family):
    """The seed groups (2+ finished seeds) of the family's comparisons that were tested: Welch's t-test and the
    pooled HellaSwag test of each pair (vs the reference's group, or every pair with --pairs)."""
    out = []
    for c in family:
        a, b = group_of(c.run, groups), group_of(c.other, groups)
        if c.test is not None and a and b and a.stats("val_bpb") and b.stats("val_bpb"):
            comparison = compare_groups(a, b)
            if comparison is not None:
                comparison.setting = c
                out.append(comparison)
    return out


def setting_bpb(run, groups):
    """The val bpb of the run's setting over its seeds: mean ± std (n in the Noise table), or — for a run alone."""
    group = group_of(run, groups)
    stats = group.stats("val_bpb") if group else None
    return f"{stats[0]:.4f} ± {stats[1]:.4f}" if stats else MISSING


def _versus(run, reference, groups, family, attr):
    """(the cell, None) when run vs reference on `attr` needs no test (the reference itself, a figure missing or not
    final, a run of the reference's seed group), else (None, the family's comparison of run's setting with the
    reference's, or None)."""
    cell = _unjudged(run, reference, attr)
    if cell is not None:
        return cell, None
    group = group_of(run, groups)
    if group is not None and group is group_of(reference, groups):
        return f"{getattr(run, attr) - getattr(reference, attr):+.4f} same config (seed noise)", None
    key = setting_key(run)
    return None, next((c for c in family if c.other is reference and setting_key(c.run) == key), None)


def hellaswag_cell(run, reference, groups, family, alpha):
    """The "HellaSwag vs baseline" cell: its setting's answers against the baseline's (pooled over the seeds),
    Holm-corrected over the HellaSwag family; refused as its val bpb comparison is for another length or size (a
    longer run is expected to score higher too); asked for (--match), the same mark."""
    cell, c = _versus(run, reference, groups, family, "hs_acc_norm")
    if cell is not None:
        return cell
    diff = run.hs_acc_norm - reference.hs_acc_norm
    if c is None:
        return f"{diff:+.4f} not compared"
    if (c.hs_refused or "").startswith("not compared: other"):
        return c.hs_refused
    asked = "".join(f" [other {k}: {v}]" for k, v in c.differs.items() if k != "validation set")
    if c.hs_test is None:
        return f"{diff:+.4f} {c.hs_refused or 'not compared'}{asked}"
    return f"{diff:+.4f} {hellaswag_holm_verdict(c, alpha)}{asked}"


def bpb_cell(run, reference, groups, family, alpha, match):
    """The "bpb vs baseline" cell: its setting's comparison with the baseline's (Holm-corrected p), or why none."""
    attr = "matched_bpb" if match == "flops" else "val_bpb"
    cell, c = _versus(run, reference, groups, family, "val_bpb")
    if cell is not None:
        return cell
    if c is None or c.refused:
        return c.refused if c is not None else "not compared"
    mine, theirs = getattr(run, attr, None), getattr(reference, attr, None)
    diff = mine - theirs if None not in (mine, theirs) else c.diff
    asked = "".join(f" [other {k}: {v}]" for k, v in c.differs.items())
    if c.test is None:
        verdict = "lower" if diff < 0 else "higher" if diff > 0 else "equal"
        return f"{diff:+.4f} ({verdict}; noise unknown){asked}"
    return f"{diff:+.4f} {holm_verdict(c, alpha)}{asked}"


def runs_needed_line(noise, detect_bpb):
    if noise is None or not detect_bpb:
        return None
    n = runs_needed(detect_bpb, noise.std)  # compare_experiments.py's --detect_bpb is in [1e-6, 10]
    how_many = f"{n} runs per side" if n is not None else "more than 100,000 runs per side"
    return (f"Runs needed to tell apart a val bpb difference of {detect_bpb:g} at p < {RECORD_P:g} with "
            f"{RECORD_POWER:.0%} power, given the noise (std {noise.std:.4f}, {noise.source}): {how_many} "
            "(two-sample t-test; --detect_bpb sets the difference).")


def _task_list(tasks):
    if tasks is None:
        return "tasks not recorded"
    shown = ", ".join(tasks[:8]) + (", ..." if len(tasks) > 8 else "")
    return f"{shown} ({len(tasks)} task{'s' if len(tasks) != 1 else ''})"


def suite_marks(ordered, reference, rows):
    """Mark the core and gold bpb cells of runs scored on other tasks ([tasks A], [tasks B]: the reference's set
    first, then as the rows come) and return the notes that say which and why ((first N) already marks another
    --evals_limit, as the HellaSwag cell does); nothing when every run with figures shares one suite."""
    scored = [r for r in ([reference] if reference is not None else []) + list(ordered) if r.evals_core is not None]
    suites = {(r.evals_tasks, r.evals_limit) for r in scored}
    if len(suites) < 2:
        return []
    letters = {}
    for run in scored:
        letters.setdefault(run.evals_tasks, chr(ord("A") + len(letters)) if len(letters) < 26 else "?")
    notes = []
    if len(letters) > 1:
        cols = [1 + list(COLUMNS).index(c) for c in SUITE_COLUMNS]
        for run, cells in zip(ordered, rows):
            if run.evals_core is not None:
                for i in cols:
                    cells[i] += f" [tasks {letters[run.evals_tasks]}]"
        notes.append("Core / gold bpb tasks: " + "; ".join(f"{letter}: {_task_list(tasks)}"
                                                          for tasks, letter in letters.items()) + ".")
    notes.append("Core and gold bpb are means over a run's tasks and examples: these runs were scored on other "
                 "tasks or other examples ((first N): the first N of each task, --evals_limit), so compare them only "
                 "between runs of one task set and the same examples.")
    return notes


def build_leaderboard(runs, sort=None, descending=False, baseline=None, folder_notes=(), noise_pool=(),
                      alpha=SIGNIFICANCE_LEVEL, detect_bpb=BPB_STEP, match="all", pairs=False):
    """The table for `runs`; seed groups (noise) come from `runs` plus `noise_pool` (the other runs on disk)."""
    shown = {os.path.realpath(r.path) for r in runs}
    pool = list(runs) + [r for r in noise_pool if os.path.realpath(r.path) not in shown]
    groups = [g for g in seed_groups(pool) if any(os.path.realpath(r.path) in shown for r in g.runs)]
    reference, chosen = pick_reference(runs, baseline, groups)
    noise = bpb_noise(reference, groups) if reference else None
    family = compare_settings(runs, reference, groups, noise, match, pairs) if reference else []
    ordered = sort_runs(runs, sort, descending)
    ref_label = "baseline"
    headers = ["#"] + [COLUMNS[c][0] for c in COLUMNS] + ["Setting bpb ± std", f"bpb vs {ref_label}",
                                                           f"HellaSwag vs {ref_label}",
                                                           f"Cost per {BPB_STEP:g} bpb vs {ref_label}"]
    rows = []
    for rank, run in enumerate(ordered, start=1):
        cells = [str(rank)] + [str(COLUMNS[c][1](run)) for c in COLUMNS] + [setting_bpb(run, groups)]
        if reference is None:
            cells += [MISSING, MISSING, MISSING]
        else:
            group = group_of(run, groups)
            same_config = group is not None and group is group_of(reference, groups)
            cells += [bpb_cell(run, reference, groups, family, alpha, match),
                      hellaswag_cell(run, reference, groups, family, alpha),
                      cost_per_bpb(run, reference, same_config)]
        rows.append(cells)

    notes = suite_marks(ordered, reference, rows)
    if reference is not None:
        notes.append(f"Runs are compared against {reference.name}, a run of {chosen}"
                     if baseline is None else f"Runs are compared against {chosen}")
        tested = sum(c.test is not None for c in family)
        notes.append(("" if not family else ("Every pair of settings" if pairs else "Each setting (a seed group, or "
                      "a run alone) against the baseline's") + f": {tested} val bpb test(s), Holm-corrected: a "
                      "verdict is at the corrected p. "
                      + {"all": "Settings of other lengths (steps, tokens) or sizes (parameters) are not compared "
                                "(--match tokens, params, flops or none to ask).",
                         "tokens": "--match tokens: settings of other sizes are compared at equal tokens, marked.",
                         "params": "--match params: settings of other lengths are compared at equal size, marked.",
                         "flops": "--match flops: val bpb at the baseline's training FLOPs, read off each run's "
                                  "curve (bpb vs baseline is the difference there).",
                         "none": "--match none: final val bpb compared whatever the lengths, sizes and "
                                 "validation sets, marked."}[match]
                      + ("" if match == "none" else " Settings whose val bpb was measured on another validation set "
                         "(other val shards, or another --val_steps, --val_batch_size or --val_seq_len, with one "
                         "tokenizer) are not compared: the difference would be partly other text (--match none to "
                         "ask).")))
        notes = [n for n in notes if n]
        hs_tested = sum(c.hs_test is not None for c in family)
        hellaswag_how = ("HellaSwag vs baseline: a two-proportion z-test of the two settings' acc_norm, answers "
                         "pooled over each setting's seeds (only answers to the same examples), a family of its own: "
                         f"{hs_tested} test(s), Holm-corrected; runs of the baseline's seed group are the same config. "
                         f"\"better\" / \"worse\" when the corrected p < {alpha:g}, else \"not distinguishable\".")
        if noise is not None:
            notes.append("val bpb p: Welch's t-test of the two settings' seed groups when both have 2+ seeds, else a "
                         f"t-test of their means with the run-to-run std {noise.std:.4f} ({noise.source}; a run "
                         "without a seed group counts as one value); runs of one seed group are the same config. "
                         + hellaswag_how)
        else:
            notes.append("No seed group yet, so the val bpb noise is unknown: repeat a run with another --seed to "
                         "measure it. " + hellaswag_how)
        notes.append(f"Cost per {BPB_STEP:g} bpb: the run's extra cost over the reference's divided by its val bpb "
                     f"gain in units of {BPB_STEP:g} (in GPU-hours where no price is known). GPU-h = processes × wall "
                     "time (a CPU run counts its processes: CPU process-hours); Cost = GPU-h × $/GPU-hour (the "
                     "run's --usd_per_gpu_hour, else gptlab/core/gpus.py's typical rental price by GPU name). "
                     "These compare wall-clock time on each run's own machine, threads and load (config.json "
                     "records cpu_threads and the load average), so they compare ideas only on the same hardware "
                     f"at the same load ({OVERLOADED_MARK}: timed on an overloaded machine).")
    else:
        notes.append("No finished run with a val bpb yet, so nothing to compare against.")
    tokenizers = sorted({r.tokenizer_id for r in runs if r.tokenizer_id})
    if len(tokenizers) > 1:
        names_of = {}
        for r in runs:
            if r.tokenizer_id:
                names_of.setdefault(r.tokenizer_id, r.tokenizer or MISSING)
        shared = len(set(names_of.values())) < len(names_of)  # one name, other merges: tell them apart by hash
        names = sorted(f"{name} ({tid[:8]})" if shared else name for tid, name in names_of.items())
        notes.append(f"These runs use {len(tokenizers)} different tokenizers ({', '.join(names)}): val loss is per "
                     "token and NOT comparable across tokenizers; compare on val bpb (bits per byte of text), which is.")
    overloaded = [r for r in runs if r.overloaded]
    if overloaded:
        notes.append(f"{OVERLOADED_MARK} timed on an overloaded machine (its load average rose above its cores during "
                     "the run): " + ", ".join(f"{r.name} (load {r.load:g} on {r.cores} cores"
                                              + (f", {r.cpu_threads} threads" if r.cpu_threads else "") + ")"
                                              for r in overloaded)
                     + "; its wall time, GPU-h and cost measure the load as much as the run.")
    if any(not r.final for r in runs):
        notes.append("* last measured value: the run has not finished (running, interrupted, crashed or failed).")
    for run in ordered:
        for note in run.notes + ([f"error: {run.error}"] if run.error else []):
            notes.append(f"{run.name}: {note}")
    if any(r.bytes_per_token is None and r.tokenizer for r in runs):
        notes.append("Bytes/token: — where the run's tokenizer or validation shards are not on this machine.")
    notes.extend(research_code_notes(runs))
    notes.extend(folder_notes)
    return Leaderboard(ordered, reference, noise, groups, headers, rows, notes,
                       _compare_groups_with_reference(reference, groups, family), runs_needed_line(noise, detect_bpb),
                       alpha, family, match, pairs)


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


def _hellaswag_part(s, alpha):
    """'; HellaSwag acc_norm +0.0113, two-proportion z = 0.72, p = 0.47, Holm p = 0.94 (not distinguishable; ...)'
    for a comparison of the family with a HellaSwag test, else ''."""
    if s.hs_test is None:
        return ""
    t, (n_a, n_b) = s.hs_test, s.hs_answers
    verdict = ("higher" if t.diff > 0 else "lower") if s.hs_p_holm < alpha else "not distinguishable"
    return (f"; HellaSwag acc_norm {t.diff:+.4f}, two-proportion z = {t.z:.2f}, {format_p(t.p)}"
            + ("" if s.hs_m <= 1 else f", Holm {format_p(s.hs_p_holm)}")
            + f" ({verdict}; {n_a:,} vs {n_b:,} answers pooled over the seeds)")


def comparison_lines(board):
    """One line per comparison of the family (each setting against the baseline's, or every pair): seed groups by
    Welch's t-test on val bpb, a run alone by a t-test with the measured noise, and both on HellaSwag by the pooled
    two-proportion test; each family's Holm-corrected p decides its verdict; a comparison refused says why."""
    lines = []
    for s in board.family:  # each line reports the test its verdict is from (--match flops: values at the FLOPs)
        name, other = s.run.model_name, s.other.model_name
        if s.refused:
            lines.append(f"{name} vs {other}: {s.refused}" + _hellaswag_part(s, board.alpha))
            continue
        p = s.p_holm
        asked = "".join(f" [other {k}: {v}]" for k, v in s.differs.items())
        hs = _hellaswag_part(s, board.alpha)
        if s.summaries is not None:
            (mean, std, n), (ref_mean, ref_std, ref_n) = s.summaries
            verdict = ("lower" if s.test.diff < 0 else "higher") if p < board.alpha else "not distinguishable"
            lines.append(f"{name} ({mean:.4f} ± {std:.4f}, n={n}) vs {other} ({ref_mean:.4f} ± {ref_std:.4f}, "
                         f"n={ref_n}): val bpb {s.test.diff:+.4f}, Welch t = {s.test.t:.2f}, df = {s.test.df:.1f}, "
                         f"{format_p(s.test.p)}" + ("" if s.m <= 1 else f", Holm {format_p(p)}") + f" ({verdict})"
                         + hs + asked)
        elif s.test is None:
            lines.append(f"{name} (n={s.n[0]}) vs {other} (n={s.n[1]}): val bpb {s.diff:+.4f}, noise unknown{hs}"
                         f"{asked}")
        else:
            verdict = ("lower" if s.diff < 0 else "higher") if p < board.alpha else "not distinguishable"
            lines.append(f"{name} (n={s.n[0]}) vs {other} (n={s.n[1]}): val bpb {s.diff:+.4f}, "
                         f"{'Welch ' if s.test.how == 'Welch' else ''}t = {s.test.t:.2f}, df = {s.test.df:.1f}"
                         f"{'' if s.test.how == 'Welch' else ' (measured noise)'}, {format_p(s.test.p)}"
                         + ("" if s.m <= 1 else f", Holm {format_p(p)}") + f" ({verdict}){hs}{asked}")
    return lines


def comparisons_title(board):
    tested = sum(s.test is not None for s in board.family)
    hs_tested = sum(s.hs_test is not None for s in board.family)
    what = "every pair of settings" if board.pairs else "each setting against the baseline's"
    at = " at the baseline's training FLOPs" if board.match == "flops" else ""
    hs = f"; HellaSwag: Holm's correction over its own {hs_tested} test(s)" if hs_tested else ""
    return f"Settings compared ({what}, val bpb{at}; Holm's correction over {tested} test(s){hs}):"


def one_line(text):
    """`text` with its control characters escaped (\\n, \\x1b ...), so a table cell stays on its row (a newline in
    --model_name or in a folder's name)."""
    return escape_controls(text)


def text_table(headers, rows, keep=None):
    """Columns `keep` (indices, in that order; default all) as a plain-text table, cells left-aligned as given
    (control characters escaped, so each row is one line)."""
    import tabulate as tabulate_module

    keep = range(len(headers)) if keep is None else keep
    padding, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0  # columns as wide as their text: the
    try:  # two spaces between them already separate them, and a narrow terminal gets 2 characters a column back
        return tabulate([[one_line(row[i]) for i in keep] for row in rows], [one_line(headers[i]) for i in keep],
                        "simple", disable_numparse=True, stralign="left")
    finally:
        tabulate_module.MIN_PADDING = padding


def fit_columns(headers, rows, width, order):
    """The columns of `order` (indices) that fit a text table in `width` characters, in that order: each one that
    would overflow is left out."""
    widths = [len(dashes) for dashes in text_table(headers, rows).splitlines()[1].split()]
    kept, used = [], -2
    for i in order:
        if used + 2 + widths[i] <= width:  # "simple" separates columns by two spaces
            kept.append(i)
            used += 2 + widths[i]
    return kept


def constant_columns(headers, rows, order, always=()):
    """Indices of `order` whose cell is the same in every row (2 rows or more), `always` excepted."""
    if len(rows) < 2:
        return []
    return [i for i in order if i not in always and len({row[i] for row in rows}) == 1]


def _fitted(headers, rows, width, order, names, always=()):
    """The table of the columns of `order` that fit `width`, and a line naming the others (`names`); a column the
    same in every row is not given room but named once, with its value; width 0: every column, as they come."""
    if not width:
        return [text_table(headers, rows, range(len(headers)))]
    same = constant_columns(headers, rows, order, always)
    keep = fit_columns(headers, rows, width, [i for i in order if i not in same])
    left = [names[i] for i in range(len(headers)) if i not in keep and i not in same]
    out = [text_table(headers, rows, keep)]
    valued = [i for i in same if rows[0][i] != MISSING]
    if valued:
        out += _wrap("Same in every row: " + ", ".join(f"{one_line(headers[i])} {one_line(rows[0][i])}"
                                                       for i in valued) + ".", width)
    if len(valued) < len(same):
        out += _wrap(f"No value in any row: {', '.join(names[i] for i in same if i not in valued)}.", width)
    if left:
        out += _wrap(f"Left out to fit {width} characters: {', '.join(left)} (--wide shows every column).", width)
    return out


def _wrap(text, width, indent=""):
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) if width else [text]


def _md_escape(text):
    return text.replace("|", "\\|").replace("*", "\\*")


def _md_cell(text):
    return _md_escape(one_line(text))


def markdown_table(headers, rows):
    """A markdown table; `|` and `*` escaped, control characters too (a newline would end the row)."""
    lines = ["| " + " | ".join(map(_md_cell, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def compact_columns(board):
    """COMPACT_COLUMNS, with core after hellaswag when a run of the board has --evals figures."""
    if not any(r.evals_core is not None for r in board.runs):
        return COMPACT_COLUMNS
    at = COMPACT_COLUMNS.index("hellaswag") + 1
    return COMPACT_COLUMNS[:at] + ("core",) + COMPACT_COLUMNS[at:]


def render_text(board, width=0, columns=None, compact=False):
    """The leaderboard, noise and comparisons as text: the `columns` ids given, else with a `width` (the terminal's)
    the columns of TEXT_PRIORITY that fit it (those the same in every row named once), paragraphs wrapped to it;
    else `compact` (a pipe) COMPACT_COLUMNS; else (width 0) every column."""
    shown_compact = compact and not columns
    if shown_compact:
        columns = compact_columns(board)
    out = [text_table(board.headers, board.rows, [0] + [COLUMN_IDS.index(c) for c in columns])] if columns else \
        _fitted(board.headers, board.rows, width, [COLUMN_IDS.index(c) for c in TEXT_PRIORITY], COLUMN_IDS,
                [COLUMN_IDS.index(c) for c in ALWAYS_SHOWN])
    if shown_compact:
        out.append("(compact: output is not a terminal; --wide prints every column, --columns picks them)")
    out.append("")
    for note in board.notes:
        out += _wrap(f"note: {note}", width, "      ")
    out += ["", "Noise (runs that differ only by seed):"]
    groups = noise_rows(board.groups)
    out += _fitted(NOISE_HEADERS, groups, width, range(len(NOISE_HEADERS)), NOISE_HEADERS,
                   range(len(NOISE_HEADERS))) if groups else \
        ["  no seed groups yet: rerun a config with a different --seed to measure run-to-run noise"]
    if board.runs_needed:
        out += [""] + _wrap(board.runs_needed, width)
    if board.family:
        out += [""] + _wrap(comparisons_title(board), width)
        for line in comparison_lines(board):
            out += _wrap(f"  {line}", width, "    ")
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
    if board.runs_needed:
        out += ["", _md_escape(board.runs_needed)]
    if board.family:
        out += ["", "## Settings compared", "", _md_escape(comparisons_title(board)) + " Welch's t-test for seed "
                "groups, else a t-test with the measured noise; HellaSwag acc_norm answers pooled over each group's "
                "seeds.", ""] + [f"- {_md_escape(line)}" for line in comparison_lines(board)]
    return "\n".join(out) + "\n"


def write_leaderboard(board, path, title):
    atomic_write_text(path, render_markdown(board, os.path.dirname(os.path.abspath(path)), title), overwrite=True)


# ---------------------------------------------------------------------------------------------- summary
SUMMARY_FORMATS = ("csv", "md", "tex")


@dataclass
class SettingSummary:
    name: str
    n: int
    mean: float
    std: float  # None for one seed
    ci: tuple  # 95% interval of the mean (Student t), None for one seed
    diff: float = None  # mean minus the baseline setting's; None for the baseline itself or when not compared
    p: float = None
    p_holm: float = None
    verdict: str = ""
    core: tuple = None  # (mean, std) of the --evals suite's core over the same runs; std None for one run
    gold_bpb: tuple = None  # the same for gold_bpb; both None unless every run counted has the figure
    runs: list = ()  # the runs counted (one per seed; the run itself when alone): make_paper.py's other figures


def suite_stats(runs, attr):
    """(mean, std) of `attr` (evals_core, evals_gold_bpb) over `runs`, std None for one run; None when a run has no
    figure or they were scored on other tasks or examples (not one suite)."""
    values = [getattr(r, attr) for r in runs]
    if not runs or None in values or len({(r.evals_tasks, r.evals_limit) for r in runs}) > 1:
        return None
    return statistics.mean(values), statistics.stdev(values) if len(values) >= 2 else None


def summary_rows(board):
    """One SettingSummary per finished setting (a seed group, or a run alone), the baseline's first, then in the
    table's order: val bpb over its seeds, the 95% interval of the mean, and its comparison with the baseline's."""
    from scipy import stats as scipy_stats  # heavy: only for a summary

    if board.reference is None:
        return []
    settings = {}
    for run in [board.reference] + list(board.runs):
        if run.final and run.val_bpb is not None:
            settings.setdefault(setting_key(run), run)
    names, rows = {}, []
    for key, run in settings.items():
        group = group_of(run, board.groups)
        finals = group.values("val_bpb") if group and len(group.values("val_bpb")) >= 2 else [run.val_bpb]
        counted = group.counted_runs("val_bpb") if len(finals) >= 2 else [run]  # the runs of `finals`
        # the values the comparisons tested: final val bpb, or (--match flops) val bpb at the baseline's FLOPs
        values = _values(run, board.groups, "matched_bpb") if board.match == "flops" else finals
        n, mean = len(values) or len(finals), sum(values) / len(values) if values else None
        std = statistics.stdev(values) if len(values) >= 2 else None
        half = None if std is None else float(scipy_stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
        names[run.model_name] = names.get(run.model_name, 0) + 1
        name = run.model_name + ("" if names[run.model_name] == 1 else f" ({names[run.model_name]})")
        row = SettingSummary(name, n, mean, std, None if half is None else (mean - half, mean + half),
                             core=suite_stats(counted, "evals_core"), gold_bpb=suite_stats(counted, "evals_gold_bpb"),
                             runs=counted)
        c = next((c for c in board.family if c.other is board.reference and setting_key(c.run) == key), None)
        if run is board.reference:
            row.verdict = "baseline"
        elif c is not None and c.refused:
            row.verdict = c.refused
        elif c is not None:
            row.diff = c.diff
            if c.test is not None:
                row.p, row.p_holm = c.test.p, c.p_holm
                row.verdict = ("better" if c.diff < 0 else "worse") if c.p_holm < board.alpha else \
                    "not distinguishable"
            else:
                row.verdict = "noise unknown"
        rows.append(row)
    return rows


def _fmt(value, spec):
    return "" if value is None else format(value, spec)


def _latex(text):
    """`text` safe in a LaTeX table cell: its special characters escaped."""
    out = []
    for ch in escape_controls(text):
        out.append({"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                    "<": "$<$", ">": "$>$", "±": r"$\pm$", "Δ": r"$\Delta$", MISSING: "--"}.get(ch, ch))
    return "".join(out)


def render_summary(board, fmt):
    """The settings' summary as CSV (one number a column), Markdown or LaTeX (mean ± std, n, 95% CI, Δ, p, Holm p,
    verdict)."""
    rows = summary_rows(board)
    tested = sum(c.test is not None for c in board.family)
    what = "val bpb at the baseline's training FLOPs" if board.match == "flops" else "final val bpb"
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["setting", "n", "val_bpb_mean", "val_bpb_std", "ci95_low", "ci95_high", "diff_vs_baseline",
                         "p", "p_holm", "verdict", "core_mean", "core_std", "gold_bpb_mean", "gold_bpb_std"])
        for r in rows:
            writer.writerow([r.name, r.n, _fmt(r.mean, ".6g"), _fmt(r.std, ".6g"),
                             _fmt(r.ci and r.ci[0], ".6g"), _fmt(r.ci and r.ci[1], ".6g"), _fmt(r.diff, ".6g"),
                             _fmt(r.p, ".6g"), _fmt(r.p_holm, ".6g"), r.verdict,
                             *(_fmt(s and s[i], ".6g") for s in (r.core, r.gold_bpb) for i in (0, 1))])
        return buf.getvalue()
    cells = [[r.name, str(r.n), _mean_std(r.mean, r.std),
              MISSING if r.ci is None else f"[{r.ci[0]:.4f}, {r.ci[1]:.4f}]",
              MISSING if r.diff is None else f"{r.diff:+.4f}", _p_cell(r.p), _p_cell(r.p_holm), r.verdict]
             for r in rows]
    headers = ["Setting", "n", "Val bpb mean ± std", "95% CI of the mean", "Δ vs baseline", "p", "Holm p", "Verdict"]
    caption = (f"{what}; each setting against the baseline {rows[0].name if rows else MISSING} (Welch's t-test, or "
               f"a t-test with the measured noise for a single run); Holm's correction over the {tested} tests "
               f"{'of every pair of settings (--pairs)' if board.pairs else 'against the baseline'}; verdict at "
               f"p < {board.alpha:g}")
    align = "lrllrrrl"
    if any(r.core or r.gold_bpb for r in rows):  # --evals figures: two more columns (none without, as before)
        headers += ["Core mean ± std", "Gold bpb mean ± std"]
        for row, r in zip(cells, rows):
            row += [MISSING if s is None else _mean_std(*s) for s in (r.core, r.gold_bpb)]
        align += "ll"
        caption += ("; core (mean centred accuracy) and gold bpb of the --evals suite over the same seeds, where "
                    "every one has them on one suite")
    if fmt == "md":
        return markdown_table(headers, cells) + f"\n\n{_md_escape(caption)}.\n"
    lines = [r"\begin{table}", r"\centering", rf"\begin{{tabular}}{{{align}}}", r"\hline",
             " & ".join(map(_latex, headers)) + r" \\", r"\hline"]
    lines += [" & ".join(map(_latex, row)) + r" \\" for row in cells]
    lines += [r"\hline", r"\end{tabular}", rf"\caption{{{_latex(caption)}.}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _mean_std(mean, std):
    if mean is None:  # --match flops: a setting whose curve does not reach the baseline's FLOPs
        return MISSING
    return f"{mean:.4f}" + ("" if std is None else f" ± {std:.4f}")


def _p_cell(p):
    return MISSING if p is None else "< 0.0001" if p < 1e-4 else f"{p:.2g}"
