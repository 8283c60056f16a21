"""Browse and compare training runs in experiments/: leaderboard (+ LEADERBOARD.md), noise, curves, diffs.

    python compare_experiments.py                                   # every run, writes experiments/LEADERBOARD.md
    python compare_experiments.py experiments/*_Baseline* experiments/*_MyIdea --plot out.png
    python compare_experiments.py --sort hellaswag --desc
    python compare_experiments.py --sort core --desc                 # by the --evals suite's core (or gold_bpb)
    python compare_experiments.py --columns run,val_bpb,bpb_vs,cost   # these columns (--wide: every column)
    python compare_experiments.py --pairs                            # every pair of settings, Holm-corrected
    python compare_experiments.py --match flops                      # at the baseline's training FLOPs
    python compare_experiments.py --summary md                       # the settings' table (csv, md or tex)
    python compare_experiments.py --diff Baseline MyIdea             # what the experiment changed (config + code)
    python compare_experiments.py --evals A_EVAL_DIR B_EVAL_DIR      # two evaluate.py outputs, example by example
    python compare_experiments.py --usd_per_gpu_hour 2.5 --overhead  # cost at your price, + gpt-lab's 60 min setup
    python compare_experiments.py experiments/*_Scale* --scaling --budget 50gpuh   # scaling fit and a prediction
"""
import sys

from gptlab.compare import BPB_STEP, COLUMNS, LEADERBOARD_FILE, PLOT_FILE, RECORD_P, SIGNIFICANCE_LEVEL, compare
from gptlab.compare.paired import compare_evaluations, render_paired
from gptlab.compare.stats import MATCH_MODES
from gptlab.compare.tables import COLUMN_IDS, SUMMARY_FORMATS
from gptlab.core.cli import ArgumentParser, HelpFormatter, float_in, png_path, path

# What the numeric flags accept (finite numbers only: nan and inf are refused by the types).
COST_FLAG = float_in(0, 1e6, message="{value} is out of range: --overhead and --usd_per_gpu_hour must be >= 0 "
                     "(finite, at most 1e6)")
DETECT_BPB = float_in(1e-6, 10, message="must be a val bpb difference between 1e-06 and 10 (e.g. 0.01), got {value}")
from gptlab.core.errors import UserError, run_cli
from gptlab.train.cost import OVERHEAD_MINUTES_GPTLAB
from gptlab.train.records import EXPERIMENTS_DIR


def parse_args(argv):
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("runs", type=path, nargs="*", metavar="RUN",
                        help="run folders to compare (paths, folder names in --experiments, or a unique part of "
                             "one); default: every run")
    parser.add_argument("--experiments", type=path, default=EXPERIMENTS_DIR, help="folder holding the run folders")
    parser.add_argument("--sort", metavar="COL", help=f"sort by one of: {', '.join(COLUMNS)} "
                        "(default: val bpb ascending, unfinished runs last)")
    parser.add_argument("--desc", action="store_true", help="sort descending")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true", help="print every leaderboard column (default: those that fit "
                      "the terminal's width, $COLUMNS if set; every column when the output is not a terminal)")
    view.add_argument("--columns", metavar="A,B,...", help="print these leaderboard columns, in this order: "
                      f"{', '.join(COLUMN_IDS[1:])}")
    parser.add_argument("--baseline", type=path, metavar="RUN",
                        help="compare every setting against this run's (default: the baseline group the docs "
                             "recommend: runs named Base / Baseline, else the setting with the most seeds, the "
                             "first started of a tie; never the luckiest run)")
    parser.add_argument("--pairs", action="store_true",
                        help="compare every pair of settings, not only each against the baseline's (Holm-corrected "
                             "over all the pairs)")
    parser.add_argument("--match", choices=MATCH_MODES, default="all",
                        help="what two settings must share to be compared: all (default: steps, tokens and "
                             "parameters), tokens (sizes may differ), params (lengths may differ), flops (val bpb "
                             "at the baseline's training FLOPs, read off each curve), none (final figures, "
                             "whatever differs); what differs is marked in the verdict")
    parser.add_argument("--summary", choices=SUMMARY_FORMATS, metavar="csv|md|tex",
                        help="print only a table of the settings (mean ± std, n, 95%% CI, Δ vs baseline, p, Holm p, "
                             "verdict; the --evals suite's core and gold bpb mean ± std) as CSV, Markdown or LaTeX; "
                             "nothing is written or drawn")
    parser.add_argument("--plot", type=png_path, metavar="PATH",
                        help=f"write the curves to this PNG (default when RUNs are named: {PLOT_FILE} in each "
                             "compared run's folder)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw curves")
    parser.add_argument("--size", default="1600x1200", metavar="WxH", help="plot size in pixels (default 1600x1200)")
    write = parser.add_mutually_exclusive_group()
    write.add_argument("--write", dest="write", action="store_true", default=None,
                       help=f"write {LEADERBOARD_FILE} into --experiments (default only when comparing every run)")
    write.add_argument("--no-write", dest="write", action="store_false", help=f"do not write {LEADERBOARD_FILE}")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    parser.add_argument("--diff", type=path, nargs=2, metavar=("A", "B"),
                        help="show what changed from run A to run B: config flags and code backup (unified diff)")
    parser.add_argument("--evals", type=path, nargs=2, metavar=("A", "B"),
                        help="compare two evaluate.py output folders (or run folders whose evals/ holds one) on the "
                             "same examples: per task acc (McNemar's exact test) and gold-answer bpb (paired t), "
                             "Holm-corrected over the tasks; core and mean bpb (paired z)")
    g = parser.add_argument_group("cost and significance")
    g.add_argument("--usd_per_gpu_hour", type=COST_FLAG, default=None, metavar="USD",
                   help="price every run's GPU-hours at this (default: the price each run recorded, else "
                        "gptlab/train/cost.py's typical rental price by GPU name)")
    g.add_argument("--overhead", type=COST_FLAG, nargs="?", const=OVERHEAD_MINUTES_GPTLAB, default=0.0, metavar="MIN",
                   help=f"add MIN minutes per run to its GPU-hours (set-up, downloads, compilation); alone: "
                        f"gpt-lab's {OVERHEAD_MINUTES_GPTLAB:g} (default: 0)")
    g.add_argument("--alpha", type=float_in(0, 1, low_open=True, high_open=True,
                                            message="{value} must be between 0 and 1 (e.g. 0.05)"),
                   default=SIGNIFICANCE_LEVEL,
                   help="p below this is 'better' / 'worse' in the vs-baseline columns (after Holm's correction)")
    g.add_argument("--detect_bpb", type=DETECT_BPB, default=BPB_STEP, metavar="BPB",
                   help=f"the val bpb difference the 'runs needed' line is for (p < {RECORD_P:g}, 80%% power)")
    g = parser.add_argument_group("scaling laws")
    g.add_argument("--scaling", action="store_true", help="fit L(C) = E + A*C^-alpha to the finished runs' training "
                   "FLOPs and val bpb (and Chinchilla's L(N, D) when 5+ runs vary both); print it and write "
                   "scaling.png in --experiments (or --plot PATH) instead of the leaderboard")
    g.add_argument("--budget", metavar="B", help="with --scaling: predict val bpb, with its interval, for a budget "
                   "in FLOPs (1e18), GPU-hours (50gpuh) or dollars ($20)")
    parser.epilog = (f"vs-baseline columns: 'better'/'worse' when the Holm-corrected p < --alpha "
                     f"({SIGNIFICANCE_LEVEL:g}): Welch's t-test of the two settings' seed groups (runs differing only "
                     "by --seed), else a t-test with the measured seed-to-seed noise; HellaSwag: a two-proportion "
                     "z-test. See docs/comparing.md, Statistics.")
    args = parser.parse_args(argv)
    check_flags(args)
    return args


def check_flags(args):
    """What the flags' types do not check: flags that go together, and one rule for the two cost flags."""
    if args.diff and (args.runs or args.plot or args.sort or args.scaling):
        raise UserError("--diff A B shows one comparison on its own; drop the other RUN/--plot/--sort/--scaling "
                        "arguments")
    if args.evals and (args.runs or args.diff or args.scaling or args.summary or args.plot or args.sort):
        raise UserError("--evals A B compares two evaluations on their own; drop the other RUN/--diff/--scaling/"
                        "--summary/--plot/--sort arguments")
    if args.overhead < 0 or (args.usd_per_gpu_hour is not None and args.usd_per_gpu_hour < 0):
        raise UserError("--overhead and --usd_per_gpu_hour must be >= 0")
    if args.summary and (args.scaling or args.diff):
        raise UserError("--summary tabulates the leaderboard's settings; drop --scaling / --diff")
    if args.budget and not args.scaling:
        raise UserError("--budget goes with --scaling (a prediction from the scaling fit); add --scaling")


def main(argv=None):
    args = parse_args(argv)
    if args.evals:
        sys.stdout.write(render_paired(compare_evaluations(*args.evals), args.alpha))
        return
    compare(run_specs=args.runs, experiments_dir=args.experiments, sort=args.sort, descending=args.desc,
            baseline=args.baseline, plot=args.plot, no_plot=args.no_plot, size=args.size, write=args.write,
            overwrite=args.overwrite, diff=args.diff, out=sys.stdout, usd_per_gpu_hour=args.usd_per_gpu_hour,
            overhead_minutes=args.overhead, alpha=args.alpha, detect_bpb=args.detect_bpb, scaling=args.scaling,
            budget=args.budget, columns=args.columns, width=0 if args.wide else None, match=args.match,
            pairs=args.pairs, summary=args.summary)


if __name__ == "__main__":
    run_cli(main)
