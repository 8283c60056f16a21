"""Browse and compare training runs in experiments/: leaderboard (+ LEADERBOARD.md), noise, curves, diffs.

    python compare_experiments.py                                   # every run, writes experiments/LEADERBOARD.md
    python compare_experiments.py experiments/*_Baseline* experiments/*_MyIdea --plot out.png
    python compare_experiments.py --sort hellaswag --desc
    python compare_experiments.py --diff Baseline MyIdea             # what the experiment changed (config + code)
"""
import sys

from gptlab.cli import ArgumentParser, HelpFormatter
from gptlab.errors import run_cli


def parse_args(argv):
    from gptlab.compare import COLUMNS, LEADERBOARD_FILE, NOISE_SIGMAS, PLOT_FILE
    from gptlab.experiment import EXPERIMENTS_DIR
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run folders to compare (paths, folder names in --experiments, or a unique part of "
                             "one); default: every run")
    parser.add_argument("--experiments", default=EXPERIMENTS_DIR, help="folder holding the run folders")
    parser.add_argument("--sort", metavar="COL", help=f"sort by one of: {', '.join(COLUMNS)} "
                        "(default: val bpb ascending, unfinished runs last)")
    parser.add_argument("--desc", action="store_true", help="sort descending")
    parser.add_argument("--baseline", metavar="RUN",
                        help="compare every run against this one (default: the finished run with the best val bpb)")
    parser.add_argument("--plot", metavar="PATH",
                        help=f"write the curves to this PNG (default when RUNs are named: {PLOT_FILE} in each "
                             "compared run's folder)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw curves")
    parser.add_argument("--size", default="1600x1200", metavar="WxH", help="plot size in pixels (default 1600x1200)")
    write = parser.add_mutually_exclusive_group()
    write.add_argument("--write", dest="write", action="store_true", default=None,
                       help=f"write {LEADERBOARD_FILE} into --experiments (default only when comparing every run)")
    write.add_argument("--no-write", dest="write", action="store_false", help=f"do not write {LEADERBOARD_FILE}")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --plot file")
    parser.add_argument("--diff", nargs=2, metavar=("A", "B"),
                        help="show what changed from run A to run B: config flags and code backup (unified diff)")
    parser.epilog = (f"'not distinguishable': val bpb within {NOISE_SIGMAS:g}x the seed-to-seed std of the "
                     "reference's seed group (runs differing only by --seed), or overlapping HellaSwag 95% CIs.")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from gptlab.compare import compare
    from gptlab.errors import UserError
    if args.diff and (args.runs or args.plot or args.sort):
        raise UserError("--diff A B shows one comparison on its own; drop the other RUN/--plot/--sort arguments")
    compare(run_specs=args.runs, experiments_dir=args.experiments, sort=args.sort, descending=args.desc,
            baseline=args.baseline, plot=args.plot, no_plot=args.no_plot, size=args.size, write=args.write,
            overwrite=args.overwrite, diff=args.diff, out=sys.stdout)


if __name__ == "__main__":
    run_cli(main)
