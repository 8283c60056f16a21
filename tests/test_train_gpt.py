"""train_gpt.py on CPU: model pieces, a real tiny training run and its run folder, 1 vs 2 ranks, a simulated
two-node launch, exact resume, and every bad input failing before training."""
import contextlib
import glob
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import HELLASWAG_VAL, REPO, SHARED_DATA, free_port, run_script, unreadable_file
from gptlab.train import checkpointing
from gptlab.train import environment
from gptlab.train import records
from gptlab.data.selection import check_shards_match_tokenizer, default_shard_folder
from gptlab.core.errors import UserError
from gptlab.data.shards import read_shard, write_shard
from gptlab.train.config import resolve_config

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402
from gptlab.train import model_source  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A tiny BPE tokenizer (512 merges-free bytes + 256 merges + <|endoftext|>) and shards from real text."""
    from helpers.tiny_data import make_dataset

    return make_dataset(str(tmp_path_factory.mktemp("tiny")), n_merges=256)


def tiny_args(tiny, exp_dir, **overrides):
    """CLI flags of a tiny CPU run (dim 64, 4 layers, seq 128, 1024 tokens/step)."""
    flags = {"tokenizer": tiny["tokenizer"], "train_files": tiny["train"], "val_files": tiny["val"],
             "train_seq_len": 128, "val_seq_len": 128, "model_dim": 64, "num_heads": 2, "num_layers": 4,
             "batch_size": 1024, "device_batch_size": 512, "train_steps": 20, "val_loss_every": 10, "val_steps": 2,
             "window_size": 256, "hellaswag_limit": 0, "experiments_dir": str(exp_dir), "log_every": 0,
             "sample_tokens": 0, "model_name": "tiny"}
    flags.update(overrides)
    argv = []
    for key, value in flags.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is not None and value is not False:
            argv += [f"--{key}", str(value)]
    return argv


def only_run_dir(exp_dir, name="tiny"):
    dirs = sorted(glob.glob(os.path.join(str(exp_dir), f"*_{name}*")))
    assert len(dirs) == 1, dirs
    return dirs[0]


def train_losses(run_dir):
    return {r["step"]: r["train_loss"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r["train_loss"] is not None}


def reference_hellaswag(logits_fn, enc, n):
    """(acc, acc_norm) over the first n examples of the real file, scored one ending at a time as build-nanogpt's
    hellaswag.py does: row = [<|endoftext|>] + ctx + " " + ending; the ending's loss is the sum (acc) or mean
    (acc_norm) of its tokens' cross-entropy, over the tokenizer's logits; the lowest loss wins."""
    correct = [0, 0]
    with open(HELLASWAG_VAL) as f:
        examples = [json.loads(line) for _, line in zip(range(n), f)]
    for ex in examples:
        prefix = [enc.eot_token] + enc.encode_ordinary(ex["ctx"])
        sums, means = [], []
        for ending in ex["endings"]:
            row = prefix + enc.encode_ordinary(" " + ending)
            log_probs = torch.log_softmax(logits_fn(torch.tensor([row]))[0].double(), dim=-1)
            losses = [-float(log_probs[t - 1, row[t]]) for t in range(len(prefix), len(row))]
            sums.append(sum(losses))
            means.append(sum(losses) / len(losses))
        correct[0] += sums.index(min(sums)) == ex["label"]
        correct[1] += means.index(min(means)) == ex["label"]
    return correct[0] / n, correct[1] / n


def val_losses(run_dir):
    return {r["step"]: r["val_loss"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
            if r["val_loss"] is not None}


# ------------------------------------------------------------------------------------------------ model pieces
def test_flex_block_mask_and_dense_mask_agree_and_give_the_same_model_output():
    from torch.nn.attention.flex_attention import create_block_mask

    torch.manual_seed(0)
    B, T, eot = 2, 384, 7
    idx = torch.randint(0, 50, (B, T))
    idx[0, [0, 40, 41, 200, 300]] = eot
    idx[1, [0, 250]] = eot
    docs = (idx == eot).cumsum(1)
    for window in (1, 2, 3):
        mask_mod = arch.document_window_mask_mod(docs, torch.tensor(window))
        dense = arch.dense_mask(mask_mod, B, T, "cpu")  # (B, 1, T, T)
        # the same rule written out by hand: causal, same document, within `window` blocks
        q = torch.arange(T).view(T, 1)
        k = torch.arange(T).view(1, T)
        expected = (q >= k) & (docs[:, :, None] == docs[:, None, :]) & ((q // 128 - k // 128) < window)
        assert torch.equal(dense[:, 0], expected)
        block_mask = create_block_mask(mask_mod, B, None, T, T, device="cpu")
        blocks_touched = dense.view(B, 1, T // 128, 128, T // 128, 128).any(dim=(3, 5))
        assert torch.equal(block_mask.to_dense().bool(), blocks_touched)
    model = arch.GPT(arch.GPTConfig(vocab_size=50, num_layers=3, num_heads=2, head_dim=16, model_dim=32, num_val_emb=1,
                          max_seq_len=T)).eval()
    with torch.no_grad():
        for p in model.parameters():  # non-zero output projections, so attention matters for the logits
            p.add_(torch.randn_like(p) * 0.05)
        flex = model(idx, arch.build_attention_masks(idx, eot, 2, 1, use_flex=True))
        dense = model(idx, arch.build_attention_masks(idx, eot, 2, 1, use_flex=False))
    assert flex.shape == (B, T, 128)  # vocab 50 padded to 128
    assert torch.allclose(flex, dense, atol=1e-5, rtol=1e-5)


def test_attention_pairs_counts_exactly_what_the_mask_allows():
    torch.manual_seed(1)
    B, T, eot = 3, 512, 5
    idx = torch.randint(0, 40, (B, T))
    idx[idx == eot] = 0
    idx[0, [0, 3, 4, 130, 131, 400]] = eot  # adjacent documents, one-token documents, a long one
    idx[1, [200]] = eot  # row 1 starts mid-document (no <|endoftext|> at 0); row 2 has none at all
    docs = (idx == eot).cumsum(1)
    for window in (1, 2, 3, 4, 9):
        dense = arch.dense_mask(arch.document_window_mask_mod(docs, torch.tensor(window)), B, T, "cpu")
        pairs = arch.attention_pairs(idx, eot, window)
        assert pairs.dtype == torch.int64 and int(pairs) == int(dense.sum())


def test_attention_runs_in_the_matmul_dtype_under_autocast(monkeypatch):
    """CUDA autocast runs rms_norm in float32 and FlexAttention is not autocast: q, k, v must still reach attention
    in bfloat16. Emulated on CPU by a norm that returns float32, as CUDA autocast's does."""
    seen = []
    real_attend, real_norm = arch.attend, arch.norm
    monkeypatch.setattr(arch, "norm", lambda x: real_norm(x.float()))
    monkeypatch.setattr(arch, "attend", lambda q, k, v, m: seen.append((q.dtype, k.dtype, v.dtype))
                        or real_attend(q, k, v, m))
    model = arch.GPT(arch.GPTConfig(vocab_size=40, num_layers=2, num_heads=2, head_dim=8, model_dim=16, max_seq_len=128))
    idx = torch.randint(0, 40, (1, 128))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx, arch.build_attention_masks(idx, 3, 1, 1, False), idx)
    assert seen and all(dtypes == (torch.bfloat16,) * 3 for dtypes in seen)


def test_document_mask_isolates_documents():
    """A token's logits depend on earlier tokens of its own document only."""
    torch.manual_seed(0)
    eot = 3
    model = arch.GPT(arch.GPTConfig(vocab_size=40, num_layers=2, num_heads=2, head_dim=8, model_dim=16, max_seq_len=128)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
        a = torch.randint(4, 40, (1, 128))
        a[0, 0] = eot
        a[0, 64] = eot  # second document starts at 64
        b = a.clone()
        b[0, 1:64] = torch.randint(4, 40, (63,))  # change only the first document
        la = model(a, arch.build_attention_masks(a, eot, 1, 1, False))
        lb = model(b, arch.build_attention_masks(b, eot, 1, 1, False))
    assert torch.allclose(la[0, 64:], lb[0, 64:], atol=1e-6)
    assert not torch.allclose(la[0, 1:64], lb[0, 1:64])


@pytest.mark.parametrize("num_layers,num_val_emb", [(1, 1), (2, 2), (3, 2), (5, 3), (4, 0)])
def test_value_embeddings_and_unet_work_for_any_depth(num_layers, num_val_emb):
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=num_layers, num_heads=2, head_dim=8, model_dim=16,
                          num_val_emb=num_val_emb, max_seq_len=128))
    assert len(model.value_embeds) == num_val_emb
    used = {i for i in model.ve_index if i is not None}
    assert used == set(range(num_val_emb))
    assert model.ve_index[0] == (0 if num_val_emb else None)
    idx = torch.randint(0, 100, (2, 128))
    loss = model(idx, arch.build_attention_masks(idx, 99, 1, 1, False), idx)
    loss.backward()
    assert math.isclose(loss.item() / idx.numel(), math.log(128), rel_tol=1e-4)  # zero head → uniform logits
    opts = train_gpt.build_optimizers(model)
    assert sum(len(g["params"]) for o in opts for g in o.param_groups) == len(list(model.parameters()))


def test_long_and_short_window_layers_follow_modded_nanogpt():
    def long_layers(n):
        model = arch.GPT(arch.GPTConfig(vocab_size=10, num_layers=n, num_heads=1, head_dim=4, model_dim=4, num_val_emb=0))
        return [i for i, w in enumerate(model.layer_window) if w == "long"]
    assert long_layers(12) == [0, 4, 7, 11]  # record #26: L S S S L S | S L S S S L
    assert long_layers(4) == [0, 3] and long_layers(1) == [0]


def test_logit_soft_cap_is_30_sigmoid_of_z_over_7_5_sqrt_d():
    """modded-nanogpt's soft-cap: logits = 30 * sigmoid(z / (7.5 * sqrt(model_dim))) of the head's raw output z,
    so every logit lies in (0, 30) however large z grows."""
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=2, num_heads=2, head_dim=8, model_dim=16, max_seq_len=128))
    with torch.no_grad():
        model.lm_head.weight.normal_(0, 40.0)  # raw logits in the hundreds: far into the cap
    raw = []
    model.lm_head.register_forward_hook(lambda mod, args, out: raw.append(out.detach().float()))
    idx = torch.randint(0, 100, (1, 128))
    logits = model(idx, arch.build_attention_masks(idx, 99, 1, 1, False)).detach()
    z = raw[0]
    assert z.abs().max() > 300
    expected = 30 / (1 + torch.exp(-z / (7.5 * math.sqrt(16))))
    assert torch.allclose(logits, expected, atol=1e-5)
    assert 0 <= logits.min() and logits.max() <= 30 and logits.max() > 29.9  # saturates at the cap, never past it


def test_rotary_turns_half_the_head_dims_by_position():
    """Half-truncated RoPE (modded-nanogpt): head dim 8 = halves x1 = x[:4], x2 = x[4:]; pair i = (x1[i], x2[i])
    turns by angle t * f_i with f = (1, 1/1024, 0, 0): y1 = x1 cos + x2 sin, y2 = x2 cos - x1 sin. Pairs 2 and 3
    (dims 2, 3, 6, 7) never turn."""
    rotary = arch.Rotary(head_dim=8, max_seq_len=128)
    torch.manual_seed(0)
    x = torch.randn(1, 128, 3, 8)
    y = rotary(x)
    for t in (0, 1, 5, 127):
        for i, f in enumerate([1.0, 1 / 1024]):
            c, s = math.cos(t * f), math.sin(t * f)
            a, b = x[0, t, :, i], x[0, t, :, 4 + i]
            assert torch.allclose(y[0, t, :, i], a * c + b * s, atol=1e-5)
            assert torch.allclose(y[0, t, :, 4 + i], b * c - a * s, atol=1e-5)
    assert torch.equal(y[..., [2, 3, 6, 7]], x[..., [2, 3, 6, 7]])
    assert torch.allclose(y[0, 0], x[0, 0])  # position 0: no turn
    # attention scores depend on relative position only: q at 10, k at 3 scores as q at 50, k at 43
    q, k = torch.randn(8), torch.randn(8)
    at = lambda v, t: rotary(v.expand(1, 128, 1, 8).contiguous())[0, t, 0]  # noqa: E731
    assert torch.dot(at(q, 10), at(k, 3)) == pytest.approx(float(torch.dot(at(q, 50), at(k, 43))), abs=1e-5)


def test_qk_norm_makes_attention_blind_to_the_scale_of_q_and_k():
    """q and k are RMS-normalised per head before the dot product (QK-norm), so scaling their weights changes
    nothing, while scaling v scales the output."""
    torch.manual_seed(0)
    attn = arch.CausalSelfAttention(dim=16, num_heads=2, head_dim=8, max_seq_len=128)
    with torch.no_grad():
        attn.c_proj.weight.normal_(0, 0.3)  # zero-initialised: make the output visible
    x = torch.randn(2, 128, 16)
    mask = arch.build_attention_masks(torch.zeros(2, 128, dtype=torch.long), 1, 1, 1, False)["long"]
    with torch.no_grad():
        before = attn(x, None, mask)
        attn.qkv_w[0] *= 7.0
        attn.qkv_w[1] *= 3.0  # (a tiny scale would meet rms_norm's eps, amplified by the attention scale)
        after_qk = attn(x, None, mask)
        attn.qkv_w[2] *= 3.0
        after_v = attn(x, None, mask)
    assert before.abs().max() > 0.1
    assert torch.allclose(after_qk, before, atol=1e-5)
    assert torch.allclose(after_v, 3.0 * before, atol=1e-5)


@pytest.mark.parametrize("num_layers", [4, 5])
def test_unet_skips_and_x0_mixing_feed_each_block_what_the_design_says(num_layers):
    """U-net: the outputs of the first num_layers // 2 blocks are added, weighted, to the inputs of the last ones in
    reverse order (an odd middle block gets none). x0 mixing: each block starts from l0 * x + l1 * x0, x0 being
    the normalised embedding; with zero-initialised output projections a block returns exactly that."""
    torch.manual_seed(0)
    model = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=num_layers, num_heads=2, head_dim=8, model_dim=16,
                          num_val_emb=1, max_seq_len=128))
    lambdas = [(0.5 + 0.1 * i, 2.0 - 0.3 * i) for i in range(num_layers)]
    with torch.no_grad():
        model.skip_weights.copy_(torch.tensor([0.3, -0.7]))
        for block, (a, b) in zip(model.blocks, lambdas):
            block.lambdas.copy_(torch.tensor([a, b]))
    inputs, x0s, outputs = [], [], []
    for block in model.blocks:
        block.register_forward_pre_hook(lambda mod, args: inputs.append(args[0]) or x0s.append(args[1]))
        block.register_forward_hook(lambda mod, args, out: outputs.append(out))
    idx = torch.randint(0, 100, (1, 128))
    with torch.no_grad():
        model(idx, arch.build_attention_masks(idx, 99, 1, 1, False))
    x0 = F.rms_norm(model.embed(idx), (16,)).detach()
    for i in range(num_layers):
        assert torch.allclose(x0s[i], x0)
        a, b = lambdas[i]
        assert torch.allclose(outputs[i], a * inputs[i] + b * x0, atol=1e-6), i  # zero-init projections
    out = outputs
    if num_layers == 4:  # blocks 0, 1 → skips; block 2 gets 0.3 x out1, block 3 gets -0.7 x out0
        expected = [x0, out[0], out[1] + 0.3 * out[1], out[2] - 0.7 * out[0]]
    else:  # block 2 is the middle: no skip; block 3 gets 0.3 x out1, block 4 gets -0.7 x out0
        expected = [x0, out[0], out[1], out[2] + 0.3 * out[1], out[3] - 0.7 * out[0]]
    for i in range(num_layers):
        assert torch.allclose(inputs[i], expected[i], atol=1e-6), i


def test_newton_schulz_orthogonalises():
    torch.manual_seed(0)
    G = torch.randn(3, 32, 64)
    X = train_gpt.zeropower_via_newtonschulz5(G, steps=5)
    singular = torch.linalg.svdvals(X)
    assert X.shape == G.shape
    assert singular.min() > 0.5 and singular.max() < 1.3  # the quintic iteration's band around 1


def test_schedules():
    assert train_gpt.lr_multiplier(0, 100, 0.4) == 1.0
    assert train_gpt.lr_multiplier(59, 100, 0.4) == 1.0
    assert math.isclose(train_gpt.lr_multiplier(100, 100, 0.4), 0.1)
    assert train_gpt.muon_momentum(0) == 0.85 and math.isclose(train_gpt.muon_momentum(300), 0.95)
    assert train_gpt.window_blocks(0, 100, 1792) == (1, 1)
    assert train_gpt.window_blocks(100, 100, 1792) == (14, 7)


def test_lr_schedule_decays_linearly_to_a_tenth_over_the_cooldown():
    # modded-nanogpt's get_lr: 1 until step/steps reaches 1 - cooldown_frac, then w = (1 - x) / cooldown_frac and
    # lr = w + (1 - w) * 0.1. Worked out by hand for 100 steps, cooldown 0.4 (x = 0.6 ... 1.0):
    for step, expected in [(60, 1.0), (61, 0.9775), (70, 0.775), (80, 0.55), (90, 0.325), (99, 0.1225)]:
        assert train_gpt.lr_multiplier(step, 100, 0.4) == pytest.approx(expected, abs=1e-12), step
    # cooldown 1.0: linear from the first step; 0.0: constant until the end
    assert train_gpt.lr_multiplier(50, 100, 1.0) == pytest.approx(0.55)
    assert train_gpt.lr_multiplier(99, 100, 0.0) == 1.0
    # equal steps give equal decrements (linear, not curved)
    drops = [train_gpt.lr_multiplier(s, 100, 0.4) - train_gpt.lr_multiplier(s + 1, 100, 0.4) for s in range(60, 99)]
    assert max(drops) == pytest.approx(min(drops)) == pytest.approx(0.0225)


def test_window_schedule_grows_linearly_in_whole_blocks():
    # long window = ceil(14 * step / 100) blocks of 128 for a final 1792 (14 blocks), at least 1; short = half
    for step, expected in [(1, (1, 1)), (8, (2, 1)), (22, (4, 2)), (50, (7, 3)), (51, (8, 4)), (93, (14, 7)),
                           (92, (13, 6)), (99, (14, 7))]:
        assert train_gpt.window_blocks(step, 100, 1792) == expected, step
    assert [train_gpt.window_blocks(s, 20, 256)[0] for s in (0, 10, 11, 20)] == [1, 1, 2, 2]


def test_bits_per_byte_counts_special_tokens_as_zero_bytes(tiny):
    from gptlab.evals.bpb import bits_per_byte, token_byte_lengths
    from gptlab.tokenizer.format import load_tokenizer

    enc = load_tokenizer(tiny["tokenizer"])
    lengths = token_byte_lengths(enc, 640)
    assert lengths[enc.eot_token] == 0 and lengths[600] == 0  # special and padding ids
    assert lengths[65] == 1 and all(lengths[t] >= 2 for t in range(256, 512))
    text = "To be, or not to be"
    assert lengths[enc.encode_ordinary(text)].sum() == len(text.encode())
    assert bits_per_byte(math.log(2) * 38, 19) == pytest.approx(2.0)  # 38 bits over 19 bytes


def test_validation_builds_no_autograd_graph_and_counts_every_target_byte(tiny):
    """gptlab.evals.bpb.evaluate_val runs under no_grad (a graph kept alive by the all-reduced totals wasted memory
    and, on gloo, was freed by a worker thread at interpreter exit: a rare abort) and sums loss, tokens and bytes."""
    from gptlab.data.loader import ValidationSet
    from gptlab.data.selection import expand_shard_files
    from gptlab.core.distributed import DistContext
    from gptlab.evals.bpb import evaluate_val, token_byte_lengths
    from gptlab.tokenizer.format import load_tokenizer

    enc = load_tokenizer(tiny["tokenizer"])
    val_set = ValidationSet(expand_shard_files(tiny["val"]), 128, 6, 0, 1)
    grad_enabled, targets = [], []

    def model_fwd(x, masks, y):  # a stand-in model: 1 nat per target token
        grad_enabled.append(torch.is_grad_enabled())
        targets.append(y.clone())
        return torch.ones(y.numel(), requires_grad=True).sum()

    ctx = DistContext(0, 0, 1, torch.device("cpu"), None)
    byte_lengths = token_byte_lengths(enc, 640)
    dense = arch.GPT(arch.GPTConfig(vocab_size=640, num_layers=1, num_heads=1, model_dim=4, num_val_emb=0))  # masks only
    loss_fn = train_gpt.make_loss_fn(dense, model_fwd, enc.eot_token, (1, 1), False, contextlib.nullcontext)
    loss, bpb = evaluate_val(loss_fn, val_set, 4, byte_lengths, ctx)
    assert grad_enabled == [False, False]  # 6 rows in batches of 4
    all_targets = torch.cat([t.reshape(-1) for t in targets])
    assert all_targets.numel() == 6 * 128 and loss == pytest.approx(1.0)
    assert bpb == pytest.approx(all_targets.numel() / math.log(2) / float(byte_lengths[all_targets].sum()))


# ------------------------------------------------------------------------------------------------ full runs
def test_tiny_model_trains_and_writes_a_complete_run_folder(tiny, tmp_path):
    """A real run: the loss falls; config/metrics/log/results/code/checkpoint are complete and sane."""
    argv = tiny_args(tiny, tmp_path, train_steps=40, val_loss_every=20, save_model=True, hellaswag_limit=8,
                     hellaswag_every=15, hellaswag_path=HELLASWAG_VAL, sample_tokens=8)
    proc = run_script(["train_gpt.py"] + argv, check=True)
    run_dir = only_run_dir(tmp_path)
    assert os.path.basename(run_dir)[:15].replace("_", "").isdigit()
    losses = train_losses(run_dir)
    assert sorted(losses) == list(range(1, 41))
    assert np.mean([losses[s] for s in range(36, 41)]) < np.mean([losses[s] for s in range(1, 6)]) - 0.8
    vals = val_losses(run_dir)
    assert sorted(vals) == [0, 20, 40] and vals[40] < vals[0] - 0.5
    rows = records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
    with open(os.path.join(run_dir, records.METRICS_FILE)) as f:
        assert f.readline().strip().split(",") == records.METRICS_COLUMNS
    step_rows = [r for r in rows if r["train_loss"] is not None]
    assert all(r["tokens"] == r["step"] * 1024 and r["tokens_per_s"] > 0 and r["step_time_s"] > 0 for r in step_rows)
    assert all(r["val_loss"] is None and r["hellaswag_acc"] is None for r in step_rows)
    # the lr column: the row of step s holds the multiplier used for that update (computed at s - 1); by hand for
    # 40 steps and the default cooldown 0.4: 1.0 through step 25, then 0.1 + 0.9 * (40 - (s - 1)) / 16
    lr = {r["step"]: r["lr"] for r in step_rows}
    assert all(lr[s] == 1.0 for s in range(1, 26))
    for s, expected in [(26, 0.94375), (27, 0.8875), (29, 0.775), (33, 0.55), (37, 0.325), (40, 0.15625)]:
        assert lr[s] == pytest.approx(expected, abs=1e-6), s
    # model FLOPs per second: matmuls + the attention the masks allowed; no MFU without a known GPU peak
    assert all(r["tflops_per_gpu"] > 0 and r["mfu"] is None for r in step_rows)
    fastest = max(step_rows, key=lambda r: r["tokens_per_s"])
    assert fastest["tflops_per_gpu"] == max(r["tflops_per_gpu"] for r in step_rows)
    hs_rows = [r for r in rows if r["hellaswag_acc"] is not None]
    assert [r["step"] for r in hs_rows] == [15, 30, 40]  # its own schedule, independent of val_loss_every

    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        config = json.load(f)
    for key in ("world_size", "device", "gpu_name", "gpu_count", "n_params", "tokenizer_name",
                "tokenizer_ranks_sha256", "command", "git_commit", "versions", "start_time", "grad_acc_steps",
                "batch_size", "train_files", "seed"):
        assert key in config, key
    assert config["world_size"] == 1 and config["grad_acc_steps"] == 2 and config["device"] == "cpu"
    assert config["tokenizer_name"] == os.path.basename(tiny["tokenizer"])[:-4]
    # today's config has the committed baselines' settings keys and wording, so a quickstart run still joins
    # their seed group (gptlab.compare.seed_group_key)
    from gptlab.compare import seed_group_key

    with open(sorted(glob.glob(os.path.join(REPO, "experiments", "2*_Quickstart", records.CONFIG_FILE)))[0]) as f:
        baseline_config = json.load(f)
    assert json.loads(seed_group_key(config)).keys() == json.loads(seed_group_key(baseline_config)).keys()
    assert (config["lr_column"], config["timing"]) == (baseline_config["lr_column"], baseline_config["timing"])

    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "finished" and results["steps"] == 40 and results["tokens"] == 40 * 1024
    assert math.isclose(results["final_val_loss"], vals[40], rel_tol=1e-6)
    assert 0 < results["final_val_bpb"] < results["final_val_loss"] / math.log(2)  # > 1 byte per token
    assert results["hellaswag"]["n"] == 8
    for key in ("wall_time_s", "peak_mem_allocated_gb", "peak_mem_reserved_gb", "n_params", "gpu_name",
                "world_size", "tokenizer", "model_name", "seed"):
        assert key in results, key
    assert results["n_params"] == config["n_params"] > 0 and results["peak_mem_allocated_gb"] > 0
    assert 0 < results["train_time_s"] < results["wall_time_s"]
    assert results["tflops_per_gpu"] > 0 and results["mfu"] is None and config["gpu_bf16_peak_tflops"] is None
    assert min(r["tflops_per_gpu"] for r in step_rows) <= results["tflops_per_gpu"] <= fastest["tflops_per_gpu"]

    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    for needle in ("command:", "config:", "versions:", "hardware:", "parameters:", "step 40/40 train_loss",
                   "TFLOP/s/GPU", "peak memory (CPU: process max RSS", "speed after the first step:",
                   "(MFU: no bf16 peak known for this device)", "sample:", "hellaswag acc", "results:"):
        assert needle in log, needle

    code = os.path.join(run_dir, records.CODE_DIR)
    from gptlab.train.code_backup import rebuild_sources

    rebuilt = rebuild_sources(run_dir)  # research files whole; the rest from the commit + uncommitted.patch
    for rel in ("train_gpt.py", "model.py", "gptlab/data/loader.py", "gptlab/train/records.py", "requirements.txt"):
        with open(os.path.join(REPO, rel), "rb") as f:
            assert rebuilt[rel] == f.read(), rel
    assert os.path.isfile(os.path.join(code, "model.py")) and os.path.isfile(os.path.join(code, "train_gpt.py"))
    with open(os.path.join(code, "tokenizer_train_script.py")) as f:
        assert "def train_tiny_bpe" in f.read()

    ckpt_path = os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000040.pt")
    model, _, ckpt = model_source.load_model(ckpt_path)
    assert ckpt["step"] == 40 and ckpt["tokenizer"]["ranks_sha256"] == config["tokenizer_ranks_sha256"]
    assert not any(k.startswith("_orig_mod.") for k in ckpt["model"])
    assert len(ckpt["optimizers"]) == 2 and ckpt["dataloader"]["pos"] > 0
    # the final HellaSwag figures are those of these final weights, scored one ending at a time
    logits_fn, enc, _ = model_source.checkpoint_logits_fn(ckpt_path)
    acc, acc_norm = reference_hellaswag(logits_fn, enc, 8)
    assert (results["hellaswag"]["acc"], results["hellaswag"]["acc_norm"]) == (acc, acc_norm)
    assert "error" not in proc.stderr.lower()


def test_one_and_two_ranks_and_micro_batches_give_the_same_loss_curve(tiny, tmp_path):
    """1 rank x 1 micro-batch, 1 rank x 2 and 2 ranks x 1 take the same 1024-token steps, so their curves agree.
    Comparing all three catches a loss normalised per micro-batch instead of per step (1 x 2 and 2 x 1 alone
    would agree with each other). The first step's loss is known by hand: the zero-initialised head gives
    uniform logits over the 640 padded ids (513 rounded up to a multiple of 128), ln 640."""
    flags = dict(train_steps=12, val_loss_every=6)
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "one", device_batch_size=1024, **flags), check=True)
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "acc", **flags), check=True)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
               + tiny_args(tiny, tmp_path / "two", **flags), check=True)
    dirs = {name: only_run_dir(tmp_path / name) for name in ("one", "acc", "two")}
    layouts = {}
    for name, run_dir in dirs.items():
        with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
            config = json.load(f)
        layouts[name] = (config["world_size"], config["grad_acc_steps"], config["device_batch_size"])
    assert layouts == {"one": (1, 1, 1024), "acc": (1, 2, 512), "two": (2, 1, 512)}
    assert tiny["n_vocab"] == 513
    curves = {name: train_losses(run_dir) for name, run_dir in dirs.items()}
    for name, losses in curves.items():
        assert sorted(losses) == list(range(1, 13)), name
        assert losses[1] == pytest.approx(math.log(640), rel=1e-6), name
        for step in losses:
            assert abs(losses[step] - curves["one"][step]) <= 1e-4 * curves["one"][step], (name, step)
    vals = {name: val_losses(run_dir) for name, run_dir in dirs.items()}
    for name, losses in vals.items():
        assert sorted(losses) == [0, 6, 12] and losses[0] == pytest.approx(math.log(640), rel=1e-6), name
        for step in losses:
            assert abs(losses[step] - vals["one"][step]) <= 1e-4 * vals["one"][step], (name, step)
    assert len(glob.glob(str(tmp_path / "two" / "*"))) == 1  # rank 1 writes no folder of its own


def test_compiled_bfloat16_two_rank_run_follows_the_eager_float32_curve(tiny, tmp_path):
    """The GPU recipe's pieces that run on CPU: torch.compile of the whole model, bfloat16 autocast, and the
    gradient hooks firing after a compiled backward on 2 ranks (gloo). FlexAttention itself needs CUDA."""
    flags = dict(train_steps=6, val_loss_every=0)
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "eager", **flags), check=True)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"]
               + tiny_args(tiny, tmp_path / "compiled", compile=True, dtype="bfloat16", **flags), check=True)
    compiled = only_run_dir(tmp_path / "compiled")
    with open(os.path.join(compiled, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert config["compile"] is True and config["dtype"] == "bfloat16" and config["world_size"] == 2
    a, b = train_losses(only_run_dir(tmp_path / "eager")), train_losses(compiled)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:  # bfloat16 matmuls: close, not equal
        assert abs(a[step] - b[step]) <= 0.02 * a[step], (step, a[step], b[step])
    assert b[6] < b[1]


def test_simulated_two_node_launch_trains(tiny, tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    argv = tiny_args(tiny, tmp_path, train_steps=6, val_loss_every=0)
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={i}",
                               "--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                               "--rdzv_id=gptlab-test", "train_gpt.py"] + argv,
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        assert json.load(f)["world_size"] == 2
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        assert json.load(f)["status"] == "finished"
    assert sorted(train_losses(run_dir)) == list(range(1, 7))


def test_no_process_group_thread_outlives_main(tiny, tmp_path):
    """A group that destroy_process_group could not free kept its gloo threads into interpreter shutdown, where
    ranks sometimes died with SIGABRT after a finished run (torch.distributed.nn, imported lazily once a group
    existed, holds group.WORLD in ten default arguments; gptlab.core.distributed imports it first)."""
    out = str(tmp_path / "threads.json")
    argv = tiny_args(tiny, tmp_path, train_steps=2, val_loss_every=0)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                "tests/helpers/threads_after_main.py", out, "--"] + argv, check=True)
    for rank in range(2):
        with open(f"{out}.rank{rank}") as f:
            seen = json.load(f)
        assert any("gloo" in name for name in seen["during"]), seen  # the probe sees a live group's threads
        assert seen["after"] == [], (rank, seen)


def test_resume_reproduces_the_uninterrupted_curve(tiny, tmp_path):
    argv = tiny_args(tiny, tmp_path / "straight", train_steps=10, val_loss_every=5, checkpoint_every=5)
    run_script(["train_gpt.py"] + argv, check=True)
    straight = only_run_dir(tmp_path / "straight")
    ckpt = os.path.join(straight, records.CHECKPOINT_DIR, "step_000005.pt")
    assert os.path.isfile(ckpt) and os.path.isfile(os.path.join(straight, records.CHECKPOINT_DIR, "step_000010.pt"))
    argv = tiny_args(tiny, tmp_path / "resumed", train_steps=10, val_loss_every=5, resume=ckpt)
    run_script(["train_gpt.py"] + argv, check=True)
    resumed = only_run_dir(tmp_path / "resumed")
    a, b = train_losses(straight), train_losses(resumed)
    assert sorted(b) == [6, 7, 8, 9, 10]
    for step in b:
        assert abs(a[step] - b[step]) <= 1e-6 * abs(a[step]), (step, a[step], b[step])
    va, vb = val_losses(straight), val_losses(resumed)
    assert abs(va[10] - vb[10]) <= 1e-6 * va[10]
    with open(os.path.join(resumed, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert config["resume_step"] == 5 and config["resumed_from"] == ckpt
    from gptlab.compare import load_run
    assert any(n.startswith(f"resumed at step 5 from {ckpt}") for n in load_run(resumed).notes)
    # --resume alone: every other setting comes from the checkpoint
    run_script(["train_gpt.py", "--resume", ckpt, "--experiments_dir", str(tmp_path / "bare")], check=True)
    bare = only_run_dir(tmp_path / "bare")
    d = train_losses(bare)
    assert sorted(d) == [6, 7, 8, 9, 10] and all(abs(a[k] - d[k]) <= 1e-6 * abs(a[k]) for k in d)
    with open(os.path.join(bare, records.CONFIG_FILE)) as f:
        config = json.load(f)
    assert {"tokenizer", "train_files", "num_layers", "model_dim", "train_steps"} <= set(config["from_checkpoint"])
    assert config["model_dim"] == 64 and config["from_checkpoint"].count("experiments_dir") == 0
    with open(os.path.join(bare, records.LOG_FILE)) as f:
        assert f"resuming {ckpt} at step 5 with its settings: " in f.read()
    # the checkpoint holds the full optimizer state and a world-size-free data position: resume on 2 ranks too
    argv = tiny_args(tiny, tmp_path / "resumed2", train_steps=10, val_loss_every=5, resume=ckpt)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"] + argv,
               check=True)
    c = train_losses(only_run_dir(tmp_path / "resumed2"))
    assert sorted(c) == [6, 7, 8, 9, 10]
    for step in c:
        assert abs(a[step] - c[step]) <= 1e-5 * abs(a[step]), (step, a[step], c[step])


def test_two_rank_checkpoint_resumes_on_one_rank_with_accumulation_and_uneven_muon_chunks(tiny, tmp_path):
    """Muon's momentum lives on each matrix's owner rank; a 2-rank checkpoint must still hold all of it. 3 layers
    give an odd number of matrices per shape (a chunk with an idle rank), 2048 tokens/step gives 2 micro-batches
    per rank, so the gradient hooks fire only on the last one."""
    flags = dict(num_layers=3, batch_size=2048, train_steps=8, val_loss_every=0, checkpoint_every=4)
    argv = tiny_args(tiny, tmp_path / "two", **flags)
    run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()), "train_gpt.py"] + argv,
               check=True)
    two = only_run_dir(tmp_path / "two")
    with open(os.path.join(two, records.CONFIG_FILE)) as f:
        assert json.load(f)["grad_acc_steps"] == 2
    ckpt = checkpointing.load_checkpoint(os.path.join(two, records.CHECKPOINT_DIR, "step_000004.pt"))
    muon_state = ckpt["optimizers"][1]["state"]
    assert len(muon_state) == 3 * 4 and all(float(s["momentum_buffer"].abs().sum()) > 0 for s in muon_state.values())
    argv = tiny_args(tiny, tmp_path / "one", resume=os.path.join(two, records.CHECKPOINT_DIR, "step_000004.pt"),
                     **flags)
    run_script(["train_gpt.py"] + argv, check=True)
    a, b = train_losses(two), train_losses(only_run_dir(tmp_path / "one"))
    assert sorted(b) == [5, 6, 7, 8]
    for step in b:
        assert abs(a[step] - b[step]) <= 1e-5 * abs(a[step]), (step, a[step], b[step])


def test_a_checkpoint_scores_on_hellaswag_through_checkpoint_logits_fn(tiny, tmp_path):
    from gptlab.evals.hellaswag import evaluate_hellaswag

    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=3, val_loss_every=0, save_model=True),
               check=True)
    ckpt_path = os.path.join(only_run_dir(tmp_path), records.CHECKPOINT_DIR, "step_000003.pt")
    logits_fn, enc, ckpt = model_source.checkpoint_logits_fn(ckpt_path)
    assert enc.n_vocab == tiny["n_vocab"] and ckpt["step"] == 3
    tokens = torch.tensor([enc.encode_ordinary("The quick brown fox jumps over the lazy dog. " * 6)])
    logits = logits_fn(tokens)
    assert logits.shape == (1, tokens.shape[1], enc.n_vocab) and torch.isfinite(logits).all()
    assert torch.allclose(logits_fn(tokens[:, :50]), logits[:, :50], atol=1e-5)  # padding never leaks backwards
    result = evaluate_hellaswag(logits_fn, enc, HELLASWAG_VAL, limit=8, progress=False)
    assert result["n"] == 8
    assert (result["acc"], result["acc_norm"]) == reference_hellaswag(logits_fn, enc, 8)


def test_nan_loss_stops_the_run_and_keeps_the_good_checkpoint(tiny, tmp_path):
    """Weights that turn NaN (here: planted in a checkpoint) stop training with a message and a failed result."""
    good = tmp_path / "good"
    run_script(["train_gpt.py"] + tiny_args(tiny, good, train_steps=4, val_loss_every=0, save_model=True), check=True)
    good_ckpt = os.path.join(only_run_dir(good), records.CHECKPOINT_DIR, "step_000004.pt")
    ckpt = checkpointing.load_checkpoint(good_ckpt)
    ckpt["model"]["embed.weight"][5:50] = float("nan")
    bad_ckpt = str(tmp_path / "poisoned.pt")
    checkpointing.save_checkpoint(bad_ckpt, model_state=ckpt["model"], model_config=ckpt["model_config"], step=4,
                        args=ckpt["args"], tokenizer=ckpt["tokenizer"], optimizer_states=ckpt["optimizers"],
                        dataloader_state=ckpt["dataloader"], rng_states=ckpt["rng"], extra=ckpt["extra"],
                        model_source=ckpt["model_source"])
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "bad", train_steps=8, val_loss_every=0,
                                                   checkpoint_every=1, resume=bad_ckpt))
    assert proc.returncode == 2
    assert "training loss became nan at step 5" in proc.stderr and "Traceback" not in proc.stderr
    run_dir = only_run_dir(tmp_path / "bad")
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "failed" and "nan" in results["error"]
    assert not glob.glob(os.path.join(run_dir, records.CHECKPOINT_DIR, "*.pt"))  # nothing written after the NaN
    assert os.path.isfile(good_ckpt)


# ------------------------------------------------------------------------------------------------ bad input
def run_main_expecting(tiny, tmp_path, message_parts, **overrides):
    """In-process run that must fail with a UserError naming message_parts, before creating any run folder."""
    with pytest.raises(UserError) as info:
        train_gpt.main(tiny_args(tiny, tmp_path / "exps", **overrides))
    for part in message_parts:
        assert part in str(info.value), str(info.value)
    assert not glob.glob(str(tmp_path / "exps" / "*"))
    return str(info.value)


def test_vocab_size_smaller_than_the_tokenizer_names_the_right_value(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["--vocab_size 500", f"--vocab_size {tiny['n_vocab']}"], vocab_size=500)


def test_missing_and_broken_shards_are_named(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["nothing_here_*.bin"], train_files=str(tmp_path / "nothing_here_*.bin"))
    broken = tmp_path / "train_000001.bin"
    with open(glob.glob(tiny["train"])[0], "rb") as f:
        broken.write_bytes(f.read()[:5000])  # truncated copy
    run_main_expecting(tiny, tmp_path, [str(broken), "truncated"], train_files=str(broken))


def test_unreadable_shard_is_named(tiny, tmp_path):
    with open(glob.glob(tiny["train"])[0], "rb") as f:
        data = f.read()
    locked = tmp_path / "train_000001.bin"
    locked.write_bytes(data)
    locked.chmod(0)
    unreadable_file(tmp_path / "probe.txt")  # skips where root cannot give up reading everything
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "exps", train_files=str(locked)))
    assert proc.returncode == 2 and str(locked) in proc.stderr and "not readable" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not glob.glob(str(tmp_path / "exps" / "*"))


def test_default_shard_folder_is_found_by_the_manifest_not_just_the_name(tmp_path, monkeypatch):
    from gptlab.data import shards

    monkeypatch.chdir(tmp_path)
    for folder, tok in [("local_docs_qs_v300", "qs_v300"), ("local_docs_a_qs_v300", "a_qs_v300")]:
        os.makedirs(os.path.join("data", folder))
        with open(os.path.join("data", folder, shards.manifest_filename(0, 1)), "w") as f:
            json.dump({"format": shards.MANIFEST_FORMAT, "tokenizer": {"name": tok}}, f)
    # "*_qs_v300" matches both folders by name; the manifests pick ours
    assert default_shard_folder("qs_v300") == os.path.join("data", "local_docs_qs_v300")
    os.makedirs(os.path.join("data", "other_qs_v300"))  # a second folder of the same tokenizer: ambiguous
    with open(os.path.join("data", "other_qs_v300", shards.manifest_filename(0, 1)), "w") as f:
        json.dump({"format": shards.MANIFEST_FORMAT, "tokenizer": {"name": "qs_v300"}}, f)
    with pytest.raises(UserError, match="ambiguous"):
        default_shard_folder("qs_v300")


def test_train_files_overlapping_the_validation_shards_are_refused(tiny, tmp_path):
    everything = os.path.join(tiny["dir"], "*.bin")  # the natural glob also matches val_000000.bin
    run_main_expecting(tiny, tmp_path, ["share 1 shard", "val_000000.bin", "train_*.bin"], train_files=everything)


def test_a_damaged_hellaswag_file_fails_before_training(tiny, tmp_path):
    damaged = tmp_path / "hellaswag_val.jsonl"
    with open(HELLASWAG_VAL, "rb") as f:
        damaged.write_bytes(f.read(50_000))  # cut mid-line
    run_main_expecting(tiny, tmp_path, [str(damaged), "not valid JSON", "download_hellaswag.py"],
                       hellaswag_path=str(damaged), hellaswag_limit=None)


def test_shards_from_a_different_tokenizer_are_refused(tiny, tmp_path):
    shard_dir = tmp_path / "other"
    shard_dir.mkdir()
    for path in glob.glob(tiny["val"]):
        with open(path, "rb") as src, open(shard_dir / os.path.basename(path), "wb") as dst:
            dst.write(src.read())
    with open(os.path.join(tiny["dir"], "manifest.json")) as f:
        manifest = json.load(f)
    manifest["tokenizer"] = {"name": "other", "ranks_sha256": "ab" * 32}
    manifest["shards"] = [s for s in manifest["shards"] if s["split"] == "val"]
    (shard_dir / "manifest.json").write_text(json.dumps(manifest))
    run_main_expecting(tiny, tmp_path, ["--val_files", str(shard_dir), "made with tokenizer 'other'"],
                       val_files=str(shard_dir / "val_*.bin"))
    # no manifest, but ids beyond the vocabulary
    write_shard(str(tmp_path / "big_ids.bin"), np.arange(1000, 5000) % 60000)
    run_main_expecting(tiny, tmp_path, ["big_ids.bin", "different tokenizer"],
                       train_files=str(tmp_path / "big_ids.bin"))


def test_manifests_of_split_jobs_are_checked_with_the_package_reader(tiny, tmp_path):
    """Folders written by split download jobs hold only manifest.rank{r}.json parts: accepted when they record our
    tokenizer (an unfinished part is reported), refused when they record another, via gptlab.data.shards.check_manifest."""
    from gptlab.data import shards
    from gptlab.tokenizer.format import ranks_sha256, read_tokenizer_file

    tok_hash = ranks_sha256(read_tokenizer_file(tiny["tokenizer"])["mergeable_ranks"])
    with open(os.path.join(tiny["dir"], "manifest.json")) as f:
        whole = json.load(f)
    folder = tmp_path / "split"
    folder.mkdir()
    for rank in range(2):
        names = [s["name"] for s in whole["shards"]][rank::2]
        for name in names:
            with open(os.path.join(tiny["dir"], name), "rb") as src:
                (folder / name).write_bytes(src.read())
        shards.write_manifest(str(folder), {**whole, "rank": rank, "world_size": 2, "complete": rank == 0,
                                            "shards": [s for s in whole["shards"] if s["name"] in names]})
    assert sorted(os.listdir(folder)) == ["manifest.rank0.json", "manifest.rank1.json", "train_000001.bin",
                                          "train_000002.bin", "val_000000.bin"]
    paths = sorted(glob.glob(str(folder / "train_*.bin")))
    assert check_shards_match_tokenizer(paths, tok_hash, tiny["n_vocab"], "--train_files") == [str(folder)]
    with pytest.raises(UserError, match="--train_files: shards in .*split were made with tokenizer"):
        check_shards_match_tokenizer(paths, "cd" * 32, tiny["n_vocab"], "--train_files")
    (folder / "val_000000.bin").write_bytes(b"")  # a listed shard that is broken is named
    with pytest.raises(UserError, match="val_000000.bin"):
        check_shards_match_tokenizer(paths, tok_hash, tiny["n_vocab"], "--train_files")


@pytest.mark.parametrize("overrides,parts", [
    ({"model_dim": 66, "num_heads": 4}, ["--model_dim 66", "--num_heads 4"]),
    ({"model_dim": 64, "num_heads": 2, "head_dim": 30}, ["head_dim 30", "multiple of 4"]),
    ({"train_seq_len": 100}, ["--train_seq_len 100", "multiple of 128", "use 128"]),
    ({"val_seq_len": 200}, ["--val_seq_len 200", "multiple of 128"]),
    ({"batch_size": 1000}, ["--batch_size 1000", "multiple of --train_seq_len"]),
    ({"num_val_emb": 9}, ["--num_val_emb 9"]),
    ({"batch_size": 2 ** 22}, ["fewer than one global batch", "--batch_size"]),
    ({"val_steps": 100000}, ["validation needs", "--val_steps"]),
    ({"tokenizer": "no_such_tokenizer.pkl"}, ["no_such_tokenizer.pkl", "not found"]),
    ({"attention": "flex"}, ["--attention flex", "CUDA"]),
])
def test_bad_flags_fail_before_training(tiny, tmp_path, overrides, parts):
    run_main_expecting(tiny, tmp_path, parts, **overrides)


def test_device_flags_are_checked_before_any_gpu_is_touched():
    from gptlab.core.distributed import resolve_device

    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES"):  # every rank of the node on one GPU
        resolve_device("cuda:1", local_rank=0, local_world_size=2)
    with pytest.raises(UserError, match="not one of auto, cpu, cuda"):
        resolve_device("gpu")
    assert resolve_device("cpu", local_rank=1, local_world_size=2).type == "cpu"


def test_more_ranks_than_data(tiny):
    args = train_gpt.build_parser().parse_args(tiny_args(tiny, "/tmp/unused", batch_size=128, device_batch_size=128))
    with pytest.raises(UserError, match="fewer than one row of 128 per rank for 2 ranks"):
        resolve_config(args, world_size=2, device=torch.device("cpu"), model_module=arch)
    from gptlab.data.loader import ValidationSet
    with pytest.raises(UserError, match="every rank needs at least one"):
        ValidationSet(glob.glob(tiny["val"]), 128, n_rows=2, rank=0, world_size=4)


def test_cli_bad_input_is_one_clean_line(tiny, tmp_path):
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, num_heads=3))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: --model_dim 64 is not divisible by --num_heads 3")
    assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)


def test_missing_hellaswag_file_warns_how_to_get_it_and_training_finishes(tiny, tmp_path):
    """The default file missing (a folder without data/hellaswag/) only warns; see the next test for a named one."""
    from gptlab.data.hellaswag import DEFAULT_PATH as missing

    (tmp_path / "elsewhere").mkdir()
    proc = run_script([os.path.join(REPO, "train_gpt.py")] + tiny_args(
        tiny, tmp_path / "exps", train_steps=2, val_loss_every=0, hellaswag_limit=4, hellaswag_every=1),
        cwd=str(tmp_path / "elsewhere"), check=True)
    run_dir = only_run_dir(tmp_path / "exps")
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    for shown in (proc.stdout, log):  # the trainer's messages go to stdout and the run's log
        assert f"warning: HellaSwag file {missing} not found" in shown and "python download_hellaswag.py" in shown
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "finished" and results["steps"] == 2 and results["hellaswag"] is None
    assert results["final_val_loss"] > 0
    assert all(r["hellaswag_acc"] is None for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE)))


def test_a_hellaswag_file_asked_for_by_name_must_exist(tiny, tmp_path):
    missing = str(tmp_path / "nonexistent.jsonl")
    run_main_expecting(tiny, tmp_path, [f"--hellaswag_path {missing} does not exist", "leave the flag out"],
                       hellaswag_limit=4, hellaswag_path=missing)


def test_bad_numbers_fail_before_a_folder_exists(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["--lr_scale -1.0 must be a positive number"], lr_scale=-1)
    run_main_expecting(tiny, tmp_path, ["--lr_scale 0.0 must be a positive number"], lr_scale=0)
    run_main_expecting(tiny, tmp_path, ["--lr_scale nan must be a positive number"], lr_scale="nan")
    run_main_expecting(tiny, tmp_path, ["--seed 99999999999999999999 must be between 0 and 2**63 - 1"],
                       seed=99999999999999999999)
    # 10^8 rows x 64 x (embedding + 2 value embeddings + head) = 2.56e10 parameters, ~381 GiB with optimizer state
    run_main_expecting(tiny, tmp_path, ["the model has 25,6", "parameters", "lower --vocab_size"], vocab_size=10**8)
    run_main_expecting(tiny, tmp_path, ["--vocab_size 100000000000 exceeds 2147483646"], vocab_size=10**11)


def test_cli_asking_for_more_validation_than_the_val_shards_hold_fails_before_training(tiny, tmp_path):
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, val_steps=100000, val_batch_size=256))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("error: validation needs 200000 rows of 128 tokens"), proc.stderr
    assert "lower --val_steps or --val_batch_size" in error
    assert not os.listdir(tmp_path), "nothing is created before the check"


def test_resume_with_a_different_architecture_is_refused(tiny, tmp_path):
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    run_main_expecting(tiny, tmp_path, ["--num_layers 4 (checkpoint) vs 3"], num_layers=3, resume=ckpt)
    run_main_expecting(tiny, tmp_path, ["not a gptlab checkpoint"], resume=tiny["tokenizer"])


# ------------------------------------------------------------------------------------------------ benchmark
def test_flop_count_is_honest_about_the_mask():
    """arch.training_flops (the log's MFU and bench_train.py's): matmuls, plus attention for allowed pairs only."""
    model = arch.GPT(arch.GPTConfig(vocab_size=256, num_layers=4, num_heads=2, head_dim=16, model_dim=32, num_val_emb=1,
                          max_seq_len=256))
    assert model.layer_window == ["long", "short", "short", "long"]
    idx = torch.randint(0, 255, (1, 256))
    idx[0, 0] = 255
    pairs = {"long": arch.attention_pairs(idx, 255, 2), "short": arch.attention_pairs(idx, 255, 1)}
    matmul, attn = arch.training_flops(model, 256, pairs)
    n_matmul = 4 * (3 * 32 * 32 + 32 * 32 + 2 * 32 * 128) + 32 * 256  # qkv, proj, MLP per layer; lm_head
    assert matmul == 6 * 256 * n_matmul
    causal, first_block_only = 256 * 257 // 2, 2 * 128 * 129 // 2  # the short window: each query's own block
    assert attn == 3 * 4 * 16 * 2 * (2 * causal + 2 * first_block_only)
    idx[0, 128] = 255  # two documents of 128: the second one's queries lose the first one's keys
    pairs = {"long": arch.attention_pairs(idx, 255, 2), "short": arch.attention_pairs(idx, 255, 1)}
    assert arch.training_flops(model, 256, pairs)[1] == 3 * 4 * 16 * 2 * 4 * first_block_only


def test_bench_runs_on_cpu(tmp_path):
    out = tmp_path / "bench.json"
    run_script(["bench/bench_train.py", "--device", "cpu", "--num_layers", "2", "--model_dim", "64", "--num_heads", "2",
                "--seq_len", "128", "--device_batch_size", "256", "--steps", "1", "--warmup", "1",
                "--peak_tflops", "1.0", "--out", str(out)], check=True)
    report = json.loads(out.read_text())
    (r,) = report["results"]
    assert report["device"] == "cpu" and r["compiled"] is False and r["tokens_per_s"] > 0
    assert math.isclose(r["mfu"], r["achieved_tflops"] / 1.0) and 0 < r["attention_flops"] < r["flops_per_step"]
    assert r["peak_mem_allocated_gb"] > 0 and (r["grad_acc_steps"], r["device_batch_size"]) == (2, 256)
    assert r["model_only"]["tokens_per_s"] > 0 and r["model_only"]["tokens"] == 256  # the model alone: one micro-batch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups")
def test_ctrl_c_records_an_interrupted_run_and_names_the_checkpoint_to_resume(tiny, tmp_path):
    import signal
    import time

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    argv = tiny_args(tiny, tmp_path, train_steps=5000, val_loss_every=0, checkpoint_every=3)
    proc = subprocess.Popen([sys.executable, "train_gpt.py"] + argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        dirs = glob.glob(str(tmp_path / "*_tiny"))
        if dirs and glob.glob(os.path.join(dirs[0], records.CHECKPOINT_DIR, "step_*.pt")):
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "interrupted" and results["steps"] >= 3
    assert results["checkpoint"].endswith(".pt") and os.path.isfile(results["checkpoint"])
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    assert f"run interrupted (Ctrl-C) after step {results['steps']}; resume with --resume " in log
    assert "Traceback" not in err and "\ninterrupted" in err
    from gptlab.compare import load_run
    assert load_run(run_dir).status == "interrupted"


# ------------------------------------------------------------------------------------------------ promises, in process
def test_mfu_is_measured_against_the_known_peak_of_the_gpu(tiny, tmp_path, monkeypatch):
    """On a GPU whose dense bf16 peak is known, every step's MFU is its TFLOP/s over that peak (here the CPU
    run is told it is an H100 SXM: 989.4 TFLOP/s by NVIDIA's datasheet)."""
    real = environment.hardware_info

    def h100(device):
        info = real(device)
        info.update(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=1,
                    gpu_bf16_peak_tflops=environment.gpu_bf16_peak_tflops("NVIDIA H100 80GB HBM3"))
        return info

    monkeypatch.setattr(environment, "hardware_info", h100)
    results = train_gpt.main(tiny_args(tiny, tmp_path, train_steps=3, val_loss_every=0))
    run_dir = only_run_dir(tmp_path)
    rows = [r for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE)) if r["train_loss"] is not None]
    assert len(rows) == 3
    for r in rows:
        assert r["mfu"] == pytest.approx(r["tflops_per_gpu"] / 989.4, rel=1e-6)
    assert results["mfu"] == pytest.approx(results["tflops_per_gpu"] / 989.4, rel=1e-9)
    with open(os.path.join(run_dir, records.CONFIG_FILE)) as f:
        assert json.load(f)["gpu_bf16_peak_tflops"] == 989.4
    with open(os.path.join(run_dir, records.LOG_FILE)) as f:
        log = f.read()
    assert f"MFU {100 * results['mfu']:.1f}% of the 989.4 TFLOP/s bf16 peak" in log
    assert " MFU " in [line for line in log.splitlines() if line.startswith("step 3/3 train_loss")][0]


def test_cuda_out_of_memory_ends_with_advice_and_a_failed_result(tiny, tmp_path, monkeypatch):
    """The OOM path, reached on CPU: the training loop raising CUDA's OutOfMemoryError (as a too-large micro-batch
    does on a GPU) becomes one error line suggesting smaller batches, and results.json records the failure."""
    def oom(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(train_gpt, "make_train_step", lambda *args, **kwargs: oom)
    with pytest.raises(UserError) as info:
        train_gpt.main(tiny_args(tiny, tmp_path))
    message = str(info.value)
    assert message.startswith("CUDA out of memory (CUDA out of memory. Tried to allocate 20.00 GiB)")
    assert "lower --device_batch_size" in message and "--train_seq_len" in message
    with open(os.path.join(only_run_dir(tmp_path), records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "failed" and "OutOfMemoryError" in results["error"]


def test_the_final_checkpoint_is_written_before_the_final_hellaswag(tiny, tmp_path, monkeypatch):
    """If the final HellaSwag fails, the final weights are already safe on disk."""
    def broken_hellaswag(*args, **kwargs):
        raise RuntimeError("HellaSwag blew up")

    monkeypatch.setattr(train_gpt, "evaluate_hellaswag_in_run", broken_hellaswag)
    with pytest.raises(RuntimeError, match="HellaSwag blew up"):
        train_gpt.main(tiny_args(tiny, tmp_path, train_steps=2, val_loss_every=0, save_model=True))
    run_dir = only_run_dir(tmp_path)
    ckpt = checkpointing.load_checkpoint(os.path.join(run_dir, records.CHECKPOINT_DIR, "step_000002.pt"))
    assert ckpt["step"] == 2
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        assert json.load(f)["status"] == "failed"


def test_resume_takes_the_checkpoint_settings_but_any_flag_given_again_wins(tiny, tmp_path, monkeypatch):
    """Only the flags on the command line override the checkpoint's, even when given at their default value
    (--seed 0 below) or as --flag=value."""
    saved = vars(train_gpt.build_parser().parse_args(tiny_args(tiny, tmp_path / "exps", seed=3, lr_scale=0.5,
                                                                train_steps=10, model_dim=64)))
    ckpt = checkpointing.save_checkpoint(str(tmp_path / "step_000005.pt"), model_state={}, model_config={}, step=5,
                               args=saved)
    seen = {}
    monkeypatch.setattr(train_gpt, "train", lambda args, ctx, ckpt=None: seen.setdefault("args", args))
    train_gpt.main(["--resume", ckpt, "--seed", "0", "--train_steps=12"])
    args = seen["args"]
    assert (args.seed, args.train_steps) == (0, 12)  # given again: these win, 0 being the default too
    assert (args.lr_scale, args.model_dim, args.tokenizer) == (0.5, 64, tiny["tokenizer"])  # from the checkpoint
    assert {"lr_scale", "model_dim", "tokenizer", "train_files"} <= set(args.from_checkpoint)
    assert not {"seed", "train_steps"} & set(args.from_checkpoint)


def test_hellaswag_defaults_to_all_10042_validation_rows(tiny, monkeypatch):
    """--hellaswag_limit defaults to every row of the file: 10042, the published size of the validation set. The
    scoring itself is tested in test_hellaswag.py; here a stand-in scorer picks ending 0 of every example it is
    given, so acc is the share of label 0 in the whole set: 2515 / 10042 (rowanz/hellaswag's label counts)."""
    from gptlab.core.distributed import DistContext
    from gptlab.evals import hellaswag
    from gptlab.tokenizer.format import load_tokenizer

    cfg = train_gpt.build_parser().parse_args(["--hellaswag_path", HELLASWAG_VAL, "--vocab_size", "513"])
    assert cfg.hellaswag_limit is None
    monkeypatch.setattr(hellaswag, "score_examples", lambda model_fn, encoding, examples, **kw: [
        {"label": ex["label"], "pred": 0, "pred_norm": 0} for ex in examples])
    ctx = DistContext(0, 0, 1, torch.device("cpu"), None)
    result = hellaswag.evaluate_hellaswag_in_run(None, load_tokenizer(tiny["tokenizer"]), cfg.hellaswag_path,
                                                 limit=cfg.hellaswag_limit, padded_vocab=640, ctx=ctx, log=print)
    assert result["n"] == 10042 and result["acc"] == result["acc_norm"] == 2515 / 10042


def test_a_hung_rank_makes_the_others_fail_within_the_collective_timeout(tiny, tmp_path):
    """Rank 1 stops answering at step 3 (tests/helpers/hung_rank_train.py); rank 0 must give up on the next
    collective after GPTLAB_DIST_TIMEOUT_S (5 s here), record the failure, and torchrun must end the group."""
    import time

    start = time.monotonic()
    proc = run_script(["torchrun", "--nproc_per_node=2", "--master_port", str(free_port()),
                       "tests/helpers/hung_rank_train.py"] + tiny_args(tiny, tmp_path, train_steps=50,
                                                                        val_loss_every=0, log_every=1),
                      timeout=300, env_extra={"GPTLAB_DIST_TIMEOUT_S": "5", "GPTLAB_TEST_HANG_RANK": "1",
                                              "GPTLAB_TEST_HANG_STEP": "2"})
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert elapsed < 120, elapsed  # not the default 600 s
    root_cause = proc.stderr[proc.stderr.index("Root Cause"):]
    assert "rank      : 0 (local_rank: 0)" in root_cause, proc.stderr[-3000:]  # rank 0 gave up first
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    # gloo says "Timed out waiting 5000ms" or "Application timeout caused pair closure", by where rank 0 waits
    assert results["status"] == "failed" and re.search("timed? ?out", results["error"].lower()), results["error"]
    assert sorted(train_losses(run_dir)) == [1, 2]  # steps 1 and 2 done, step 3 never completed


# ------------------------------------------------------------------------------------------------ faults
def test_a_damaged_checkpoint_is_refused_by_its_checksum(tiny, tmp_path):
    """Eight zero bytes written into a checkpoint's tensor data (its zip structure intact) must not resume."""
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    good = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    data = bytearray(open(good, "rb").read())
    assert checkpointing.load_checkpoint(good)["step"] == 2 and len(data) > 3_000_100
    data[3_000_000:3_000_008] = bytes(8)
    flipped = tmp_path / "flip.pt"
    flipped.write_bytes(bytes(data))
    proc = run_script(["train_gpt.py", "--resume", str(flipped), "--experiments_dir", str(tmp_path / "b")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"error: checkpoint {flipped} is damaged" in proc.stderr and not (tmp_path / "b").exists()


def test_a_full_disk_while_checkpointing_is_one_error_and_a_failed_run(tiny, tmp_path):
    """Files may not grow past 2 MB (RLIMIT_FSIZE, with SIGXFSZ ignored so writes fail as on a full disk): the
    logs fit, a checkpoint (~6 MB) does not."""
    launcher = ("import resource, runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20)); sys.argv = sys.argv[1:]; "
                "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = run_script(["-c", launcher, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=4, val_loss_every=0,
                                                                   checkpoint_every=2))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "error: could not write checkpoint" in proc.stderr and "step_000002.pt" in proc.stderr
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, records.RESULTS_FILE)) as f:
        results = json.load(f)
    assert results["status"] == "failed" and "could not write checkpoint" in results["error"]
    assert os.listdir(os.path.join(run_dir, records.CHECKPOINT_DIR)) == []  # no half-written file left


def test_resume_on_rebuilt_shards_is_refused_unless_asked_for(tiny, tmp_path):
    """The checkpoint records its data's fingerprint: the same file names holding other documents (as a folder
    rebuilt with another seed does) are refused, --allow_new_data goes on anyway."""
    import shutil

    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt")
    assert set(checkpointing.load_checkpoint(ckpt)["data"]) == {"train_sha256", "val_sha256"}
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(tiny["dir"], rebuilt)
    for path in sorted(glob.glob(str(rebuilt / "train_*.bin"))):  # same names and sizes, rows in another order
        tokens = np.asarray(read_shard(path)).copy()
        write_shard(path, np.roll(tokens, 4096), overwrite=True)
    flags = dict(train_steps=4, val_loss_every=0, resume=ckpt, train_files=str(rebuilt / "train_*.bin"))
    message = run_main_expecting(tiny, tmp_path, ["trained on other train data", "--allow_new_data"], **flags)
    assert "rebuilt" in message
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "b", allow_new_data=True, **flags), check=True)


def test_resume_alone_works_from_another_folder(tiny, tmp_path):
    """A run started with relative paths, resumed by `--resume PATH` alone from elsewhere: the checkpoint keeps
    its paths absolute."""
    import shutil

    work = tmp_path / "work"
    shutil.copytree(tiny["dir"], work / "shards")
    shutil.copy(tiny["tokenizer"], work / "tok.pkl")
    argv = tiny_args(tiny, "exps", train_steps=4, val_loss_every=0, checkpoint_every=2, tokenizer="tok.pkl",
                     train_files="shards/train_*.bin", val_files="shards/val_*.bin")
    run_script([os.path.join(REPO, "train_gpt.py")] + argv, cwd=str(work), check=True)
    ckpt = os.path.join(only_run_dir(work / "exps"), records.CHECKPOINT_DIR, "step_000002.pt")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_script([os.path.join(REPO, "train_gpt.py"), "--resume", ckpt], cwd=str(elsewhere), check=True)
    assert len(glob.glob(str(work / "exps" / "*_tiny*"))) == 2 and not os.listdir(elsewhere)


def test_a_checkpoint_missing_a_part_or_not_fitting_the_model_is_one_error(tiny, tmp_path):
    run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path / "a", train_steps=2, val_loss_every=0, save_model=True),
               check=True)
    ckpt = checkpointing.load_checkpoint(os.path.join(only_run_dir(tmp_path / "a"), records.CHECKPOINT_DIR, "step_000002.pt"))
    saved = {k: v for k, v in ckpt.items() if k not in ("format", "format_version", "sha256")}
    rename = {"model_state": "model", "optimizer_states": "optimizers", "dataloader_state": "dataloader",
              "rng_states": "rng"}

    def resave(name, **changes):
        fields = {new: saved[old] for new, old in rename.items()}
        fields.update(model_config=saved["model_config"], step=2, args=saved["args"], tokenizer=saved["tokenizer"],
                      extra=saved["extra"], data=saved["data"], model_source=saved["model_source"])
        fields.update(changes)
        return checkpointing.save_checkpoint(str(tmp_path / name), **fields)

    no_optimizers = resave("no_opt.pt", optimizer_states=[])
    run_main_expecting(tiny, tmp_path, ["--resume checkpoint does not fit", "0 optimizer states for 2"],
                       train_steps=4, resume=no_optimizers)
    model = dict(saved["model"], **{"embed.weight": saved["model"]["embed.weight"][:, :32]})
    wrong_shape = resave("wrong_shape.pt", model_state=model)
    message = run_main_expecting(tiny, tmp_path, ["size mismatch for embed.weight"], train_steps=4,
                                 resume=wrong_shape)
    assert "\n" not in message


def test_the_log_estimates_the_training_time_after_the_first_two_steps(tiny, tmp_path):
    """Step 2 is the first after the warm-up step: 18 steps are left at its measured time (metrics.csv)."""
    proc = run_script(["train_gpt.py"] + tiny_args(tiny, tmp_path, log_every=5), check=True)
    run_dir = only_run_dir(tmp_path)
    step_time = {r["step"]: r["step_time_s"] for r in records.read_metrics(os.path.join(run_dir, records.METRICS_FILE))
                 if r["step_time_s"] is not None}[2]
    line = [l for l in proc.stdout.splitlines() if l.startswith("estimated training time:")][0]
    assert line.startswith(f"estimated training time: 18 more steps x {step_time:.3g}s = ")
    seconds = round(18 * step_time)
    assert line.endswith(f"= {seconds // 60}m{seconds % 60:02d}s (evaluations not included)")
    # the first step's line is shown at once, whatever --log_every
    assert "\nstep 1/20 train_loss" in "\n" + proc.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_killed_run_shows_as_crashed_at_once_through_its_heartbeat(tiny, tmp_path):
    """kill -9 leaves no results.json; the leaderboard used to wait 10 minutes of silence before calling it crashed.
    heartbeat.json names the process, so a reader on the same host knows at once."""
    import signal
    import time

    from gptlab.compare import load_run

    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "train_gpt.py"] + tiny_args(tiny, tmp_path, train_steps=5000,
                                                                         val_loss_every=0, log_every=1),
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            dirs = glob.glob(str(tmp_path / "*_tiny"))
            if dirs and len(train_losses(dirs[0]) if os.path.exists(os.path.join(dirs[0], records.METRICS_FILE))
                            else {}) >= 3:
                break
            time.sleep(0.2)
        run_dir = only_run_dir(tmp_path)
        assert load_run(run_dir).status == "running"
        with open(os.path.join(run_dir, records.HEARTBEAT_FILE)) as f:
            assert json.load(f)["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    run = load_run(run_dir)  # at once: no waiting for the 10-minute window
    assert run.status == "crashed" and any(f"(pid {proc.pid} on " in n and "is gone" in n for n in run.notes)


def test_an_experiments_dir_that_cannot_be_written_fails_before_any_work():
    """As root os.access says yes to /sys; a real write there fails, and so must the run, before the tokenizer or
    any shard is even read (their paths here do not exist)."""
    unused = {"tokenizer": "no_such.pkl", "train": "no_such_train", "val": "no_such_val"}
    with pytest.raises(UserError, match="cannot write in /sys"):
        train_gpt.main(tiny_args(unused, "/sys/gptlab_runs"))
