"""muP (gptlab/train/mup.py, train_gpt.py --mup; docs/mup.md): each parameter's multipliers worked out by hand from
Tensor Programs V's table (Adam: hidden matrices LR x 1/m, init std x 1/sqrt(m), m = fan_in / base fan_in;
embeddings, the head, biases, norms and scalars unchanged; logits x 1/m; attention 1/head_dim, GPT-2's at the
base head dim), checked on both architectures, including model.py's stacked (3, hdim, dim) qkv_w and GPT-2's
tied embedding; --mup at the base width is the standard run bit for bit; bad input is one error."""
import argparse
import glob
import json
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, run_script
from helpers.tiny_runs import only_run_dir, run_main_expecting, tiny_args

sys.path.insert(0, REPO)
import gpt2  # noqa: E402
import llama  # noqa: E402
import model as modded  # noqa: E402
import train_gpt  # noqa: E402
from gptlab.train import mup  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "bench"))
import mup_coord_check  # noqa: E402


def gpt2_model(width, base=None, heads=2, base_heads=None, layers=2):
    mup_fields = dict(mup_base_width=base, mup_base_heads=base_heads or heads) if base else {}
    return gpt2.GPT(gpt2.GPTConfig(vocab_size=100, num_layers=layers, num_heads=heads, model_dim=width,
                                   max_seq_len=32, **mup_fields))


def modded_model(width, base=None, heads=2):
    mup_fields = dict(mup_base_width=base, mup_base_heads=heads) if base else {}
    return modded.GPT(modded.GPTConfig(vocab_size=100, num_layers=2, num_heads=heads, model_dim=width,
                                       window_size=128, **mup_fields))


# ---------------------------------------------------------------------------------------------- by hand
@pytest.mark.parametrize("shape, base_shape, expected", [
    # GPT-2's c_attn (3d, d) at d = 64 against d = 16: m = 64/16 = 4: Adam LR / 4, init std / 2
    ((192, 64), (48, 16), ("matrix", 4.0, 0.25, 0.5)),
    # model.py's stacked qkv_w (3, hdim, dim): the leading 3 stacks matrices; fan-in 128 against 32
    ((3, 128, 128), (3, 32, 32), ("matrix", 4.0, 0.25, 0.5)),
    # fan-in and fan-out grow by different factors (fan-out x 3, fan-in x 8): the fan-in's counts
    ((300, 512), (100, 64), ("matrix", 8.0, 0.125, 8 ** -0.5)),
    # GPT-2's tied embedding / head (padded vocab, d): only the width side grows: as at the base
    ((128, 64), (128, 16), ("vector", 1.0, 1.0, 1.0)),
    # an input layer stored (d, vocab) and a bias (3d,): vector-like
    ((64, 100), (16, 100), ("vector", 1.0, 1.0, 1.0)),
    ((192,), (48,), ("vector", 1.0, 1.0, 1.0)),
    # model.py's lambdas (2,) and skip weights: nothing grows
    ((2,), (2,), ("scalar", 1.0, 1.0, 1.0)),
])
def test_multipliers_of_a_shape_by_hand(shape, base_shape, expected):
    got = mup.multipliers_for(shape, base_shape)
    assert got.role == expected[0]
    assert got.fan_in_mult == pytest.approx(expected[1]) and got.adam_lr == pytest.approx(expected[2])
    assert got.init_std == pytest.approx(expected[3])


def test_roles_of_every_parameter_of_both_architectures():
    g = mup.parameter_multipliers(gpt2_model(64, base=16))
    assert "lm_head.weight" not in g  # tied: the head is embed.weight, counted once
    assert g["embed.weight"] == ("vector", 1.0, 1.0, 1.0) and g["pos_embed.weight"].role == "vector"
    for i in range(2):
        for w in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            assert g[f"blocks.{i}.{w}.weight"] == ("matrix", 4.0, 0.25, 0.5)
            assert g[f"blocks.{i}.{w}.bias"].role == "vector"
        assert g[f"blocks.{i}.ln_1.weight"].role == "vector"
    m = mup.parameter_multipliers(modded_model(128, base=32))
    assert m["blocks.0.attn.qkv_w"] == ("matrix", 4.0, 0.25, 0.5)  # the 3-D stack
    assert m["blocks.1.mlp.c_proj.weight"] == ("matrix", 4.0, 0.25, 0.5)  # (dim, 4 dim): fan-in 512 / 128
    assert m["lm_head.weight"].role == m["embed.weight"].role == m["value_embeds.0.weight"].role == "vector"
    assert m["skip_weights"].role == m["blocks.0.lambdas"].role == "scalar"
    assert mup.parameter_multipliers(gpt2_model(64)) == {}  # SP: none


# ---------------------------------------------------------------------------------------------- learning rates
def lr_of(optimizers, model):
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: (g["lr"], g["initial_lr"], g.get("weight_decay")) for opt in optimizers
            for g in opt.param_groups for p in g["params"]}


def test_adamw_recipe_divides_the_hidden_matrices_lr_by_the_width_multiplier():
    model = gpt2_model(64, base=16)
    lrs = lr_of(train_gpt.build_adamw(model, argparse.Namespace(lr=6e-4, weight_decay=0.1)), model)
    assert len(lrs) == len(list(model.parameters()))
    for name, (lr, initial, decay) in lrs.items():
        hidden = name.endswith("weight") and ".c_" in name
        assert lr == initial == pytest.approx(6e-4 / 4 if hidden else 6e-4), name  # by hand: m = 4
        assert decay == (0.0 if name.endswith("bias") or ".ln_" in name or name.startswith("ln_f") else 0.1)


def test_muon_recipe_keeps_its_learning_rates_and_shape_factor():
    """Muon's updates are width-independent already (docs/mup.md): its LR and its sqrt(max(1, rows/cols)) are the
    base's; the Adam groups (head, embeddings, scalars) hold only vector- and scalar-like parameters: x 1."""
    model = modded_model(128, base=32)
    adam, muon = train_gpt.build_optimizers(model)
    lrs = lr_of([adam, muon], model)
    assert {lr for n, (lr, _, _) in lrs.items() if n.startswith("blocks.") and not n.endswith("lambdas")} == {0.05}
    assert lrs["lm_head.weight"][0] == 0.22 and lrs["embed.weight"][0] == 0.6 and lrs["skip_weights"][0] == 0.04
    base = dict(modded_model(32).named_parameters())
    for n, p in model.blocks.named_parameters():
        if p.ndim >= 2:  # the same factor as at the base: the aspect ratio does not change with width
            assert train_gpt.muon_lr_factor(p.shape) == train_gpt.muon_lr_factor(base["blocks." + n].shape)


# ---------------------------------------------------------------------------------------------- init
def test_gpt2_hidden_init_std_shrinks_as_one_over_sqrt_of_the_width_multiplier():
    assert set(mup.init_(gpt2_model(256, base=64))) == {f"blocks.{i}.{w}.weight" for i in range(2) for w in
                                                        ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    torch.manual_seed(0)  # the trainer's model (train_gpt.build_model applies it)
    config = dict(vocab_size=100, num_layers=2, num_heads=2, model_dim=256, max_seq_len=32, mup_base_width=64,
                  mup_base_heads=2)
    model = train_gpt.build_model(gpt2, config, argparse.Namespace(dtype="float32", fp8_head=False),
                                  torch.device("cpu"))
    p = dict(model.named_parameters())
    # by hand: GPT-2's 0.02 (residual projections 0.02 / sqrt(2 x 2 layers)) at the base, / sqrt(256 / 64) = / 2
    assert p["blocks.0.attn.c_attn.weight"].std().item() == pytest.approx(0.01, rel=0.03)
    assert p["blocks.1.mlp.c_fc.weight"].std().item() == pytest.approx(0.01, rel=0.03)
    assert p["blocks.0.mlp.c_proj.weight"].std().item() == pytest.approx(0.02 / 2 / 2, rel=0.03)
    assert p["embed.weight"].std().item() == pytest.approx(0.02, rel=0.03)  # tied embedding: as at the base


def test_modded_init_is_muP_already_and_the_run_s_random_stream_is_untouched():
    """model.py's CastedLinear and qkv_w draw with std 0.5 / sqrt(fan_in), muP's scaling: init_ leaves them (the
    3-D qkv_w's std stays 0.5 / sqrt(dim) by hand); building the base model to compare does not consume the run's
    random numbers (the data order and everything after the model's init stay the seed's)."""
    torch.manual_seed(3)
    model = modded_model(256, base=64)
    assert mup.init_(model) == {}
    assert model.blocks[0].attn.qkv_w.std().item() == pytest.approx(0.5 / 256 ** 0.5, rel=0.03)
    after_mup = torch.rand(3)
    torch.manual_seed(3)
    modded_model(256)
    assert torch.equal(after_mup, torch.rand(3))


# ---------------------------------------------------------------------------------------------- forward
def test_gpt2_logits_are_the_tied_head_times_base_over_width():
    model = gpt2_model(64, base=16)
    x = torch.randn(2, 5, 64)
    assert torch.allclose(model.logits(x), F.linear(x, model.embed.weight) * 0.25, atol=1e-6)


def test_modded_logits_soft_cap_has_the_base_temperature_times_the_width_multiplier():
    model = modded_model(128, base=32)
    with torch.no_grad():
        model.lm_head.weight.normal_()  # (zero at init: every logit would be 15)
    x = torch.randn(2, 5, 128)
    z = F.linear(x, model.lm_head.weight)
    # by hand: 30 sigmoid(z / (7.5 sqrt(32) x 128/32)) = 30 sigmoid(z x (32/128) / (7.5 sqrt(32)))
    assert torch.allclose(model.logits(x), 30 * torch.sigmoid(z / (7.5 * 32 ** 0.5 * 4)), atol=1e-5)


@pytest.mark.parametrize("heads, base, base_heads, scale", [
    (2, 16, 2, 8 ** 0.5 / 32),  # head dim 32, base's 8: 1/32, made sqrt(8)/8 = 1/sqrt(8) at the base
    (4, 16, 1, 16 ** -0.5),  # head dim 16 at both: GPT-2's 1/sqrt(16)
])
def test_gpt2_attention_scale_is_one_over_head_dim_referenced_to_the_base(heads, base, base_heads, scale):
    torch.manual_seed(0)
    attn = gpt2_model(64, base=base, heads=heads, base_heads=base_heads).blocks[0].attn
    x = torch.randn(1, 6, 64)
    q, k, v = attn.c_attn(x).view(1, 6, 3, heads, 64 // heads).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-1, -2)) * scale + torch.full((6, 6), -math.inf).triu(1)
    by_hand = attn.c_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 6, 64))
    assert torch.allclose(attn(x, None), by_hand, atol=1e-5)


def test_llama_readout_and_attention_scale_are_the_base_referenced_ones():
    """llama.py's hook: logits = head(x x base/d) (untied head), attention 1/head_dim made 1/sqrt(head_dim) at the
    base's head dim: here head dim 32 against the base's 8: sqrt(8)/32."""
    torch.manual_seed(0)
    model = llama.GPT(llama.GPTConfig(vocab_size=100, num_layers=1, num_heads=2, num_kv_heads=2, model_dim=64,
                                      multiple_of=32, mup_base_width=16, mup_base_heads=2))
    x = torch.randn(2, 5, 64)
    assert torch.allclose(model.logits(x), F.linear(x * 16 / 64, model.lm_head.weight), atol=1e-6)
    assert model.blocks[0].attn.scale == pytest.approx(8 ** 0.5 / 32)


def test_model_config_gets_the_mup_fields_only_with_mup():
    fields = dict(vocab_size=100, num_layers=2, num_heads=2, model_dim=64, max_seq_len=32)
    config = mup.model_config(argparse.Namespace(mup=True, mup_base_width=32, mup_base_heads=1), fields, gpt2)
    assert (config["mup_base_width"], config["mup_base_heads"]) == (32, 1)
    assert mup.model_config(argparse.Namespace(mup=None), fields, gpt2) is fields


def test_modded_attention_scale_is_already_c_over_head_dim():
    # 0.12 at head dim 128: scale x head_dim = 15.36 at any head dim, muP's 1/d form with the base's at the base
    for d in (16, 32, 128, 256):
        assert modded.attention_scale(d) * d == pytest.approx(15.36)


# ---------------------------------------------------------------------------------------------- = SP at the base
def short_training(module, model_config, steps=3, seed=0):
    """Build the model and its recipe's optimizers as train_gpt.py does, and train `steps` steps on random
    tokens; its parameters."""
    cfg = argparse.Namespace(dtype="float32", fp8_head=False, optimizer=train_gpt.recipe_of(module))
    train_gpt.fill_recipe(cfg)
    torch.manual_seed(seed)
    model = train_gpt.build_model(module, model_config, cfg, torch.device("cpu"))
    optimizers = train_gpt.build_recipe_optimizers(cfg, model)
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(1, 100, (2, 129), generator=data)
        tokens[:, 0] = 0
        masks = model.attention_masks(tokens[:, :-1], 0, model.final_windows())
        model(tokens[:, :-1], masks, tokens[:, 1:]).backward()
        for opt in optimizers:
            opt.step()
        model.zero_grad(set_to_none=True)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("module, fields", [
    (gpt2, dict(vocab_size=100, num_layers=2, num_heads=2, model_dim=32, max_seq_len=128)),
    (modded, dict(vocab_size=100, num_layers=2, num_heads=2, model_dim=32, window_size=128)),
    (llama, dict(vocab_size=100, num_layers=2, num_heads=2, num_kv_heads=1, model_dim=32, multiple_of=32)),
])
def test_mup_at_the_base_width_trains_exactly_the_standard_model(module, fields, one_torch_thread):
    sp = short_training(module, fields)
    at_base = short_training(module, dict(fields, mup_base_width=32, mup_base_heads=2))
    assert sp.keys() == at_base.keys() and all(torch.equal(sp[n], at_base[n]) for n in sp)
    wider = short_training(module, dict(fields, mup_base_width=16, mup_base_heads=2))  # the check can fail
    assert not all(torch.equal(sp[n], wider[n]) for n in sp)


def test_a_mup_run_at_the_base_width_has_the_standard_run_s_losses_and_records_mup(tiny, tmp_path):
    sp = train_gpt.main(tiny_args(tiny, tmp_path / "sp", arch="gpt2", window_size=None, train_steps=3,
                                  val_loss_every=0, warmup_steps=1))
    at_base = train_gpt.main(tiny_args(tiny, tmp_path / "mup", arch="gpt2", window_size=None, train_steps=3,
                                       val_loss_every=0, warmup_steps=1, mup=True, mup_base_width=64,
                                       save_model=True))
    assert at_base["final_val_loss"] == sp["final_val_loss"]
    run_dir = only_run_dir(tmp_path / "mup")
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    assert (config["mup"], config["mup_base_width"], config["mup_base_heads"]) == (True, 64, 2)
    # the checkpoint's model config carries them: every tool rebuilds the muP forward from it
    [ckpt] = glob.glob(os.path.join(run_dir, "**", "*.pt"), recursive=True)
    model_config = torch.load(ckpt, map_location="cpu", weights_only=False)["model_config"]
    assert (model_config["mup_base_width"], model_config["mup_base_heads"]) == (64, 2)
    from gptlab.compare.stats import seed_group_key  # a muP run is another setting than the SP one
    assert seed_group_key(config) != seed_group_key(dict(config, mup=None, mup_base_width=None,
                                                         mup_base_heads=None))


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("flags, parts", [
    (dict(mup_base_width=32), ["--mup_base_width only mean something with --mup"]),
    (dict(mup_base_heads=2), ["--mup_base_heads only mean something with --mup"]),
    (dict(mup=True), ["--mup needs --mup_base_width"]),
    (dict(mup=True, mup_base_width=48), ["--mup_base_width 48 does not divide --model_dim 64"]),
    (dict(mup=True, mup_base_width=128), ["--mup_base_width 128 does not divide --model_dim 64"]),
    (dict(mup=True, mup_base_width=32, mup_base_heads=0), ["--mup_base_heads must be a positive integer"]),
    (dict(mup=True, mup_base_width=16, mup_base_heads=3, arch="gpt2", window_size=None),
     ["muP base model", "not divisible by --num_heads 3"]),
])
def test_bad_mup_flags_are_one_error_before_any_folder(tiny, tmp_path, flags, parts):
    run_main_expecting(tiny, tmp_path, parts, **flags)
    assert not os.path.exists(tmp_path / "exps")


def test_a_bad_mup_flag_is_one_error_line_on_the_command_line(tmp_path):
    proc = run_script(["train_gpt.py", "--tokenizer", "x.pkl", "--mup_base_width", "16", "--dry_run"])
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --mup_base_width only mean something with --mup; add --mup or drop them"]


# ---------------------------------------------------------------------------------------------- coordinate check
def test_coordinate_check_smoke_sp_grows_mup_does_not(one_torch_thread):
    """bench/mup_coord_check.py in small: widths 32..128, 2 steps, 1 seed, GPT-2 at 4x its default LR (so 2 steps
    move the coordinates). SP's Adam-driven hidden outputs grow near-linearly with width (slope ~ +1, far above
    the 0.2 bound: DEFAULT_BOUND's comment); muP's stay within it."""
    args = mup_coord_check.parse_args(["--arch", "gpt2", "--widths", "32,64,128", "--steps", "2", "--seeds", "1",
                                       "--rows", "2", "--lr_scale", "4"])
    verdicts, _ = mup_coord_check.run_check(args, log=lambda *_: None)
    assert {g for g, (_, word) in verdicts["sp"].items() if word == "grows"} >= {"attention", "mlp", "residual"}
    assert not [g for g, (_, word) in verdicts["mup"].items() if word == "grows"]
    assert all(word == "flat" for g, (_, word) in verdicts["mup"].items() if g != "logit update")
