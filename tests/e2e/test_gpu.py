"""The CUDA paths: run only where torch sees a GPU (skipped on CPU machines and in CI).

    GPTLAB_SHARED_DATA=/path/to/shared/data python -m pytest -q tests/e2e/test_gpu.py     # on a GPU machine

They check what the CPU tests cannot: the torch BPE engine on the GPU gives the CPU engines' merges, FlexAttention
(compiled, with backward) computes what the dense SDPA path computes, and a whole train_gpt.py run with the GPU
recipe (torch.compile, FlexAttention block masks, bfloat16 autocast, --device_batch_size auto) trains and records
GPU memory.
"""
import json
import os
import sys

import pytest
import torch

from conftest import FINEWEB_150, REPO, SHARED_DATA, TINY_SHAKESPEARE, run_script

sys.path.insert(0, REPO)
import model as arch  # noqa: E402

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs the shared data (GPTLAB_SHARED_DATA)")]


def _word_table(vocab_texts):
    from gptlab.tokenizer.pretokenize import count_documents, to_bytes_table
    from gptlab.tokenizer.format import PATTERNS

    return to_bytes_table(count_documents(vocab_texts, PATTERNS["gpt4"]))


def test_torch_engine_on_cuda_gives_the_cpu_merges():
    from gptlab.tokenizer import native
    from gptlab.tokenizer.merges import train_merges_python, train_merges_torch
    from helpers.tiny_data import read_docs

    texts = read_docs(FINEWEB_150) + read_docs(TINY_SHAKESPEARE)[:2000] + ["aaaaaaa bbbb   \r\n\r\n 🙂🙂🙂 1234567"]
    table = _word_table(texts)
    cpu = (native.train_merges_native if native.available() else train_merges_python)(table, 3000)
    gpu = train_merges_torch(table, 3000, device="cuda")
    assert gpu.merges == cpu.merges and gpu.counts == cpu.counts


def test_compiled_flex_attention_matches_dense_sdpa_forward_and_backward():
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = arch.GPT(arch.GPTConfig(vocab_size=1000, num_layers=4, num_heads=4, head_dim=32, model_dim=128,
                          max_seq_len=512)).to(device)
    with torch.no_grad():  # zero-initialised projections would make every layer's attention output 0
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    eot = 999
    idx = torch.randint(0, eot, (2, 512), device=device)
    idx[0, [0, 100, 300]] = eot
    idx[1, [0, 257]] = eot
    targets = torch.randint(0, eot, (2, 512), device=device)
    results = []
    for use_flex in (True, False):  # eager on CUDA: attend() runs FlexAttention through its own compiled kernel
        model.zero_grad(set_to_none=True)
        masks = arch.build_attention_masks(idx, eot, 3, 1, use_flex)
        loss = model(idx, masks, targets)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (flex_loss, flex_grads), (dense_loss, dense_grads) = results
    assert torch.allclose(flex_loss, dense_loss, rtol=1e-4)
    for a, b in zip(flex_grads, dense_grads):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5 * b.abs().max().item() + 1e-8)


def test_train_gpt_gpu_recipe_trains(tmp_path):
    """Default CUDA settings: compile, FlexAttention, bfloat16 autocast, the probed micro-batch; one rank."""
    from gptlab.train import records
    from helpers.tiny_data import make_dataset

    tiny = make_dataset(str(tmp_path / "data"), n_merges=256)
    args = ["train_gpt.py", "--tokenizer", tiny["tokenizer"], "--train_files", tiny["train"], "--val_files",
            tiny["val"], "--train_seq_len", "256", "--val_seq_len", "256", "--model_dim", "128", "--num_heads", "4",
            "--num_layers", "4", "--batch_size", "8192", "--train_steps", "30",
            "--val_loss_every", "15", "--val_steps", "2", "--window_size", "256", "--hellaswag_limit", "0",
            "--experiments_dir", str(tmp_path / "exp"), "--sample_tokens", "8", "--device", "cuda",
            "--model_name", "gpu"]
    proc = run_script(args, check=True, timeout=1200)
    assert "--device_batch_size auto: probed 256 tokens" in proc.stdout  # one row first
    (run_dir,) = [os.path.join(tmp_path / "exp", d) for d in os.listdir(tmp_path / "exp")]
    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert config["compile"] is True and config["attention"] == "flex" and config["dtype"] == "bfloat16"
    assert config["device_batch_size"] == 8192 and config["grad_acc_steps"] == 1  # a tiny model fits whole
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "finished" and results["peak_mem_allocated_gb"] > 0
    rows = records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
    val = [r["val_loss"] for r in rows if r["val_loss"] is not None]
    assert len(val) == 3 and val[-1] < val[0] - 0.5
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        assert "nvidia-smi" in f.read()


def test_torch_adam_steps_without_a_host_sync():
    """build_optimizers' Adam on CUDA (fused: step counts on the GPU) never makes the host wait for the GPU: the
    reason a hand-written Adam was once kept."""
    import train_gpt

    model = arch.GPT(arch.GPTConfig(vocab_size=1000, num_layers=2, num_heads=2, model_dim=64)).cuda()
    adam, _ = train_gpt.build_optimizers(model)
    assert all(g["fused"] for g in adam.param_groups)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    adam.step()  # the first step creates the state
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            adam.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
