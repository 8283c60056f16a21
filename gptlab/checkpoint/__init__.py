"""Checkpoints, written by training and read by every tool (sample, evaluate, export, judge, paper):
checkpointing.py (the one-file format: save, load, checksum, resume checks), sharded_checkpoint.py (DCP folders of
--shard_params), model_source.py (a checkpoint's model.py → its model; who may run it), convert_checkpoint.py
(older formats → today's). Nothing here imports the training stage: train/ builds on this package, never the other
way round."""

CHECKPOINT_DIR = "checkpoints"  # a run folder's checkpoints/ (gptlab.train.records names the rest of the folder)
