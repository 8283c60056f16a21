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
