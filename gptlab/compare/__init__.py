"""Read experiment run folders and compare them: leaderboard, seed-group noise, significance, curves, diffs.

runs.py    one run folder → Run (load_run); listing and resolving the run folders to compare
stats.py   seed groups, run-to-run noise, significance of val bpb / HellaSwag differences, the reference run
tables.py  leaderboard columns and sorting, building the table, text and LEADERBOARD.md rendering
plots.py   the curves PNG (matplotlib, imported only when drawing); --size parsing
diff.py    config and code-backup diff of two runs
report.py  compare(), the entry point of compare_experiments.py
Dependencies go one way: runs → stats → tables / plots / diff → report. The names below are re-exported so that
`from gptlab.compare import X` works for each of them.
"""
from gptlab.compare.diff import diff_runs
from gptlab.compare.plots import MIN_PLOT_SIZE, PLOT_FILE, parse_size, plot_runs
from gptlab.compare.report import compare
from gptlab.compare.runs import (MISSING, RUN_FOLDER_RE, RUNNING_WINDOW_S, Run, ci_interval, list_run_folders,
                                 load_run, resolve_run, resolve_runs)
from gptlab.compare.stats import (SIGNIFICANCE_LEVEL, VOLATILE_CONFIG_KEYS, Noise, SeedGroup, bpb_noise, compare_bpb,
                                  compare_hellaswag, pick_reference, seed_group_key, seed_groups)
from gptlab.compare.tables import (COLUMNS, LEADERBOARD_FILE, NOISE_HEADERS, SORT_ALIASES, STATUS_ORDER,
                                   Leaderboard, build_leaderboard, format_duration, format_hellaswag,
                                   markdown_table, noise_rows, render_markdown, render_text, sort_column, sort_runs,
                                   text_table, write_leaderboard)

__all__ = ["COLUMNS", "LEADERBOARD_FILE", "MIN_PLOT_SIZE", "MISSING", "NOISE_HEADERS", "SIGNIFICANCE_LEVEL", "PLOT_FILE",
           "RUNNING_WINDOW_S", "RUN_FOLDER_RE", "SORT_ALIASES", "STATUS_ORDER", "VOLATILE_CONFIG_KEYS", "Leaderboard",
           "Noise", "Run", "SeedGroup", "bpb_noise", "build_leaderboard", "ci_interval", "compare", "compare_bpb",
           "compare_hellaswag", "diff_runs", "format_duration", "format_hellaswag", "list_run_folders", "load_run",
           "markdown_table", "noise_rows", "parse_size", "pick_reference", "plot_runs", "render_markdown",
           "render_text", "resolve_run", "resolve_runs", "seed_group_key", "seed_groups", "sort_column", "sort_runs",
           "text_table", "write_leaderboard"]
