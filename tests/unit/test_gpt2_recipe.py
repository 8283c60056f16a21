"""GPT-2's recipe in train_gpt.py (--arch gpt2) against nanoGPT and llm.c: AdamW's parameter groups as nanoGPT's
configure_optimizers makes them (decay on every parameter of 2 or more dims), its settings, and llm.c's
get_learning_rate_cosine worked out by hand."""
import argparse
import math
import sys

import pytest

from conftest import REPO

sys.path.insert(0, REPO)
import gpt2  # noqa: E402
import train_gpt  # noqa: E402


def test_adamw_decays_the_matrices_and_embeddings_only():
    model = gpt2.GPT(gpt2.GPTConfig(vocab_size=50, num_layers=2, num_heads=2, model_dim=16, max_seq_len=32))
    [adamw] = train_gpt.build_adamw(model, argparse.Namespace(lr=6e-4, weight_decay=0.1))
    names = {id(p): n for n, p in model.named_parameters()}  # (the tied head is embed.weight, named once)
    decayed, plain = ({names[id(p)] for p in g["params"]} for g in adamw.param_groups)
    # by hand: the weights of every Linear and Embedding; biases and LayerNorm weights not
    linear = {f"blocks.{i}.{w}.weight" for i in range(2) for w in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                      "mlp.c_proj")}
    assert decayed == linear | {"embed.weight", "pos_embed.weight"}
    assert plain == set(names.values()) - decayed and all(n.endswith(".bias") or ".ln_" in n or n.startswith("ln_f")
                                                          for n in plain)
    assert [g["weight_decay"] for g in adamw.param_groups] == [0.1, 0.0]
    assert all(g["betas"] == (0.9, 0.95) and g["eps"] == 1e-8 and g["lr"] == g["initial_lr"] == 6e-4
               for g in adamw.param_groups)


def test_warmup_cosine_is_llmc_schedule():
    # llm.c: lr * (step + 1) / warmup while step < warmup; then min + 0.5 (1 + cos(pi r)) (1 - min), r = (step -
    # warmup) / (steps - warmup), min = final_frac
    f = train_gpt.warmup_cosine
    assert [f(s, 100, 4, 0.0) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4, 100, 4, 0.0) == 1.0 and f(52, 100, 4, 0.0) == pytest.approx(0.5)
    assert f(100, 100, 4, 0.0) == pytest.approx(0.0, abs=1e-12)
    assert f(100, 100, 4, 0.1) == pytest.approx(0.1) and f(52, 100, 4, 0.1) == pytest.approx(0.55)
    assert f(28, 100, 4, 0.0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert f(0, 10, 0, 0.0) == 1.0  # no warm-up: the peak at once


# ---------------------------------------------------------------------------------------------- --optimizer muon
def muon_groups(model):
    """{group name: parameter names} of build_optimizers' Adam groups and Muon's matrices."""
    adam, muon = train_gpt.build_optimizers(model)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {g["name"]: {names[id(p)] for p in g["params"]} for g in adam.param_groups}
    groups["muon"] = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    return groups


def test_muon_recipe_groups_gpt2_by_its_structure_with_the_tied_head_held_once():
    model = gpt2.GPT(gpt2.GPTConfig(vocab_size=50, num_layers=2, num_heads=2, model_dim=16, max_seq_len=32))
    groups = muon_groups(model)
    # by hand: Muon takes the blocks' four Linear weights; Adam the two tables (the head IS embed.weight: no head
    # group), and every bias and LayerNorm weight as vectors
    assert groups["muon"] == {f"blocks.{i}.{w}.weight" for i in range(2)
                              for w in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    assert groups["embeddings"] == {"embed.weight", "pos_embed.weight"} and "head" not in groups
    everything = {n for n, _ in model.named_parameters()}
    assert groups["scalars"] == everything - groups["muon"] - groups["embeddings"]
    assert all(n.endswith(".bias") or ".ln_" in n or n.startswith("ln_f") for n in groups["scalars"])


def test_muon_recipe_groups_llama_and_the_modded_model_as_before():
    import llama
    import model as modded

    model = llama.GPT(llama.GPTConfig(vocab_size=50, num_layers=2, num_heads=2, num_kv_heads=1, model_dim=16,
                                      multiple_of=16))
    groups = muon_groups(model)
    assert groups["muon"] == {f"blocks.{i}.{w}.weight" for i in range(2) for w in (
        "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    assert groups["head"] == {"lm_head.weight"} and groups["embeddings"] == {"embed.weight"}
    # the modded model's groups are the ones its records name: the token table and value embeddings, in that order
    m = modded.GPT(modded.GPTConfig(vocab_size=50, num_layers=2, num_heads=2, model_dim=32, num_val_emb=2))
    adam, _ = train_gpt.build_optimizers(m)
    embeddings = next(g["params"] for g in adam.param_groups if g["name"] == "embeddings")
    assert [id(p) for p in embeddings] == [id(m.embed.weight)] + [id(e.weight) for e in m.value_embeds]
    assert [g["name"] for g in adam.param_groups] == ["head", "embeddings", "scalars"]


def test_optimizer_flag_chooses_the_recipe_and_refuses_the_others_settings(tmp_path):
    cfg = train_gpt.main(["--arch", "gpt2", "--optimizer", "muon", "--dry_run", "--tokenizer", "x",
                          "--experiments_dir", str(tmp_path)])
    assert cfg["optimizer"] == "muon" and cfg["cooldown_frac"] == 0.4 and "lr" not in cfg
    cfg = train_gpt.main(["--optimizer", "adamw", "--dry_run", "--tokenizer", "x", "--experiments_dir", str(tmp_path)])
    assert cfg["arch"] == "modded" and cfg["optimizer"] == "adamw" and cfg["lr"] == 6e-4
    from gptlab.core.errors import UserError
    with pytest.raises(UserError, match="--lr is a setting of the adamw recipe.*--optimizer adamw"):
        train_gpt.main(["--arch", "gpt2", "--optimizer", "muon", "--lr", "1e-3", "--dry_run", "--tokenizer", "x"])


def test_gpt2_trains_with_muon_and_records_it(tiny, tmp_path):
    import json
    import os

    from helpers.tiny_runs import only_run_dir, tiny_args

    result = train_gpt.main(tiny_args(tiny, tmp_path, arch="gpt2", window_size=None, optimizer="muon",
                                      train_steps=8, val_loss_every=8))
    run_dir = only_run_dir(tmp_path)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    assert (config["arch"], config["optimizer"]) == ("gpt2", "muon")
    # a uniform guess over the tiny vocabulary is ln(769) = 6.645 nats: 8 Muon steps get below it (5.68 here), where
    # modded's Adam rates on GPT-2's tied table made the logits explode (22 nats): gpt2.py's MUON_ADAM_LRS
    assert result["final_val_loss"] < math.log(769) - 0.5
