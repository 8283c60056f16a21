"""train_gpt.py in process on CPU: the model's pieces (masks, attention, rotary, U-net skips), Muon's Newton-Schulz,
the schedules, validation bits per byte, every bad input failing before training, and in-process runs with a
fault patched in. Its runs through the command line (torchrun, resume, faults): tests/e2e/test_train_gpt_e2e.py."""
import contextlib
import glob
import json
import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import HELLASWAG_VAL, REPO, SHARED_DATA
from helpers.tiny_runs import only_run_dir, run_main_expecting, tiny_args
from gptlab.checkpoint import checkpointing
from gptlab.train import environment
from gptlab.train import records
from gptlab.dataset.selection import check_shards_match_tokenizer, default_shard_folder
from gptlab.core.errors import UserError
from gptlab.dataset.shards import write_shard
from gptlab.train.config import resolve_config

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")


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
    from gptlab.dataset.loader import ValidationSet
    from gptlab.dataset.selection import expand_shard_files
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


# ------------------------------------------------------------------------------------------------ bad input
def test_vocab_size_smaller_than_the_tokenizer_names_the_right_value(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["--vocab_size 500", f"--vocab_size {tiny['n_vocab']}"], vocab_size=500)


def test_missing_and_broken_shards_are_named(tiny, tmp_path):
    run_main_expecting(tiny, tmp_path, ["nothing_here_*.bin"], train_files=str(tmp_path / "nothing_here_*.bin"))
    broken = tmp_path / "train_000001.bin"
    with open(glob.glob(tiny["train"])[0], "rb") as f:
        broken.write_bytes(f.read()[:5000])  # truncated copy
    run_main_expecting(tiny, tmp_path, [str(broken), "truncated"], train_files=str(broken))


def test_default_shard_folder_is_found_by_the_manifest_not_just_the_name(tmp_path, monkeypatch):
    from gptlab.dataset import shards

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
    tokenizer (an unfinished part is reported), refused when they record another, via gptlab.dataset.shards.check_manifest."""
    from gptlab.dataset import shards
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
    from gptlab.dataset.loader import ValidationSet
    with pytest.raises(UserError, match="every rank needs at least one"):
        ValidationSet(glob.glob(tiny["val"]), 128, n_rows=2, rank=0, world_size=4)


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
    (--cooldown_frac 0.4 below) or as --flag=value. (--seed is the exception: test_train_cli_audit.py.)"""
    saved = vars(train_gpt.build_parser().parse_args(tiny_args(tiny, tmp_path / "exps", seed=3, lr_scale=0.5,
                                                                train_steps=10, model_dim=64, cooldown_frac=0.2)))
    ckpt = checkpointing.save_checkpoint(str(tmp_path / "step_000005.pt"), model_state={}, model_config={}, step=5,
                               args=saved)
    seen = {}
    monkeypatch.setattr(train_gpt, "train", lambda args, ctx, ckpt=None: seen.setdefault("args", args))
    train_gpt.main(["--resume", ckpt, "--cooldown_frac", "0.4", "--train_steps=12"])
    args = seen["args"]
    assert (args.cooldown_frac, args.train_steps) == (0.4, 12)  # given again: these win, 0.4 being the default too
    assert (args.lr_scale, args.model_dim, args.tokenizer, args.seed) == (0.5, 64, tiny["tokenizer"], 3)
    assert {"lr_scale", "model_dim", "tokenizer", "train_files", "seed"} <= set(args.from_checkpoint)
    assert not {"cooldown_frac", "train_steps"} & set(args.from_checkpoint)


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


def test_an_experiments_dir_that_cannot_be_written_fails_before_any_work():
    """As root os.access says yes to /sys; a real write there fails, and so must the run, before the tokenizer or
    any shard is even read (their paths here do not exist)."""
    unused = {"tokenizer": "no_such.pkl", "train": "no_such_train", "val": "no_such_val"}
    with pytest.raises(UserError, match="cannot write in /sys"):
        train_gpt.main(tiny_args(unused, "/sys/gptlab_runs"))
