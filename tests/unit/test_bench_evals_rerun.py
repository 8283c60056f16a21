"""bench/bench_evals.py run twice with one --work_dir (the export reused): each lm-eval run reads its own samples
file, not one the previous run left there. The processes are stand-ins that write the files the real ones write."""
import importlib.util
import json
import os
import sys

import pytest

from conftest import REPO


def test_a_reused_work_dir_reads_each_runs_own_lm_eval_samples(tmp_path, monkeypatch, capsys):
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("lm_eval is not installed")
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import bench_evals

    runs = []

    def fake_timed(args, env=None):
        if "export_hf.py" in args[1]:
            os.makedirs(args[3], exist_ok=True)
            open(os.path.join(args[3], "config.json"), "w").close()
        elif "evaluate.py" in args[1]:
            out = args[args.index("--out") + 1]
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "copa.jsonl"), "w") as f:
                f.write(json.dumps({"index": 0, "logprob": [-1.0, -2.0], "pred": 0, "pred_norm": 0, "chars": [3, 3]})
                        + "\n")
        else:  # lm_eval: one samples file under its --output_path, as --log_samples writes
            out = args[args.index("--output_path") + 1]
            os.makedirs(os.path.join(out, "model"), exist_ok=True)
            runs.append(out)  # lm-eval names its files by the time: each run's its own name
            with open(os.path.join(out, "model", f"samples_gptlab_copa_{len(runs)}.jsonl"), "w") as f:
                f.write(json.dumps({"doc_id": 0, "resps": [[["-1.0", False]], [["-2.0", False]]]}) + "\n")
        return 1.0, 1.0, None

    monkeypatch.setattr(bench_evals, "timed", fake_timed)
    argv = ["CKPT.pt", "--tasks", "copa", "--limit", "1", "--batch_sizes", "8", "--data_dir", str(tmp_path / "d"),
            "--work_dir", str(tmp_path / "work")]
    for _ in range(2):
        assert bench_evals.main(argv) == 0
        assert "largest per-example log-likelihood difference: 0.00e+00" in capsys.readouterr().out


def test_the_referee_runs_the_model_in_float64_throughout(tmp_path):
    """model.py casts q/k and the head's logits to float32 (.float()); under the referee a float64 model keeps float64
    end to end (its logits float64, so no float32 rounding in the figure it referees by), and .float() is torch's
    again afterwards. Its figures are those of the plain float32 loop to float32's precision."""
    import torch

    from helpers.eval_tasks import loop_loglikelihood, tiny_checkpoint
    from gptlab.checkpoint import checkpointing
    from gptlab.checkpoint.model_source import load_model

    sys.path.insert(0, os.path.join(REPO, "bench"))
    import bench_evals

    ckpt, _ = tiny_checkpoint(str(tmp_path))
    model, _, ck = load_model(ckpt, "cpu")
    tok = checkpointing.checkpoint_tokenizer(ck, ckpt)
    request = {"contexts": ["The sky is", "The sky is"], "continuations": [" blue today.", " green, mostly."]}
    want = [loop_loglikelihood(model, tok.encoding, tok.eot, c, x)[0]
            for c, x in zip(request["contexts"], request["continuations"])]
    model.double()
    with bench_evals.float64_throughout():
        assert torch.ones(2, dtype=torch.float64).float().dtype == torch.float64
        assert torch.ones(2, dtype=torch.float16).float().dtype == torch.float32
        logits = model.predict(torch.tensor([[tok.eot, 1, 2, 3]]), tok.eot)
    assert logits.dtype == torch.float64
    assert torch.ones(2, dtype=torch.float64).float().dtype == torch.float32
    with torch.no_grad():
        got = bench_evals.float64_logprobs(model, tok.encoding, tok.eot, request)
    assert got == pytest.approx(want, abs=1e-4) and got != want
