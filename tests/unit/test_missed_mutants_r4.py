"""Tests written for the one-line mutants of issue 40 (bench/mutants.py, round 4) that the suite let through, and
for others of the same kinds. Each expectation comes from outside the code under test: the model's forward pass
re-written here in plain torch from modded-nanogpt's published equations, the init bound from its formula, the LR
schedule and seed statistics worked out by hand.

The blind spot these close: tests that compared our code with our code (cached vs uncached decoding, export vs
training model, 2 ranks vs 1, run vs run) pass whatever bug both paths share, and a model at initialisation (zero
output projections, value-embedding weights both 0.5) hides the MLP and the value-embedding mix altogether."""
import contextlib
import math
import os
import sys
import types

import numpy as np
import pytest
import torch

from conftest import REPO

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402


# ---------------------------------------------------------------------------------------------- the model's forward
def rms(x):
    """Parameter-free RMSNorm, eps = float32's machine epsilon (torch's rms_norm default)."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + torch.finfo(x.dtype).eps)


def rope(x, start=0):
    """Half-truncated RoPE (modded-nanogpt, 2025) as complex rotations: x (T, H, D); pair j = (x[j], x[j + D/2])
    turns by -t * f_j, with f_j = 1024^(-j / (D/4 - 1)) for j < D/4 and 0 for the rest."""
    T, _, D = x.shape
    quarter = D // 4
    f = torch.tensor([1024.0 ** (-j / (quarter - 1)) if quarter > 1 else 1.0 for j in range(quarter)]
                     + [0.0] * quarter, dtype=torch.float64)
    t = torch.arange(start, start + T, dtype=torch.float64)
    turn = torch.polar(torch.ones(T, D // 2, dtype=torch.float64), -t[:, None] * f[None, :])  # e^{-i t f}
    z = torch.complex(x[..., :D // 2].double(), x[..., D // 2:].double()) * turn[:, None, :]
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def reference_logits(model, idx, eot, windows):
    """Logits (T, padded vocab) of one row idx (T,) computed here from the model's weights alone, with the
    equations of modded-nanogpt's record #26 (train_gpt.py of KellerJordan/modded-nanogpt) and model.py's documented
    choices: x0 = norm(embed); each block x = l0 x + l1 x0, x += attn(norm x), x += mlp(norm x); attention with
    QK-norm, half-truncated RoPE, v = a0 v + a1 ve, scale 0.12 x 128 / head_dim, document-causal windows of 128-token
    blocks; MLP c_proj(relu(c_fc x)^2); U-net skips into the last num_layers // 2 blocks in reverse order; value
    embedding i in layer i and in layer L - n + i; logits 30 sigmoid(z / (7.5 sqrt(d)))."""
    c = model.config
    L, H, D, n_ve = c.num_layers, c.num_heads, c.head_dim, c.num_val_emb
    T = idx.size(0)
    W = dict(model.named_parameters())  # (not detached: gradients flow back to them)
    docs = torch.cumsum((idx == eot).long(), 0)
    q_pos, k_pos = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = {}
    for name, blocks in zip(("long", "short"), windows):
        allowed[name] = (k_pos <= q_pos) & (docs[:, None] == docs[None, :]) & (q_pos // 128 - k_pos // 128 < blocks)
    kind = ["long" if min(i, L - 1 - i) % 4 == 0 else "short" for i in range(L)]
    ve_of = {}
    for i in range(n_ve):
        ve_of[i] = i
        ve_of[L - n_ve + i] = i
    x = x0 = rms(W["embed.weight"][idx])
    skips, n_skip = [], L // 2
    for i in range(L):
        p = f"blocks.{i}."
        if i >= L - n_skip:
            x = x + W["skip_weights"][i - (L - n_skip)] * skips.pop()
        l0, l1 = W[p + "lambdas"]
        x = l0 * x + l1 * x0
        h = rms(x)
        wq, wk, wv = W[p + "attn.qkv_w"]
        q, k = (rope(rms((h @ w.T).view(T, H, D))) for w in (wq, wk))
        v = (h @ wv.T).view(T, H, D)
        a0, a1 = W[p + "attn.lambdas"]
        v = a0 * v
        if i in ve_of:
            v = v + a1 * W[f"value_embeds.{ve_of[i]}.weight"][idx].view(T, H, D)
        scores = torch.einsum("qhd,khd->hqk", q, k) * (0.12 * 128 / D)
        scores = scores.masked_fill(~allowed[kind[i]], float("-inf"))
        y = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v).reshape(T, H * D)
        x = x + y @ W[p + "attn.c_proj.weight"].T
        hidden = rms(x) @ W[p + "mlp.c_fc.weight"].T
        x = x + torch.relu(hidden).pow(2) @ W[p + "mlp.c_proj.weight"].T
        if i < n_skip:
            skips.append(x)
    z = rms(x) @ W["lm_head.weight"].T
    return 30 / (1 + torch.exp(-z / (7.5 * math.sqrt(c.model_dim))))


def perturbed_model(seed=0, **fields):
    """A small GPT whose every weight moves the output: the zero-initialised projections and head get random
    values, and every learned scalar (the value-embedding weights both 0.5, x0 mixing 1 and 0, skip weights 1)
    gets a different one, so that swapping two of them shows."""
    config = dict(vocab_size=200, num_layers=5, num_heads=2, head_dim=16, model_dim=32, num_val_emb=2,
                  window_size=256, max_seq_len=128)
    config.update(fields)
    torch.manual_seed(seed)
    model = arch.GPT(arch.GPTConfig(**config)).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim < 2:  # scalars: spread over [0.3, 1.5) so no two are alike
                p.copy_(0.3 + 1.2 * torch.rand(p.shape, generator=g))
            elif name.endswith("c_proj.weight") or name == "lm_head.weight":
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 if name == "lm_head.weight" else 0.15))
    return model


def row_with_documents(T, eot, vocab, seed=3):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (T,), generator=g)
    idx[idx == eot] = 0
    idx[[0, 70, 71, 300]] = eot  # a document across the first block boundary, a 1-token one, one in block 2
    return idx


@pytest.mark.parametrize("windows", [(2, 1), (3, 1)])
def test_the_model_computes_modded_nanogpts_equations(windows):
    # 384 tokens (3 blocks) with 4 documents; windows (2, 1): short layers see one block, long ones two
    model = perturbed_model()
    eot = 199
    idx = row_with_documents(384, eot, 200)
    with torch.no_grad():
        got = model(idx[None], model.attention_masks(idx[None], eot, windows))[0]
        want = reference_logits(model, idx, eot, windows)
    assert got.shape == want.shape == (384, 256)
    assert (want.max() - want.min()) > 5  # the logits depend on the input: every part of the network is live
    assert torch.allclose(got, want, atol=2e-5, rtol=0), float((got - want).abs().max())


def test_the_loss_its_gradients_and_predict_follow_the_reference(monkeypatch):
    # the summed cross-entropy of the targets under the reference logits (-log softmax at each target), through
    # the chunked eager loss (chunks of 100 rows here: 4 chunks, the last partial; recomputed in backward), and
    # every parameter's gradient as autograd gives it through the reference; predict() of a 300-token row (padded
    # inside to 384) gives the reference's logits of those 300 tokens, cut to vocab_size
    model = perturbed_model(seed=7)
    eot = 199
    idx = row_with_documents(385, eot, 200, seed=8)
    x, y = idx[:-1], idx[1:]
    by_hand = -torch.log_softmax(reference_logits(model, x, eot, (2, 1)).double(), dim=-1)[torch.arange(384), y].sum()
    by_hand.backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    monkeypatch.setattr(arch, "LOSS_CHUNK_ELEMENTS", 100 * model.padded_vocab)
    masks = model.attention_masks(x[None], eot, (2, 1))
    loss = model(x[None], masks, y[None])
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-5)
    loss.backward()
    for n, p in model.named_parameters():
        scale = float(want_grads[n].abs().max())
        assert scale > 0 and torch.allclose(p.grad, want_grads[n], atol=1e-4 * scale, rtol=0), n
    with torch.no_grad():
        assert float(model(x[None], masks, y[None])) == pytest.approx(by_hand.item(), rel=1e-5)  # no autograd
        got = model.predict(x[None, :300], eot, (2, 1))[0]
        want = reference_logits(model, x[:300], eot, (2, 1))[:, :200]
    assert got.shape == (300, 200)
    assert torch.allclose(got, want, atol=2e-5, rtol=0)


def test_the_mlp_is_relu_then_square():
    # ReLU² (Primer): relu(h)^2, zero for negative h. By hand for h = (-2, -0.5, 0, 0.5, 3) with identity weights:
    # (0, 0, 0, 0.25, 9); relu(h^2) would give (4, 0.25, 0, 0.25, 9)
    mlp = arch.MLP(5, 1.0)
    with torch.no_grad():
        mlp.c_fc.weight.copy_(torch.eye(5))
        mlp.c_proj.weight.copy_(torch.eye(5))
        out = mlp(torch.tensor([[-2.0, -0.5, 0.0, 0.5, 3.0]]))
    assert out.tolist() == [[0.0, 0.0, 0.0, 0.25, 9.0]]


def test_the_value_embedding_enters_with_its_own_weight():
    # v = a0 v + a1 ve: with zero q/k weights (uniform attention over the one token) and identity c_proj, a
    # one-token sequence's output is exactly a0 v + a1 ve, by hand 2 v + 3 ve for a0 = 2, a1 = 3
    attn = arch.CausalSelfAttention(dim=8, num_heads=1, head_dim=8, max_seq_len=128)
    with torch.no_grad():
        attn.qkv_w[:2].zero_()
        attn.qkv_w[2].copy_(torch.eye(8))
        attn.c_proj.weight.copy_(torch.eye(8))
        attn.lambdas.copy_(torch.tensor([2.0, 3.0]))
        x = torch.arange(1.0, 9.0).view(1, 1, 8)
        ve = torch.full((1, 1, 8), 10.0)
        mask = torch.ones(1, 1, 1, 1, dtype=torch.bool)
        out = attn(x, ve, mask)
        alone = attn(x, None, mask)
    assert torch.allclose(out, 2 * x + 30.0, atol=1e-5)
    assert torch.allclose(alone, 2 * x, atol=1e-5)  # a layer without value embedding keeps a0 v


@pytest.mark.parametrize("windows", [(2, 1)])
def test_decoding_with_the_kv_cache_gives_the_reference_logits(windows):
    # token by token through KVCache (what sample.py and the export's generate() use), past the window, so the
    # cache drops keys: every position's logits are the reference's for the whole row
    model = perturbed_model(seed=5)
    eot = 199
    idx = row_with_documents(384, eot, 200, seed=4)
    with torch.no_grad():
        want = reference_logits(model, idx, eot, windows)
    cache = arch.KVCache(model, eot, windows)
    got, t = [], 0
    with torch.no_grad():  # a prompt of 5, then pieces of 1 to 126 tokens, across documents and block boundaries
        for n in (5, 1, 1, 1, 63, 1, 56, 1, 1, 126, 1, 43, 1, 82, 1):
            got.append(cache.forward(idx[None, t:t + n])[0])
            t += n
    assert t == 384
    got = torch.cat(got)
    assert torch.allclose(got, want, atol=3e-5, rtol=0), float((got - want).abs().max())
    assert all(layer.size <= 2 * 128 for layer in cache.layers)  # within the window, as promised


# ---------------------------------------------------------------------------------------------- initialisation
def test_linear_layers_start_uniform_with_modded_nanogpts_std():
    # modded-nanogpt's CastedLinear.reset_parameters and qkv_w: std = 0.5 / sqrt(in_features), uniform on
    # [-sqrt(3) std, sqrt(3) std]; output projections and the head zero; x0 mixing (1, 0), value mix (0.5, 0.5),
    # skip weights 1. For 192 inputs: bound sqrt(3) x 0.5 / sqrt(192) = 0.0625 exactly
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=2, num_heads=3, head_dim=64, model_dim=192,
                                    num_val_emb=1, window_size=128, max_seq_len=128))
    bound = 0.0625
    for name, w in [("c_fc", model.blocks[0].mlp.c_fc.weight), ("qkv_w", model.blocks[1].attn.qkv_w)]:
        assert w.abs().max() <= bound and w.abs().max() > 0.999 * bound, name
        assert float(w.detach().std()) == pytest.approx(bound / math.sqrt(3), rel=0.01), name
    # a layer of another width follows its own fan-in: c_fc's 768 hidden units feed c_proj, whose bound would be
    # sqrt(3) x 0.5 / sqrt(768) = 0.03125 (c_proj itself is zero; CastedLinear alone shows it)
    alone = arch.CastedLinear(768, 64)
    assert alone.weight.abs().max() <= 0.03125 and alone.weight.abs().max() > 0.999 * 0.03125
    for block in model.blocks:
        assert not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()
        assert block.lambdas.tolist() == [1.0, 0.0] and block.attn.lambdas.tolist() == [0.5, 0.5]
    assert not model.lm_head.weight.any() and model.skip_weights.tolist() == [1.0]


# ---------------------------------------------------------------------------------------------- schedules
class _OneBatchLoader:
    def __init__(self, batch):
        self.batch = batch

    def next_batch(self):
        return [self.batch]


class _NoSync:
    armed = False

    def finish(self):
        pass


def test_each_step_sets_the_learning_rate_to_the_initial_one_times_the_schedule():
    # 10 steps, cooldown 0.5, lr_scale 0.5: x = step / 10; from x = 0.5, w = (1 - x) / 0.5 and the multiplier is
    # w + 0.1 (1 - w). By hand: step 5 → 1, 6 → 0.82, 7 → 0.64, 8 → 0.46, 9 → 0.28; times 0.5. Muon's momentum
    # 0.85 + 0.1 x step / 300.
    model = perturbed_model(seed=2, num_layers=2, num_val_emb=1)
    cfg = types.SimpleNamespace(train_steps=10, window_size=256, batch_size=128, cooldown_frac=0.5, lr_scale=0.5)
    optimizers = train_gpt.build_optimizers(model)
    initial = {(o, g): group["lr"] for o, opt in enumerate(optimizers) for g, group in enumerate(opt.param_groups)}
    assert sorted(initial.values()) == [0.04, 0.05, 0.22, 0.6]
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 199, size=(1, 129))
    loader = _OneBatchLoader((tokens[:, :-1].copy(), tokens[:, 1:].copy()))
    step_fn = train_gpt.make_train_step(cfg, model, model, optimizers, _NoSync(), loader, 199, False,
                                        contextlib.nullcontext, torch.device("cpu"))
    by_hand = {5: 1, 6: 0.82, 7: 0.64, 8: 0.46, 9: 0.28}  # (a resumed run's steps: it starts at step 5)
    for step, mult in by_hand.items():
        _, lr_mult = step_fn(step)
        assert lr_mult == pytest.approx(0.5 * mult, abs=1e-12), step
        for (o, g), lr in initial.items():
            assert optimizers[o].param_groups[g]["lr"] == pytest.approx(lr * 0.5 * mult, abs=1e-12), (step, o, g)
        assert optimizers[1].param_groups[0]["momentum"] == pytest.approx(0.85 + 0.1 * step / 300, abs=1e-12)


# ---------------------------------------------------------------------------------------------- statistics
def test_a_rerun_of_a_seed_with_another_value_is_ignored(tmp_path):
    # seeds 1, 2, 3 at 1.300, 1.304, 1.296 (HellaSwag 0.30, 0.31, 0.32), then seed 1 again at 1.400 (0.40): the
    # rerun reproduces a seed rather than sampling the noise anew, so only the first seed-1 run counts. By hand:
    # mean 1.300, std sqrt((0 + 0.004^2 + 0.004^2) / 2) = 0.004 over 3 seeds; HellaSwag mean 0.31
    from gptlab import compare as cmp
    from helpers.run_folders import finished_results, make_run, metrics_rows, variant

    runs = [("20260101_100000_Baseline", 1, 1.300, 0.30), ("20260102_100000_Baseline", 2, 1.304, 0.31),
            ("20260103_100000_Baseline", 3, 1.296, 0.32), ("20260104_100000_Baseline", 1, 1.400, 0.40)]
    for folder, seed, bpb, acc in runs:
        config = variant(seed=seed, command=f"train_gpt.py --seed {seed}", start_time=folder[:8] + "T10:00:00")
        make_run(str(tmp_path), folder, config, metrics_rows(40, bpb, acc), finished_results(config, bpb, acc))
    board = cmp.compare([], experiments_dir=str(tmp_path), no_plot=True, write=False)["board"]
    (group,) = board.groups
    mean, std, n = group.stats("val_bpb")
    assert (mean, std, n) == (pytest.approx(1.300, abs=1e-12), pytest.approx(0.004, abs=1e-12), 3)
    assert sorted(group.values("hs_acc_norm")) == pytest.approx([0.30, 0.31, 0.32], abs=1e-12)
    assert sorted(os.path.basename(r.path) for r in group.counted_runs("hs_acc_norm")) == [f for f, *_ in runs[:3]]
    assert board.noise.std == pytest.approx(0.004, abs=1e-12) and board.noise.df == 2
