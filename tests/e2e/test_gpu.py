"""The CUDA paths: run only where torch sees a GPU (skipped on CPU machines and in CI).

    GPTLAB_SHARED_DATA=/path/to/shared/data python -m pytest -q tests/e2e/test_gpu.py     # on a GPU machine

They check what the CPU tests cannot: the torch BPE engine on the GPU gives the CPU engines' merges, FlexAttention
(compiled, with backward) computes what the dense SDPA path computes, the block masks built on the GPU are
create_block_mask's, the FP8 head's torch._scaled_mm is its CPU reference (and the capability rule is what the GPU
runs), and whole train_gpt.py runs with the GPU recipe (torch.compile, FlexAttention block masks, bfloat16 autocast
with bfloat16 embeddings, --device_batch_size auto, --fp8_head where the GPU has FP8) train, record GPU memory and
leave checkpoints that load on a CPU.
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


def _gpu_run(tmp_path, **overrides):
    """train_gpt.py and its flags for a tiny CUDA run on a fresh 256-merge dataset (tests/helpers/tiny_runs.tiny_args
    at the GPU's shape: dim 128, 4 layers of 4 heads, rows of 256, 8192 tokens per step, the probed micro-batch,
    30 steps validated every 15), its runs under tmp_path/exp; overrides as tiny_args takes them."""
    from helpers.tiny_data import make_dataset
    from helpers.tiny_runs import tiny_args

    tiny = make_dataset(str(tmp_path / "data"), n_merges=256)
    flags = dict(train_seq_len=256, val_seq_len=256, model_dim=128, num_heads=4, batch_size=8192,
                 device_batch_size=None, train_steps=30, val_loss_every=15, log_every=None, device="cuda")
    flags.update(overrides)
    return ["train_gpt.py"] + tiny_args(tiny, tmp_path / "exp", **flags)


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
    from helpers.tiny_runs import only_run_dir

    proc = run_script(_gpu_run(tmp_path, sample_tokens=8, model_name="gpu"), check=True, timeout=1200)
    # the first probe is the size the activation estimate predicts (the whole 8192-token batch fits a tiny model),
    # so the compiled graph of that probe is the one training uses: one probe, no row-sized one first
    assert "--device_batch_size auto: probed 8192 tokens: " in proc.stdout and "; using 8192" in proc.stdout
    run_dir = only_run_dir(tmp_path / "exp", "gpu")
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


def _fp8_capable():
    return torch.cuda.get_device_capability() >= (8, 9)


def _block_matrix(num, indices):
    """FlexAttention's (counts, indices) as (..., n, n) int counts of each listed block (2: listed twice)."""
    n = indices.size(-1)
    listed = torch.arange(n, device=indices.device) < num[..., None]
    out = torch.zeros(*indices.shape[:-1], n + 1, dtype=torch.int32, device=indices.device)
    out.scatter_add_(-1, torch.where(listed, indices.long(), n), listed.int())
    return out[..., :n]


def test_block_masks_built_on_cuda_list_the_blocks_create_block_mask_finds_point_by_point():
    from torch.nn.attention.flex_attention import create_block_mask

    device = torch.device("cuda")
    generator = torch.Generator().manual_seed(0)
    B, T, eot = 2, 4096, 999
    idx = torch.randint(0, eot, (B, T), generator=generator)
    idx[torch.rand(B, T, generator=generator) < 0.002] = eot
    idx[1, ::384] = eot
    idx = idx.to(device)
    docs = (idx == eot).cumsum(dim=1)
    for long_blocks in (1, 3, 14, 40):
        short_blocks = max(1, long_blocks // 2)
        ours = arch.build_attention_masks(idx, eot, long_blocks, short_blocks, use_flex=True)
        for name, window in (("long", long_blocks), ("short", short_blocks)):
            reference = create_block_mask(arch.document_window_mask_mod(docs, torch.tensor(window, device=device)),
                                          B, None, T, T, device=device)
            for kind in ("kv", "full_kv", "q", "full_q"):
                got = _block_matrix(getattr(ours[name], f"{kind}_num_blocks"), getattr(ours[name], f"{kind}_indices"))
                want = _block_matrix(getattr(reference, f"{kind}_num_blocks"),
                                     getattr(reference, f"{kind}_indices"))
                assert torch.equal(got, want), (name, window, kind)


def test_the_fp8_decision_matches_what_the_gpu_runs():
    from gptlab.train.config import fp8_supported

    device = torch.device("cuda")
    a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)
    try:
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        runs = True
    except RuntimeError:
        runs = False
    assert fp8_supported(device) is runs is _fp8_capable()


@pytest.mark.skipif(not torch.cuda.is_available() or not _fp8_capable(), reason="needs CUDA capability >= 8.9")
def test_fp8_head_on_cuda_is_the_cpu_reference_product():
    """The quantisation is the same rounding on both devices (exactly); torch._scaled_mm's products (fast
    accumulation forward) are the dequantised float32 products up to accumulation order and bfloat16 output."""
    torch.manual_seed(0)
    x = torch.randn(512, 768)
    w = torch.randn(1024, 768) * 0.05
    g = (torch.randn(512, 1024) * 1e-6).bfloat16()  # a gradient divided by a large batch, as in training
    for t, dtype in ((x, arch.E4M3), (w, arch.E4M3), (g, arch.E5M2)):
        on_gpu = arch.to_fp8(t.cuda(), arch.fp8_scale(t.cuda(), dtype), dtype).cpu().float()
        assert torch.equal(on_gpu, arch.to_fp8(t, arch.fp8_scale(t, dtype), dtype).float())
    results = {}
    for name, fn in (("cpu", arch.fp8_linear), ("cuda", arch.fp8_linear),
                     ("compiled", torch.compile(arch.fp8_linear, dynamic=False))):
        device = "cpu" if name == "cpu" else "cuda"
        # detached copies: x.to("cpu") is x itself, which would make the next device's copy a non-leaf
        xd, wd = x.detach().to(device).requires_grad_(), w.detach().to(device).requires_grad_()
        out = fn(xd, wd)
        out.backward(g.to(device))
        results[name] = [out.cpu(), xd.grad.cpu(), wd.grad.cpu()]
    for name in ("cuda", "compiled"):
        for got, want in zip(results[name], results["cpu"]):
            assert got.dtype == want.dtype
            assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2 * want.float().abs().max().item())


def test_train_gpt_gpu_run_with_fp8_head_and_bf16_embeddings_gives_a_checkpoint_that_loads_on_cpu(tmp_path):
    """The GPU recipe with --fp8_head where the GPU has FP8: it trains, its embeddings were bfloat16 (the
    checkpoint's float32 values are bfloat16 values) and the checkpoint samples on the CPU."""
    from gptlab.checkpoint import model_source
    from gptlab.train import records
    from helpers.tiny_runs import only_run_dir

    run_script(_gpu_run(tmp_path, sample_tokens=8, model_name="fp8", save_model=True, fp8_head=_fp8_capable()),
               check=True, timeout=1200)
    run_dir = only_run_dir(tmp_path / "exp", "fp8")
    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        assert json.load(f)["fp8_head"] is _fp8_capable()
    rows = records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
    val = [r["val_loss"] for r in rows if r["val_loss"] is not None]
    assert len(val) == 3 and val[-1] < val[0] - 0.5
    (path,) = [os.path.join(run_dir, records.CHECKPOINT_DIR, f)
               for f in os.listdir(os.path.join(run_dir, records.CHECKPOINT_DIR))]
    model, _, ckpt = model_source.load_model(path, "cpu")
    embed = ckpt["model"]["embed.weight"]
    assert embed.dtype == torch.float32 and torch.equal(embed, embed.bfloat16().float())
    assert torch.isfinite(model.predict(torch.randint(0, 200, (1, 50)), eot=0)).all()


def _per_example(folder, task):
    with open(os.path.join(folder, f"{task}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_evaluate_on_cuda_scores_what_the_cpu_scores(tmp_path):
    """evaluate.py --device cuda against --device cpu, both --dtype float32, on the real rows of every shipped task
    (LAMBADA's layout with rows written for the tests): each continuation's log-probability within 2e-3 nats (the
    kernels differ), and the same prediction wherever the choices are more than 1e-2 nats apart."""
    from helpers.eval_tasks import LAMBADA_ROWS, SHARED_TASKS, data_dir_with, tiny_checkpoint, write_rows

    ckpt, _ = tiny_checkpoint(str(tmp_path), window_size=256)
    data = data_dir_with(tmp_path / "data", SHARED_TASKS + ["hellaswag"], limit=12)
    write_rows(data, "lambada", LAMBADA_ROWS)
    outs = {}
    for device in ("cpu", "cuda"):
        outs[device] = str(tmp_path / device)
        run_script(["evaluate.py", ckpt, "--tasks", "core", "--data_dir", data, "--out", outs[device], "--device",
                    device, "--dtype", "float32", "--quiet"], check=True, timeout=600)
    for task in SHARED_TASKS + ["hellaswag", "lambada"]:
        cpu, gpu = _per_example(outs["cpu"], task), _per_example(outs["cuda"], task)
        assert len(cpu) == len(gpu) > 0, task
        for a, b in zip(cpu, gpu):
            assert a["gold"] == b["gold"] and a["tokens"] == b["tokens"], (task, a["index"])
            assert max(abs(x - y) for x, y in zip(a["logprob"], b["logprob"])) < 2e-3, (task, a["index"])
            lp = sorted(a["logprob"], reverse=True)
            if len(lp) > 1 and lp[0] - lp[1] > 1e-2:
                assert a["pred"] == b["pred"], (task, a["index"])


def test_train_gpt_in_run_evals_on_cuda_equal_evaluate_py_on_its_checkpoint(tmp_path):
    """--evals in a compiled CUDA run: the figures recorded at the end are evaluate.py's on the final checkpoint (a
    fresh process; both bfloat16 autocast, evaluate.py's default on CUDA, but the run's model and batches are its
    own): gold-answer bpb within 2%, accuracy within one example of 8."""
    from gptlab.train import records
    from helpers.eval_tasks import data_dir_with
    from helpers.tiny_runs import only_run_dir

    tasks = "arc_easy,hellaswag,piqa"
    data = data_dir_with(tmp_path / "evals", tasks.split(","), limit=8)
    run_script(_gpu_run(tmp_path, train_steps=10, val_loss_every=0, val_steps=None, window_size=128,
                        model_name="gpuevals", evals=tasks, evals_limit=8, evals_data_dir=data, save_model=True),
               check=True, timeout=900)
    run_dir = only_run_dir(tmp_path / "exp", "gpuevals")
    rows = [r for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r.get("evals_core") is not None]
    assert [r["step"] for r in rows] == [10]
    ckpt = os.path.join(run_dir, "checkpoints", "step_000010.pt")
    out = str(tmp_path / "eval")
    run_script(["evaluate.py", ckpt, "--tasks", tasks, "--limit", "8", "--data_dir", data, "--out", out,
                "--device", "cuda", "--quiet"], check=True, timeout=600)
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    for task in tasks.split(","):
        ours, theirs = rows[0][f"evals_{task}_gold_bpb"], summary["per_task"][task]["gold_bpb"]
        assert abs(ours - theirs) <= 0.02 * theirs, (task, ours, theirs)
        assert abs(rows[0][f"evals_{task}_acc"] - summary["per_task"][task]["acc"]) <= 1 / 8 + 1e-9, task
