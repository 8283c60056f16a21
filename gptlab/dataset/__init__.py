"""The dataset stage (the code; the files it writes live in the repository's data/ folder): shards.py (the
token-shard format and manifest), fineweb.py (stream → shards, resumable, split over ranks), selection.py (a run's
shards, checked), loader.py (BOS-aligned training batches, the validation set), hellaswag_file.py (download, verify
and read the HellaSwag file; its evaluation is gptlab/evals/hellaswag.py), evals_download.py (the eval suite's task
files)."""
