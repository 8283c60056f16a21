"""gptlab: shared infrastructure behind the top-level scripts (tokenizer, shards, data loading, evals, records).

Nothing here runs at import time; every submodule is imported lazily by the script that needs it, so a run
does not pay for importing what it does not use (torch, datasets, ...).
"""
__version__ = "0.1.0"
