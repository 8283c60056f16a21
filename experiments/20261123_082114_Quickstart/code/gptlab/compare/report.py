"""compare(), the entry point of compare_experiments.py: print the leaderboard and noise, write LEADERBOARD.md and
plots; or print the diff of two runs."""
import contextlib
import io
import os

from gptlab.compare.diff import diff_runs
from gptlab.compare.plots import PLOT_FILE, parse_size, plot_runs
from gptlab.compare.runs import list_run_folders, load_run, resolve_run, resolve_runs
from gptlab.compare.tables import LEADERBOARD_FILE, build_leaderboard, render_text, sort_column, write_leaderboard
from gptlab.errors import UserError
from gptlab.experiment import EXPERIMENTS_DIR, RESULTS_FILE, is_run_folder
from gptlab.fileio import check_writable


@contextlib.contextmanager
def _writing(what, fix):
    """Turn a failed write (read-only folder, full disk) into one clear error instead of a traceback."""
    try:
        yield
    except OSError as err:
        raise UserError(f"cannot write {what}: {err.strerror or err}; pass {fix}") from None


def compare(run_specs=(), experiments_dir=EXPERIMENTS_DIR, sort=None, descending=False, baseline=None, plot=None,
            no_plot=False, size="1600x1200", write=None, overwrite=False, diff=None, now=None, out=None):
    """Print the leaderboard (and noise), write LEADERBOARD.md and plots; or print a diff. Returns a summary dict."""
    out = out or io.StringIO()
    if diff:
        path_a, path_b = (resolve_run(spec, experiments_dir) for spec in diff)
        out.write(diff_runs(path_a, path_b))
        return {"diff": (path_a, path_b)}

    sort_id = sort_column(sort) if sort else ("val_bpb" if descending else None)
    plot_size = parse_size(size)
    if plot:
        if not plot.lower().endswith(".png"):
            raise UserError(f"--plot {plot}: the plot is a PNG image; give a path ending in .png")
        check_writable(plot, overwrite)  # before any work
    if run_specs:
        paths, folder_notes = resolve_runs(run_specs, experiments_dir), []
    else:
        paths, folder_notes = list_run_folders(experiments_dir)
    runs = [load_run(p, now=now) for p in paths]
    baseline_run = None
    if baseline:
        baseline_path = os.path.realpath(resolve_run(baseline, experiments_dir))
        baseline_run = next((r for r in runs if os.path.realpath(r.path) == baseline_path), None)
        if baseline_run is None:  # compared against, so it joins the table
            baseline_run = load_run(baseline_path, now=now)
            runs.append(baseline_run)

    noise_pool = []
    if run_specs and os.path.isdir(experiments_dir):
        # Named runs are compared with the noise measured by every run on disk, shown or not.
        noise_pool = [load_run(p, now=now, with_metrics=False) for p in
                      (os.path.join(experiments_dir, n) for n in sorted(os.listdir(experiments_dir)))
                      if is_run_folder(p) and os.path.exists(os.path.join(p, RESULTS_FILE))]
    board = build_leaderboard(runs, sort_id, descending, baseline_run, folder_notes, noise_pool)
    out.write(render_text(board))
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
