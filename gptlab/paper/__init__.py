"""make_paper.py: a compilable LaTeX project (tables, figures, an appendix, references, reproduce.sh) from run
folders, every figure read from them and the statistics computed by gptlab.compare.

latex.py     escaping text from the runs, booktabs tables, number cells
study.py     the runs (gptlab.compare's loading, leaderboard and settings' summary) and their judged win rates
tables.py    tables/*.tex: results, cost, eval suite, judged win rates
figures.py   figures/*.pdf: val bpb and train loss curves with seed bands, compute against val bpb
appendix.py  the architecture and recipe each run trained, from its recorded config.json and model source
bib.py       refs.bib: the works the runs used, and the citation keys of the tricks their source credits
reproduce.py reproduce.sh: each run's rebuilt sources and recorded command
project.py   main.tex, and the project written into a new folder atomically (make_paper())
"""
