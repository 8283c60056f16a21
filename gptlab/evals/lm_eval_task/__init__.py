"""A local lm-eval task: HellaSwag read from the quickstart's data/hellaswag/hellaswag_val.jsonl instead of the Hub.

    lm_eval --model hf --model_args pretrained=hf/RUN,trust_remote_code=True \
        --include_path gptlab/evals/lm_eval_task --tasks hellaswag_local --limit 1000

hellaswag_local.yaml is lm-eval's own `hellaswag` task (same prompt, choices, metrics) with the data taken from
that file (the rows of github.com/rowanz/hellaswag's validation file, in the Hub copy's order), so `--limit N`
scores the same first N examples as train_gpt.py's `--hellaswag_limit N`. utils.py holds its preprocessing.

LM_EVAL_FILES: each of our tasks' lm-eval task file (under lm_eval/tasks/), the one it renders as
(bench/bench_evals.py, tests/unit/test_eval_tasks.py).
"""
LM_EVAL_FILES = {"arc_easy": "arc/arc_easy.yaml", "arc_challenge": "arc/arc_challenge.yaml",
                 "boolq": "super_glue/boolq/default.yaml", "piqa": "piqa/piqa.yaml",
                 "winogrande": "winogrande/default.yaml", "openbookqa": "openbookqa/openbookqa.yaml",
                 "social_iqa": "siqa/siqa.yaml", "commonsense_qa": "commonsense_qa/default.yaml",
                 "copa": "super_glue/copa/default.yaml", "lambada": "lambada/lambada_openai.yaml",
                 "hellaswag": "hellaswag/hellaswag.yaml"}
