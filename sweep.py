"""Run a hyperparameter sweep of train_gpt.py: every combination of --grid values for every seed, one run after
another, each named after its settings; a failed run is recorded and the sweep goes on; running the same command
again skips the runs that finished. Ends with the leaderboard of the sweep's runs.

    python sweep.py --grid lr_scale=0.5,1,2 --seeds 0,1,2 -- --preset quickstart --tokenizer quickstart_v1000_n400000
    python sweep.py --name Depth --grid num_layers=8,12 --grid lr_scale=0.5,1 --nproc_per_node 8 -- --preset gpt2-small
    python sweep.py ... --dry_run        # the commands, and which runs are already finished
"""
import argparse
import os
import sys

from gptlab.core.cli import ArgumentParser, HelpFormatter, int_in, one_line_path
from gptlab.core.errors import UserError, run_cli
from gptlab.train.records import EXPERIMENTS_DIR
from gptlab.train.sweep import (parse_grid, parse_seeds, plan_sweep, run_sweep, summary_lines, sweep_name,
                                sweep_run_dirs, train_flags_of)

REPO_ROOT = os.path.dirname(os.path.abspath(__file__))
TRAIN_SCRIPT = os.path.join(REPO_ROOT, "train_gpt.py")


def parse_args(argv):
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--grid", action="append", default=[], metavar="FLAG=V1,V2,...",
                        help="a train_gpt.py flag and its values (repeat --grid for more flags: every combination "
                             "runs)")
    parser.add_argument("--seeds", type=parse_seeds, default="0",
                        help="comma-separated seeds, each run for every combination")
    parser.add_argument("--name", type=sweep_name, default="Sweep", help="the sweep's name: runs are called "
                        "NAME_<flag><value>..., its record is --experiments_dir/sweep_NAME.json")
    parser.add_argument("--nproc_per_node", type=int_in(1), default=1,
                        help="processes (GPUs) per run: more than 1 launches each run with torchrun --standalone")
    # one line: each run's folder is read back from its "run folder: PATH" line
    parser.add_argument("--experiments_dir", type=one_line_path, default=EXPERIMENTS_DIR,
                        help="where the run folders and the record go")
    parser.add_argument("--dry_run", action="store_true", help="print the commands (and which runs are finished) "
                        "and exit")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the record of another sweep of the same --name (its run folders are kept)")
    parser.add_argument("train_flags", nargs=argparse.REMAINDER, metavar="-- TRAIN_GPT_FLAGS",
                        help="after --: the flags every run gets (train_gpt.py --help lists them)")
    args = parser.parse_args(argv)
    if args.train_flags[:1] == ["--"]:
        args.train_flags = args.train_flags[1:]
    return args


def main(argv=None):
    args = parse_args(argv)
    # after the flags are read, so that --help and a bad flag answer at once:
    from gptlab.compare import compare  # heavy (~0.1 s: numpy, tabulate), only for the closing leaderboard
    from train_gpt import build_parser  # heavy (~1.5 s: torch), for train_gpt.py's flag names

    known, switches, types, bookkeeping = train_flags_of(build_parser())
    if not args.grid and len(args.seeds) < 2:
        raise UserError("nothing to sweep: give --grid FLAG=V1,V2,... and/or several --seeds")
    grid = parse_grid(args.grid, known, switches, types, bookkeeping)
    sweep = plan_sweep(args.name, grid, args.seeds, args.train_flags, args.nproc_per_node,
                       [key for key, _ in grid if key in switches])
    run_sweep(sweep, TRAIN_SCRIPT, args.experiments_dir, overwrite=args.overwrite, dry_run=args.dry_run)
    if args.dry_run:
        return sweep
    print("\n" + "\n".join(summary_lines(sweep)) + "\n")
    run_dirs = sweep_run_dirs(sweep)
    if run_dirs:
        compare(run_specs=run_dirs, experiments_dir=args.experiments_dir, no_plot=True, write=False, out=sys.stdout)
    else:
        print("no run of this sweep got as far as a run folder: see the errors above")
    return sweep


if __name__ == "__main__":
    run_cli(main)
