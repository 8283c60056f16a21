"""Read experiment run folders and compare them: leaderboard, seed-group noise, significance, curves, diffs.

runs.py    one run folder → Run (load_run); listing and resolving the run folders to compare
stats.py   seed groups, noise, p-values, Holm's correction over settings, the baseline, runs needed
paired.py  two evaluate.py outputs on the same examples: McNemar, paired t, Holm over tasks (--evals A B)
scaling.py scaling-law fits (L(C), L(N, D)), refused when undetermined, intervals, predictions, the PNG
tables.py  leaderboard columns and sorting, building the table, text, LEADERBOARD.md, --summary
plots.py   the curves PNG (matplotlib, imported only when drawing); --size parsing
diff.py    config and code-backup diff of two runs
report.py  compare(), the entry point of compare_experiments.py
Dependencies go one way: runs → stats → paired / scaling / tables / plots / diff → report. The names below
are re-exported so that `from gptlab.compare import X` works for each of them.
"""
from gptlab.compare.diff import diff_runs
from gptlab.compare.plots import MIN_PLOT_SIZE, PLOT_FILE, parse_size, plot_runs
from gptlab.compare.report import SCALING_PLOT_FILE, compare
from gptlab.compare.runs import (MISSING, RUN_FOLDER_RE, RUNNING_WINDOW_S, Run, ci_interval, list_run_folders, load_run,
                                 price_run, resolve_run, resolve_runs)
from gptlab.compare.scaling import fit_chinchilla_law, fit_compute_law, parse_budget, scaling_report
from gptlab.compare.stats import (RECORD_P, RECORD_POWER, SIGNIFICANCE_LEVEL, VOLATILE_CONFIG_KEYS, Noise, SeedGroup,
                                  bpb_noise, compare_bpb, compare_groups, compare_hellaswag, pick_reference,
                                  runs_needed, seed_group_key, seed_groups, two_proportion_test, welch_t_test)
from gptlab.compare.tables import (BPB_STEP, COLUMNS, LEADERBOARD_FILE, NOISE_HEADERS, SORT_ALIASES, STATUS_ORDER,
                                   Leaderboard, build_leaderboard, cost_per_bpb, format_duration, format_hellaswag,
                                   markdown_table, noise_rows, render_markdown, render_text, sort_column, sort_runs,
                                   text_table, write_leaderboard)

__all__ = ["BPB_STEP", "COLUMNS", "LEADERBOARD_FILE", "Leaderboard", "MIN_PLOT_SIZE", "MISSING", "NOISE_HEADERS",
           "Noise", "PLOT_FILE", "RECORD_P", "RECORD_POWER", "RUNNING_WINDOW_S", "RUN_FOLDER_RE", "Run",
           "SCALING_PLOT_FILE", "SIGNIFICANCE_LEVEL", "SORT_ALIASES", "STATUS_ORDER", "SeedGroup",
           "VOLATILE_CONFIG_KEYS", "bpb_noise", "build_leaderboard", "ci_interval", "compare", "compare_bpb",
           "compare_groups", "compare_hellaswag", "cost_per_bpb", "diff_runs", "fit_chinchilla_law",
           "fit_compute_law", "format_duration", "format_hellaswag", "list_run_folders", "load_run", "markdown_table",
           "noise_rows", "parse_budget", "parse_size", "pick_reference", "plot_runs", "price_run", "render_markdown",
           "render_text", "resolve_run", "resolve_runs", "runs_needed", "scaling_report", "seed_group_key",
           "seed_groups", "sort_column", "sort_runs", "text_table", "two_proportion_test", "welch_t_test",
           "write_leaderboard"]
