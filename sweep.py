"""Run a hyperparameter sweep of train_gpt.py: every combination of --grid values for every seed, one run after
another, each named after its settings; a failed run is recorded and the sweep goes on; running the same command
again skips the runs that finished. Ends with the leaderboard of the sweep's runs.

    python sweep.py --grid lr_scale=0.5,1,2 --seeds 0,1,2 -- --preset quickstart --tokenizer quickstart_v1000_n400000
    python sweep.py --name Depth --grid num_layers=8,12 --grid lr_scale=0.5,1 --nproc_per_node 8 -- --preset gpt2-small
    python sweep.py ... --dry_run        # the commands, and which runs are already finished
    python sweep.py --config sweep.toml  # the same flags in a file: see docs/training.md, "Flags in a file"
"""
import argparse
import os
import sys

from gptlab.core.cli import ArgumentParser, HelpFormatter, int_in, one_line_path
from gptlab.core.config_file import config_text, flag_tokens, given_config, read_config
from gptlab.core.errors import UserError, run_cli
from gptlab.train.records import EXPERIMENTS_DIR
from gptlab.train.sweep_grid import (parse_grid, parse_seeds, plan_sweep, run_sweep, summary_lines, sweep_name,
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
    parser.add_argument("--config", type=one_line_path, default=None,
                        help="a TOML file: this script's flags (name, seeds, ...), a [grid] table (flag = [values]) "
                             "and a [train] table (train_gpt.py's flags); the command line wins (docs/training.md)")
    argv = sys.argv[1:] if argv is None else list(argv)
    config_path, train_table = given_config(argv), {}
    if config_path is not None:
        argv, train_table = sweep_config_argv(parser, argv, config_path)
    args = parser.parse_args(argv)
    if args.train_flags[:1] == ["--"]:
        args.train_flags = args.train_flags[1:]
    args.config_train = train_table
    return args


def sweep_config_argv(parser, argv, path):
    """(argv with the file's sweep flags and [grid] in front, the file's [train] table): the command line's flags
    come after the file's, so they win; its --grid flags add to the file's."""
    table = dict(read_config(path))
    grid, train = table.pop("grid", {}), table.pop("train", {})
    if not isinstance(grid, dict) or not isinstance(train, dict):
        raise UserError(f"--config {path}: grid and train are tables ([grid], [train]) of flag = value(s)")
    actions = {a.dest: a for a in parser._actions
               if a.option_strings and a.dest not in ("help", "config", "grid")}
    tokens = flag_tokens(table, actions, path)
    for key, values in grid.items():
        values = values if isinstance(values, list) else [values]
        if not values or any(isinstance(v, (dict, list)) for v in values):
            raise UserError(f"--config {path}: grid.{key} needs a list of values (numbers, strings, true/false)")
        tokens += ["--grid", f"{key}=" + ",".join(config_text(v) for v in values)]
    return tokens + argv, train


def main(argv=None):
    args = parse_args(argv)
    # after the flags are read, so that --help and a bad flag answer at once:
    from gptlab.compare import compare  # heavy (~0.1 s: numpy, tabulate), only for the closing leaderboard
    from train_gpt import build_parser  # heavy (~1.5 s: torch), for train_gpt.py's flag names

    train_parser = build_parser()
    if args.config_train:  # the file's [train] flags, checked as train_gpt.py would, before the command line's
        actions = {a.dest: a for a in train_parser._actions if a.option_strings and a.dest not in ("help", "config")}
        args.train_flags = flag_tokens(args.config_train, actions, args.config, "train.") + args.train_flags
    known, switches, types, bookkeeping = train_flags_of(train_parser)
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
