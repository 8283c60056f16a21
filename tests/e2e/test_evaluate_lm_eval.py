"""Our per-example log-likelihoods equal lm-eval's (`--model hf`, its HFLM) on the export_hf.py export of the same
checkpoint, for each architecture: the modded model's export with its own code (trust_remote_code=True), GPT-2's
and Llama's as transformers' own GPT2LMHeadModel / LlamaForCausalLM with none (trust_remote_code=False). The
independent reference is lm-eval's own tokenization, batching and scoring. lm-eval is run with
add_bos_token=True (our sequences start with <|endoftext|>, the export's BOS) and max_length=2048 (ours: no cut below
2048 tokens). Skipped where lm_eval or accelerate is not installed (pip install lm_eval accelerate)."""
import importlib.util
import json

import pytest

from conftest import run_script
from helpers.eval_tasks import data_dir_with, tiny_checkpoint
from gptlab.evals import task_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None
                                or importlib.util.find_spec("accelerate") is None,
                                reason="lm_eval and accelerate are not installed")
TASKS = ["arc_easy", "boolq", "copa", "winogrande", "hellaswag"]
LIMIT = 6


@pytest.mark.parametrize("arch_fields", [{}, dict(arch="gpt2", max_seq_len=2048),
                                         dict(arch="llama", num_kv_heads=1, multiple_of=32)],
                         ids=["modded", "gpt2", "llama"])
def test_loglikelihoods_equal_lm_eval_on_the_export(tmp_path, arch_fields):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    ckpt, _ = tiny_checkpoint(str(tmp_path), window_size=256, **arch_fields)
    data = data_dir_with(tmp_path / "data", TASKS, limit=LIMIT)
    run_script(["export_hf.py", ckpt, tmp_path / "hf"], check=True, timeout=300)
    run_script(["evaluate.py", ckpt, "--tasks", ",".join(TASKS), "--data_dir", data, "--out", tmp_path / "out",
                "--quiet"], check=True, timeout=300)
    native = bool(arch_fields)  # GPT-2 and Llama: transformers' own classes, no code in the folder
    assert (tmp_path / "hf" / "modeling_gptlab.py").exists() != native
    lm = HFLM(pretrained=str(tmp_path / "hf"), trust_remote_code=not native, add_bos_token=True, batch_size=8,
              device="cpu", dtype="float32", max_length=2048)
    requests, ours = [], []
    for name in TASKS:
        task = task_spec.load_task(name)
        rows = task_spec.load_rows(task, data)
        records = [json.loads(line) for line in (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines()]
        for i, rec in enumerate(records):
            req = task_spec.requests(task, rows, i)
            for j, pair in enumerate(zip(req["contexts"], req["continuations"])):
                requests.append(Instance("loglikelihood", {}, pair, len(requests)))
                ours.append((name, i, j, rec))
    theirs = lm.loglikelihood(requests)
    assert len(theirs) == len(ours) > 80
    by_example = {}
    for (ll, greedy), (name, i, j, rec) in zip(theirs, ours):
        assert rec["logprob"][j] == pytest.approx(ll, abs=1e-4), (name, i, j)
        assert rec["greedy"][j] == greedy, (name, i, j)
        by_example.setdefault((name, i), (rec, []))[1].append(ll)
    for (name, i), (rec, lls) in by_example.items():  # lm-eval's acc and acc_norm predictions, from its numbers
        pred = max(range(len(lls)), key=lambda k: (lls[k], -k))
        chars = rec["chars"]
        pred_norm = max(range(len(lls)), key=lambda k: (lls[k] / chars[k], -k))
        assert (pred, pred_norm) == (rec["pred"], rec["pred_norm"]), (name, i)
