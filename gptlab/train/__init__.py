"""Training runs (train_gpt.py's machinery): flags.py (every flag, parsed), config.py (flags → checked configuration), batching.py (the step's
split into ranks and micro-batches), comm.py (gradient sync, Muon's matrix owners), parallel.py (the layout, its gradient sum), fsdp.py (--shard_params: FSDP2),
tensor_parallel.py (--tp: DTensor tensor parallelism), pipeline.py (--pp: torch.distributed.pipelining),
run.py (Run: a run's life), records.py (the run folder's files), environment.py (versions, hardware, GPU peaks),
perf_estimate.py (analytical MFU), code_backup.py (the run's code/), cost.py (GPU-hours, prices), dashboards.py
(TensorBoard / W&B), sweep_grid.py (sweep.py's grid and its runs). Checkpoints (save, load, model sources) are the
stage before this one: gptlab/checkpoint/."""
