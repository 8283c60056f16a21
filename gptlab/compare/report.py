"""compare(), the entry point of compare_experiments.py: print the leaderboard and noise, write LEADERBOARD.md and
plots; or print the diff of two runs."""
import contextlib
import io
import os
import shutil
import sys

from gptlab.compare.diff import diff_runs
from gptlab.compare.plots import PLOT_FILE, parse_size, plot_runs
from gptlab.compare.runs import BadRunFolder, list_run_folders, load_run, price_run, resolve_run, resolve_runs
from gptlab.compare.scaling import plot_scaling, render_scaling, scaling_report
from gptlab.compare.stats import MATCH_MODES, SIGNIFICANCE_LEVEL
from gptlab.compare.tables import (BPB_STEP, LEADERBOARD_FILE, build_leaderboard, render_text, sort_column,
                                   write_leaderboard)
from gptlab.compare.tables import SUMMARY_FORMATS, render_summary, text_columns
from gptlab.compare.tokenizers import shard_bytes_per_token
from gptlab.core.errors import UserError
from gptlab.core.files import check_writable
from gptlab.tokenizer.format import open_tokenizer
from gptlab.train.records import EXPERIMENTS_DIR, RESULTS_FILE, is_run_folder


@contextlib.contextmanager
def _writing(what, fix):
    """Turn a failed write (read-only folder, full disk) into one clear error instead of a traceback."""
    try:
        yield
    except OSError as err:
        raise UserError(f"cannot write {what}: {err.strerror or err}; pass {fix}") from None


SCALING_PLOT_FILE = "scaling.png"


def add_bytes_per_token(runs):
    """Each run's tokenizer on its validation shards (when both are on this machine), one measurement per pair."""
    measured = {}
    for run in runs:
        tokenizer = run.config.get("tokenizer_path") or run.config.get("tokenizer")
        shards = run.config.get("val_shards")
        if not tokenizer or not shards or not all(isinstance(p, str) and os.path.isfile(p) for p in shards):
            continue
        key = (run.tokenizer_id, tuple(shards))
        if key not in measured:
            try:
                measured[key] = shard_bytes_per_token(open_tokenizer(tokenizer).encoding, shards)
            except (UserError, OSError, ValueError):
                measured[key] = None
        run.bytes_per_token = measured[key]


def compare(run_specs=(), experiments_dir=EXPERIMENTS_DIR, sort=None, descending=False, baseline=None, plot=None,
            no_plot=False, size="1600x1200", write=None, overwrite=False, diff=None, now=None, out=None,
            usd_per_gpu_hour=None, overhead_minutes=0.0, alpha=SIGNIFICANCE_LEVEL, detect_bpb=BPB_STEP,
            scaling=False, budget=None, columns=None, width=None, match="all", pairs=False, summary=None):
    """Print the leaderboard (and noise), write LEADERBOARD.md and plots; or print a diff, or a scaling fit.
    `columns`: "a,b,c", the leaderboard columns to print; else those that fit `width` characters (default: the
    terminal's when `out` is sys.stdout, COLUMNS honoured; 0: every column). Returns a summary dict. The numbers are
    taken as compare_experiments.py's flags check them: 0 < alpha < 1, overhead and price >= 0, plot a .png."""
    out = out or io.StringIO()
    if diff:
        path_a, path_b = (resolve_run(spec, experiments_dir) for spec in diff)
        out.write(diff_runs(path_a, path_b))
        return {"diff": (path_a, path_b)}
    sort_id = sort_column(sort) if sort else ("val_bpb" if descending else None)
    column_ids = text_columns(columns) if columns is not None else None
    compact = False
    if width is None:  # no terminal (a pipe, a file): no width to fit, the compact key columns
        width = shutil.get_terminal_size((0, 0)).columns if out is sys.stdout else 0
        compact = out is sys.stdout and not width
    plot_size = parse_size(size)
    if plot:
        check_writable(plot, overwrite)  # before any work
    if run_specs:
        paths, folder_notes = resolve_runs(run_specs, experiments_dir), []
    else:
        paths, folder_notes = list_run_folders(experiments_dir)
    skipped = []
    runs = _load_runs(paths, now, skipped)
    folder_notes = folder_notes + skipped
    for run in runs:
        price_run(run, usd_per_gpu_hour, overhead_minutes)
    if scaling:
        return _scaling(runs, experiments_dir, plot, no_plot, overwrite, budget, usd_per_gpu_hour, out, skipped)
    add_bytes_per_token(runs)
    baseline_run = None
    if baseline:
        baseline_path = os.path.realpath(resolve_run(baseline, experiments_dir))
        baseline_run = next((r for r in runs if os.path.realpath(r.path) == baseline_path), None)
        if baseline_run is None:  # compared against, so it joins the table
            try:
                baseline_run = load_run(baseline_path, now=now)
            except BadRunFolder as err:
                raise UserError(f"--baseline {baseline}: cannot compare against it: {err}") from None
            price_run(baseline_run, usd_per_gpu_hour, overhead_minutes)
            add_bytes_per_token([baseline_run])
            runs.append(baseline_run)

    noise_pool = []
    if run_specs and os.path.isdir(experiments_dir):
        # Named runs are compared with the noise measured by every run on disk, shown or not.
        noise_pool = _load_runs([p for p in (os.path.join(experiments_dir, n) for n in sorted(os.listdir(experiments_dir)))
                                 if is_run_folder(p) and os.path.exists(os.path.join(p, RESULTS_FILE))],
                                now, [], with_metrics=False)
    if match not in MATCH_MODES:
        raise UserError(f"--match {match!r} is not one of {', '.join(MATCH_MODES)}")
    board = build_leaderboard(runs, sort_id, descending, baseline_run, folder_notes, noise_pool, alpha, detect_bpb,
                              match, pairs)
    if summary:  # a table to paste: nothing else printed, written or drawn
        if summary not in SUMMARY_FORMATS:
            raise UserError(f"--summary {summary!r} is not one of {', '.join(SUMMARY_FORMATS)}")
        out.write(render_summary(board, summary))
        return {"board": board, "written": []}
    out.write(render_text(board, width, column_ids, compact))
    written = []
    if write is None:
        write = not run_specs
    if write:
        # Beside the runs: their common parent folder, else the experiments folder.
        parents = {os.path.dirname(os.path.abspath(r.path)) for r in runs}
        target_dir = parents.pop() if len(parents) == 1 else experiments_dir
        leaderboard_path = os.path.join(target_dir, LEADERBOARD_FILE)
        title = "Leaderboard" if not run_specs else f"Leaderboard ({len(runs)} selected runs)"
        with _writing(leaderboard_path, "--no-write"):
            write_leaderboard(board, leaderboard_path, title)
        written.append(leaderboard_path)
    if not no_plot and (plot or run_specs):
        plot_paths = [plot] if plot else [os.path.join(r.path, PLOT_FILE) for r in runs]
        with _writing(", ".join(plot_paths), "--plot PATH somewhere writable, or --no-plot"):
            plot_runs(board.runs, plot_paths, plot_size)
        written.extend(plot_paths)
    elif not no_plot:
        out.write("\n(curves: pass --plot PATH, or name the runs to compare to get compare.png in each run folder)\n")
    if written:
        out.write("\nwrote " + ", ".join(written) + "\n")
    return {"board": board, "written": written}


def _load_runs(paths, now, skipped, with_metrics=True):
    """The runs of `paths` that can be read; a folder holding a value of the wrong type or out of range is left out,
    with a line in `skipped` naming it and the field. None readable of several named: one error."""
    runs = []
    for path in paths:
        try:
            runs.append(load_run(path, now=now, with_metrics=with_metrics))
        except BadRunFolder as err:
            skipped.append(f"skipped {err}")
    if paths and not runs and with_metrics:
        raise UserError(f"none of the {len(paths)} run folder(s) can be compared: {skipped[-1]}"
                        + (f" (and {len(paths) - 1} more)" if len(paths) > 1 else "")
                        + "; fix or move the damaged files")
    return runs


def _scaling(runs, experiments_dir, plot, no_plot, overwrite, budget, usd_per_gpu_hour, out, skipped=()):
    """compare_experiments.py --scaling: the fits, the prediction and scaling.png (a generated report, redrawn,
    unless --plot names a file, which is only replaced with --overwrite)."""
    report = scaling_report(runs, budget, usd_per_gpu_hour)
    report.notes.extend(skipped)
    out.write(render_scaling(report))
    written = []
    if not no_plot:
        path = plot or os.path.join(experiments_dir, SCALING_PLOT_FILE)
        with _writing(path, "--plot PATH somewhere writable, or --no-plot"):
            plot_scaling(report, path)
        written.append(path)
        out.write(f"\nwrote {path}\n")
    return {"scaling": report, "written": written}
