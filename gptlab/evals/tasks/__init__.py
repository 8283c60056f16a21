"""The benchmark tasks, one file each (see gptlab/evals/task_spec.py and docs/evals.md; _template.py to start one)."""
