"""A local lm-eval task: HellaSwag read from the quickstart's data/hellaswag/hellaswag_val.jsonl instead of the Hub.

    lm_eval --model hf --model_args pretrained=hf/RUN,trust_remote_code=True \
        --include_path gptlab/evals/lm_eval_task --tasks hellaswag_local --limit 1000

hellaswag_local.yaml is lm-eval's own `hellaswag` task (same prompt, choices, metrics) with the data taken from
that file (the rows of github.com/rowanz/hellaswag's validation file, in the Hub copy's order), so `--limit N`
scores the same first N examples as train_gpt.py's `--hellaswag_limit N`. utils.py holds its preprocessing.
"""
