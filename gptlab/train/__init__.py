"""Training runs (train_gpt.py's machinery): config.py (flags → checked configuration), batching.py (the step's
split into ranks and micro-batches), comm.py (gradient sync, Muon's sharding), fsdp.py (--shard_params: FSDP2),
tensor_parallel.py (--tp: DTensor tensor parallelism), pipeline.py (--pp: torch.distributed.pipelining),
run.py (Run: a run's life), records.py (the run folder's files), environment.py (versions, hardware, GPU peaks),
perf_estimate.py (analytical MFU), checkpointing.py (save, load, resume checks), sharded_checkpoint.py (DCP
folders of --shard_params), model_source.py (a checkpoint's model.py → its model; who may run it), convert_checkpoint.py,
code_backup.py (the run's code/), cost.py (GPU-hours, prices), dashboards.py (TensorBoard / W&B), sweep.py."""
