"""gptlab: the package behind the top-level scripts, one folder per pipeline stage (dependencies point down this list).

core/       errors and CLI parsing, atomic files and locks, ranks and devices (torchrun)
data/       text sources (sources.py, read by the tokenizer too); token shards and manifest, the FineWeb writer,
            the run's shard selection, the loaders, the HellaSwag file
tokenizer/  the tokenizer format, the training job, the exact merge engines, pre-tokenization
train/      flag resolution, gradient communication, the run and its records, checkpoints, model sources, cost
evals/      val loss / bpb, HellaSwag, a checkpoint's evaluation
compare/    leaderboard, statistics, scaling fits, plots, diffs, the tokenizer report
export/     sampling and the Hugging Face export

Nothing here runs at import time; the architecture is model.py's (beside train_gpt.py), never the package's.
"""
__version__ = "0.1.0"
