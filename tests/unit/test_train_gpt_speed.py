"""train_gpt.py's GPU-path choices, checked on CPU in process: the bf16 residual stream, the chunked eager loss,
compiled Newton–Schulz, the attention scale, our Adam against torch.optim.Adam, and the micro-batch choice. Quiet
steps on 2 ranks, the eager loss's memory and presets, as subprocesses: tests/e2e/test_train_gpt_speed_e2e.py."""
import copy
import sys

import pytest
import torch

from conftest import REPO

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402


def test_bf16_autocast_keeps_the_residual_stream_in_bf16_and_the_loss_in_fp32():
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=4, num_heads=2, head_dim=16, model_dim=32, num_val_emb=1,
                          max_seq_len=128))
    with torch.no_grad():  # the zero-initialised projections would hide a dtype that only shows in values
        for p in model.parameters():
            p.normal_(0, 0.1)
    seen = []
    for block in model.blocks:
        block.register_forward_hook(lambda mod, args, out: seen.append((args[0].dtype, args[1].dtype, out.dtype)))
    idx = torch.randint(0, 99, (2, 128))
    masks = arch.build_attention_masks(idx, 99, 1, 1, use_flex=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(idx, masks, idx)
        logits = model(idx, masks)
    assert seen and all(dtypes == (torch.bfloat16,) * 3 for dtypes in seen)  # x, x0 and the block's output
    assert loss.dtype == torch.float32 and logits.dtype == torch.float32
    seen.clear()
    model(idx, masks, idx)  # without autocast everything stays float32
    assert all(dtypes == (torch.float32,) * 3 for dtypes in seen)


def test_the_chunked_eager_loss_equals_the_plain_cross_entropy_in_value_and_gradient(monkeypatch):
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=300, num_layers=2, num_heads=2, head_dim=8, model_dim=16, num_val_emb=0,
                          max_seq_len=128))
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 0.5)
    x = torch.randn(2, 128, 16, requires_grad=True)
    targets = torch.randint(0, 300, (2, 128))
    # reference: one F.cross_entropy over every row's soft-capped logits
    reference = torch.nn.functional.cross_entropy(model.logits(x).flatten(0, 1), targets.flatten(), reduction="sum")
    (grad_reference,) = torch.autograd.grad(reference, x)
    monkeypatch.setattr(arch, "LOSS_CHUNK_ELEMENTS", 40 * 384)  # 40 rows of the padded vocab per chunk: 7 chunks
    chunked = model.cross_entropy_sum(x, targets)
    (grad_chunked,) = torch.autograd.grad(chunked, x)
    assert torch.allclose(chunked, reference, rtol=1e-6) and torch.allclose(grad_chunked, grad_reference, atol=1e-6)


def test_compiled_newton_schulz_matches_the_eager_iteration():
    torch.manual_seed(0)
    G = torch.randn(3, 48, 32)
    eager = train_gpt.zeropower_via_newtonschulz5(G, 5)
    compiled = train_gpt.orthogonalize(G, 5, compiled=True)
    assert torch.allclose(compiled, eager, atol=1e-5)
    assert not train_gpt.orthogonalize(G, 5) is compiled  # on CPU the default is eager
    assert torch.equal(train_gpt.orthogonalize(G, 5), eager)
    singular = torch.linalg.svdvals(eager)  # the quintic iteration maps every singular value into ~[0.68, 1.13]
    assert singular.min() > 0.6 and singular.max() < 1.2


def test_the_attention_scale_keeps_the_largest_qk_normed_logit_at_the_anchors():
    assert arch.attention_scale(128) == 0.12  # record #26's scale for its 128-dim heads
    for head_dim in (32, 64, 128, 256):
        # q = k with RMS 1: q.k = head_dim, so the largest logit is head_dim x scale = 128 x 0.12
        assert head_dim * arch.attention_scale(head_dim) == pytest.approx(15.36)


def test_the_adam_in_build_optimizers_takes_the_papers_steps_and_resumes_exactly():
    """The Adam of build_optimizers against Kingma & Ba's update worked out in float64 (bias-corrected moments,
    eps added to the corrected root: torch's placement), over 12 steps with the schedule's lr changing; then a
    state_dict round trip continues bit for bit. On CPU it runs foreach (the baselines' arithmetic)."""
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=2, num_heads=2, model_dim=16, num_val_emb=1,
                                    max_seq_len=128))
    adam, _ = train_gpt.build_optimizers(model)
    assert isinstance(adam, torch.optim.Adam) and all(g["foreach"] and not g["fused"] for g in adam.param_groups)
    params = [p for g in adam.param_groups for p in g["params"]]
    lrs = {id(p): g["lr"] for g in adam.param_groups for p in g["params"]}
    ref = {id(p): (p.detach().double().clone(), torch.zeros_like(p, dtype=torch.float64),
                   torch.zeros_like(p, dtype=torch.float64)) for p in params}
    beta1, beta2, eps = 0.8, 0.95, 1e-10
    for t in range(1, 13):
        mult = 1.0 if t < 8 else 0.5
        for g in adam.param_groups:
            g["lr"] = g["initial_lr"] * mult
        for p in params:
            p.grad = torch.randn_like(p)
            x, m, v = ref[id(p)]
            gd = p.grad.double()
            m.mul_(beta1).add_((1 - beta1) * gd)
            v.mul_(beta2).add_((1 - beta2) * gd * gd)
            x.sub_(lrs[id(p)] * mult * (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps))
        adam.step()
    for p in params:
        assert torch.allclose(p.double(), ref[id(p)][0], rtol=1e-5, atol=1e-6)
    twin = copy.deepcopy(model)
    twin_adam, _ = train_gpt.build_optimizers(twin)
    twin_adam.load_state_dict(copy.deepcopy(adam.state_dict()))
    for a, b in zip(model.parameters(), twin.parameters()):
        a.grad = torch.randn_like(a)
        b.grad = a.grad.clone()
    adam.step()
    twin_adam.step()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


# ------------------------------------------------------------------------------------------------ micro-batch and presets
def test_micro_batch_candidates_cut_a_ranks_share_into_whole_rows():
    from gptlab.train.batching import micro_batch_candidates

    assert micro_batch_candidates(12 * 128, 128) == [1536, 768, 512, 384, 256, 128]  # 12 rows: 1, 2, 3, 4, 6, 12 parts


def test_auto_micro_batch_takes_the_largest_that_fits_from_a_probe_and_a_check():
    from gptlab.train.batching import choose_micro_batch, micro_batch_candidates

    GiB, MiB = 2**30, 2**20
    candidates = micro_batch_candidates(524288, 2048)  # GPT-2 small's per-GPU share on one GPU: 256 rows of 2048
    calls = []

    def measure(tokens):  # 10 GiB of weights and gradients, 1 MiB of activations per token
        calls.append(tokens)
        return 10 * GiB + tokens * MiB

    # budget: 80 GiB x 0.9 - 6 GiB of optimizer states = 66 GiB, so at most 56 GiB of activations: 57,344 tokens;
    # 32,768 is the largest candidate below (65,536 would need 74 GiB)
    tokens, tried = choose_micro_batch(candidates, measure, 80 * GiB, fixed_bytes=10 * GiB, extra_bytes=6 * GiB)
    assert tokens == 32768 and calls == [2048, 32768]
    assert tried == [(2048, 10 * GiB + 2048 * MiB), (32768, 42 * GiB)]

    def measure_oom_above_16k(tokens):  # the prediction says 32,768 fits, the device says no: step down
        calls.append(tokens)
        if tokens > 16384:
            raise MemoryError
        return 10 * GiB + tokens * MiB

    calls.clear()
    tokens, tried = choose_micro_batch(candidates, measure_oom_above_16k, 80 * GiB, fixed_bytes=10 * GiB,
                                       extra_bytes=6 * GiB)
    assert tokens == 16384 and calls == [2048, 32768, 16384] and tried[1] == (32768, None)
    with pytest.raises(Exception, match="even a micro-batch of 2048 tokens does not fit"):
        choose_micro_batch(candidates, measure, 11 * GiB, fixed_bytes=10 * GiB)


def test_the_loader_recut_into_more_micro_batches_reads_the_same_rows(tiny):
    import glob

    import numpy as np

    from gptlab.dataset.loader import BOSAlignedLoader

    paths = sorted(glob.glob(tiny["train"]))
    direct = BOSAlignedLoader(paths, 128, 1024, tiny["eot"], grad_acc_steps=4)
    recut = BOSAlignedLoader(paths, 128, 1024, tiny["eot"], grad_acc_steps=1)
    recut.set_grad_acc_steps(4)
    for _ in range(3):
        a, b = direct.next_batch(), recut.next_batch()
        assert len(a) == len(b) == 4 and all(np.array_equal(x, y) for pa, pb in zip(a, b) for x, y in zip(pa, pb))


@pytest.mark.parametrize("shape", [dict(num_layers=4, num_heads=2, head_dim=16, model_dim=32, num_val_emb=1),
                                   dict(num_layers=5, num_heads=3, head_dim=8, model_dim=40, num_val_emb=2,
                                        mlp_ratio=2.5)])
def test_the_parameter_count_used_before_building_matches_a_built_model(shape):
    """parameter_count (a model on the meta device) against the count worked out by hand: embeddings and head over
    the vocabulary padded to 128, value embeddings, per block q, k, v, out, the MLP and two lambda pairs, and one
    skip weight per pair of layers."""
    from gptlab.train.config import parameter_count

    vocab, hdim = 384, shape["num_heads"] * shape["head_dim"]  # 300 padded to a multiple of 128
    dim, hidden = shape["model_dim"], int(shape.get("mlp_ratio", 4.0) * shape["model_dim"])
    per_block = 4 * hdim * dim + 2 * dim * hidden + 4
    by_hand = 2 * vocab * dim + shape["num_val_emb"] * vocab * hdim + shape["num_layers"] * per_block \
        + shape["num_layers"] // 2
    config = dict(vocab_size=300, max_seq_len=128, **shape)
    assert parameter_count(arch, config) == by_hand
    assert sum(p.numel() for p in arch.GPT(arch.GPTConfig(**config)).parameters()) == by_hand
