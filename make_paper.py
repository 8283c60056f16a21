"""A LaTeX project for a preprint from run folders: main.tex (sections with TODO prose for you), tables/*.tex
(booktabs: val bpb mean ± std over seeds, p-values and runs needed against the baseline, the eval suite, tokens,
parameters, GPU-hours and cost, judged win rates), figures/*.pdf (curves with seed bands, compute against val bpb),
appendix.tex (the architecture and recipe each run trained, from its own config.json and model source, each trick
with its citation), refs.bib and reproduce.sh. Every figure comes from the run folders; run it again to regenerate.

    python make_paper.py experiments/*_Base* experiments/*_MyIdea --out paper
    python make_paper.py 'experiments/2026*' --out paper --baseline Base --title "A better idea" --overwrite
    cd paper && pdflatex main && bibtex main && pdflatex main && pdflatex main

The statistics are compare_experiments.py's (docs/comparing.md), over the runs named only. docs/paper.md.
"""
import sys

from gptlab.core.cli import ArgumentParser, HelpFormatter, one_line_path, path
from gptlab.core.errors import run_cli
from gptlab.train.records import EXPERIMENTS_DIR


def build_parser():
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("runs", type=path, nargs="+", metavar="RUN_OR_GLOB",
                   help="run folders: paths, folder names in --experiments, a unique part of one, or globs")
    p.add_argument("--out", type=one_line_path, required=True, help="the folder to write (must not exist)")
    p.add_argument("--baseline", type=path, default=None, metavar="RUN_OR_GROUP",
                   help="compare against this setting: a model name of the runs, or a run folder (default: as "
                        "compare_experiments.py picks it: runs named Base / Baseline, else the setting with the "
                        "most seeds)")
    p.add_argument("--title", default=None, help="the paper's title (default: a TODO)")
    p.add_argument("--experiments", type=path, default=EXPERIMENTS_DIR, help="folder holding the run folders")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out folder (main.tex too)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gptlab.paper.project import make_paper  # after the flags: --help stays fast

    made = make_paper(args.runs, args.out, args.baseline, args.title, args.overwrite, args.experiments)
    study = made["study"]
    print(f"wrote {args.out}: {len(made['files'])} files ({', '.join(made['files'])}) from {len(study.runs)} runs in "
          f"{len(study.settings)} settings, baseline {study.settings[0].name}")
    print(f"compile: cd {args.out} && pdflatex main && bibtex main && pdflatex main && pdflatex main")
    return made


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
