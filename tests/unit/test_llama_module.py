"""llama.py, Llama 3 beside model.py and gpt2.py, against independent references: transformers' LlamaForCausalLM
with the same weights (logits to 1e-5 in float32, grouped-query attention on), Meta's published sizes (Llama 3 8B's
parameter count and SwiGLU width), the full-sequence forward for the KV cache, a document alone in its row for a
packed one, and parameter counts and FLOPs worked out by hand."""
import dataclasses
import sys

import pytest
import torch

from conftest import REPO
from helpers.arch_checks import (check_a_packed_document_scores_as_it_does_alone,
                                  check_kv_cache_equals_the_full_forward, random_tokens)

sys.path.insert(0, REPO)
import llama  # noqa: E402

VOCAB = 50  # padded to 128 inside the model
EOT = VOCAB - 1
# 4 query heads of 8 sharing 2 key/value heads; SwiGLU width int(8/3 x 32) = 85 -> multiple of 32: 96
SHAPE = dict(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, model_dim=32, multiple_of=32,
             max_seq_len=64)


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    model = llama.GPT(llama.GPTConfig(**dict(SHAPE, **overrides))).eval()
    with torch.no_grad():  # RMSNorm weights start at 1 and the init is small: make every weight matter
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p)) if p.ndim == 1 else p.mul_(5)
    return model


def tokens(seed, B, T):
    return random_tokens(seed, B, T, EOT)


def hf_llama(rope_theta=500000.0, num_kv_heads=2, seed=0):
    """A randomly initialised LlamaForCausalLM of SHAPE (eager attention), with weights made large enough to matter."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=num_kv_heads, rope_theta=rope_theta,
                                      rms_norm_eps=1e-5, max_position_embeddings=64, attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p)) if p.ndim == 1 else p.mul_(5)
    return hf


def hf_to_ours(hf_state, padded_vocab):
    """LlamaForCausalLM's weights under llama.py's names, written out here (not llama.transformers_import): the
    embedding and the head padded with zero rows to padded_vocab."""
    out = {}
    for name, tensor in hf_state.items():
        ours = (name.replace("model.embed_tokens.", "embed.").replace("model.layers.", "blocks.")
                .replace("model.norm.", "norm.").replace(".input_layernorm.", ".attn_norm.")
                .replace(".post_attention_layernorm.", ".mlp_norm.").replace(".self_attn.", ".attn."))
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            tensor = torch.cat([tensor, tensor.new_zeros(padded_vocab - tensor.size(0), tensor.size(1))])
        out[ours] = tensor
    return out


def ours_from(hf):
    ours = llama.GPT(llama.GPTConfig(**SHAPE)).eval()
    ours.load_state_dict(hf_to_ours(hf.state_dict(), ours.padded_vocab), strict=True)
    return ours


def test_same_logits_as_transformers_llama_with_its_weights():
    hf = hf_llama()
    ours = ours_from(hf)
    assert ours.lm_head.weight is not ours.embed.weight  # untied
    x = tokens(1, 2, 40)
    x[:, 0] = EOT  # one document from position 0, as HF reads a row
    with torch.no_grad():
        expected = hf(x).logits
        got = ours(x, ours.attention_masks(x, EOT, None))[..., :VOCAB]
        plain = ours(x, None)[..., :VOCAB]
    assert expected.abs().max() > 0.5  # not a trivial comparison
    assert (got - expected).abs().max() <= 1e-5
    assert (plain - expected).abs().max() <= 1e-5
    assert (ours.predict(x, EOT) - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("num_kv_heads", [1, 4])
def test_multi_query_and_plain_multi_head_match_transformers_too(num_kv_heads):
    hf = hf_llama(num_kv_heads=num_kv_heads, seed=3)
    torch.manual_seed(0)
    ours = llama.GPT(llama.GPTConfig(**dict(SHAPE, num_kv_heads=num_kv_heads))).eval()
    ours.load_state_dict(hf_to_ours(hf.state_dict(), ours.padded_vocab))
    x = tokens(2, 1, 24)
    with torch.no_grad():
        assert (ours(x, None)[..., :VOCAB] - hf(x).logits).abs().max() <= 1e-5


def test_theta_is_llama3s_and_matters():
    assert llama.GPTConfig(vocab_size=10).rope_theta == 500000.0
    x = tokens(4, 1, 30)
    ours = ours_from(hf_llama())
    with torch.no_grad():  # the same weights under Llama 2's θ = 10000 give other logits
        other = hf_llama(rope_theta=10000.0)
        other.load_state_dict(hf_llama().state_dict())
        assert (ours(x, None)[..., :VOCAB] - other(x).logits).abs().max() > 1e-3


def test_transformers_round_trip_through_the_modules_own_mapping():
    """transformers_config / transformers_import (what --init_from uses) and transformers_export (export_hf.py)
    give HF's logits, a width off Meta's rule included."""
    hf = hf_llama()
    fields = llama.transformers_config(hf.config.to_dict())
    assert fields["num_kv_heads"] == 2 and fields["rope_theta"] == 500000.0 and fields["norm_eps"] == 1e-5
    model = llama.GPT(llama.GPTConfig(**fields)).eval()
    assert model.config.ffn_hidden == 96
    model.load_state_dict(llama.transformers_import(hf.config.to_dict(), hf.state_dict(), model))
    x = tokens(5, 2, 20)
    with torch.no_grad():
        assert (model(x, None)[..., :VOCAB] - hf(x).logits).abs().max() <= 1e-5
    config, state = llama.transformers_export(model, VOCAB, EOT)
    assert state.keys() == hf.state_dict().keys()
    assert config["intermediate_size"] == 96 and config["num_key_value_heads"] == 2


def test_transformers_config_refuses_what_llama_py_cannot_hold():
    base = dict(hidden_size=32, num_attention_heads=4, intermediate_size=96, vocab_size=50, num_hidden_layers=2)
    with pytest.raises(ValueError, match="attention biases"):
        llama.transformers_config(dict(base, attention_bias=True))
    with pytest.raises(ValueError, match="RoPE scaling 'llama3'"):
        llama.transformers_config(dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0}))


def test_llama3_8b_has_its_published_size():
    """Meta-Llama-3-8B: 8,030,261,248 parameters (its model card: 8B; the safetensors' sum), SwiGLU width 14,336
    (dim 4096, multiple_of 1024, ffn_dim_multiplier 1.3), 128,256 rows (already a multiple of 128)."""
    with torch.device("meta"):
        model = llama.GPT(llama.GPTConfig(vocab_size=128256, model_dim=4096, num_layers=32, num_heads=32,
                                          num_kv_heads=8, multiple_of=1024, ffn_dim_multiplier=1.3))
    assert model.config.ffn_hidden == 14336
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248


def test_small_config_parameter_count_by_hand():
    # vocab 1000 -> 1024 rows; width 256, 8 heads of 32, 2 kv heads; SwiGLU int(8 x 256 / 3) = 682 -> 768
    # per block: q 256x256 + k 256x64 + v 256x64 + o 256x256 = 163,840; MLP 3 x 256 x 768 = 589,824; 2 norms 512
    # 4 blocks, embedding 1024 x 256, untied head 1024 x 256, final norm 256
    model = llama.GPT(llama.GPTConfig(vocab_size=1000, num_layers=4, num_heads=8, num_kv_heads=2, model_dim=256))
    assert model.config.ffn_hidden == 768
    assert sum(p.numel() for p in model.parameters()) == 4 * (163_840 + 589_824 + 512) + 2 * 1024 * 256 + 256
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())


def test_init_is_hfs():
    """LlamaForCausalLM's _init_weights: normal(0, initializer_range 0.02) for every linear and embedding weight,
    RMSNorm weights 1."""
    model = llama.GPT(llama.GPTConfig(vocab_size=1000, num_layers=2, num_heads=8, num_kv_heads=2, model_dim=256))
    for name, p in model.named_parameters():
        if p.ndim == 2:
            assert p.std().item() == pytest.approx(0.02, rel=0.05) and abs(p.mean().item()) < 2e-3, name
        else:
            assert p.eq(1).all(), name


def test_kv_cache_one_token_at_a_time_equals_the_full_forward():
    check_kv_cache_equals_the_full_forward(llama, tiny_model(), EOT)


def test_a_packed_document_scores_as_it_does_alone():
    model = tiny_model()
    check_a_packed_document_scores_as_it_does_alone(model, EOT)
    assert model.attention_masks(torch.tensor([[3, EOT, 5, 6]]), EOT)["positions"].tolist() == [[0, 0, 1, 2]]


def test_a_tree_row_scores_each_branch_as_its_sequence_alone():
    """predict(tree=), as model.py's and gpt2.py's: a shared start once and three branches after it, behind another
    document in the row: each sequence's logits are those it has alone (rotary angles of its positions, not its
    columns; no branch sees another), against the sequences in rows of their own (tests/helpers/tree_rows.py)."""
    from gptlab.checkpoint.model_source import logits_fn
    from helpers.tree_rows import assert_tree_scores_as_alone

    model = tiny_model()
    start = [EOT] + tokens(9, 1, 9)[0].tolist()
    sequences = [start + tokens(10 + k, 1, 3 + k)[0].tolist() for k in range(3)]
    assert_tree_scores_as_alone(model.predict, EOT, sequences, 10, before=[EOT, 3, 4, 5])
    assert logits_fn(model, EOT, VOCAB).trees  # so the scorers lay out trees for it


def test_predict_at_positions_and_the_summed_cross_entropy():
    model = tiny_model()
    x, y = tokens(2, 3, 20), tokens(7, 3, 20)
    x[1, 7] = EOT
    rows, cols = torch.tensor([0, 1, 2]), torch.tensor([0, 7, 19])
    full = model.predict(x, EOT)
    torch.testing.assert_close(model.predict(x, EOT, positions=(rows, cols)), full[rows, cols], rtol=0, atol=1e-6)
    masks = model.attention_masks(x, EOT)
    with torch.no_grad():
        logits, loss = model(x, masks), model(x, masks, y)
    by_hand = -sum(logits[b, t].log_softmax(-1)[y[b, t]] for b in range(3) for t in range(20))
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-6)


def test_training_flops_by_hand():
    model = llama.GPT(llama.GPTConfig(**SHAPE))
    # per block: q 32x32, k 32x16, v 32x16, o 32x32, MLP 3 x 32 x 96; the untied head 128 x 32; no embedding
    n_matmul = 2 * (1024 + 512 + 512 + 1024 + 3 * 32 * 96) + 128 * 32
    assert llama.training_flops(model, 100, {"long": 50, "short": 50}) == (6 * 100 * n_matmul, 2 * 12 * 8 * 4 * 50)
    idx = torch.tensor([[EOT, 1, 2, EOT, 3], [1, 2, 3, 4, 5]])
    assert int(llama.attention_pairs(idx, EOT)) == 9 + 15 == int(model.attention_masks(idx, EOT)["mask"].sum())


@pytest.mark.parametrize("fields, words", [(dict(num_kv_heads=3), "--num_kv_heads 3 does not divide"),
                                           (dict(num_heads=3), "whole, even head width"),
                                           (dict(rope_theta=0.0), "--rope_theta must be a positive number"),
                                           (dict(num_layers=0), "--num_layers must be a positive integer")])
def test_impossible_configs_name_the_field(fields, words):
    with pytest.raises(ValueError, match=words):
        llama.GPTConfig(**dict(SHAPE, **fields))


def test_the_tools_build_and_check_it_as_they_do_model_py():
    from gptlab.core.errors import UserError
    from gptlab.checkpoint import model_source
    from gptlab.train import config, flags
    cfg = dataclasses.asdict(llama.GPTConfig(**SHAPE))
    model = model_source.model_from_config(llama, cfg)
    model_source.check_weights_fit(llama, cfg, model.state_dict(), "a checkpoint")
    assert "max_seq_len" not in [f.name for f in flags.model_flags(llama.GPTConfig)]
    assert not config.positions_are_weights(llama.GPTConfig)  # RoPE: no table to keep on resume
    with pytest.raises(UserError, match="no FP8 head"):
        config.resolve_fp8_head(True, torch.device("cuda", 0), llama, 768, capability=(9, 0))


def test_an_edited_llama_is_no_longer_exported_as_llama_for_causal_lm(tmp_path):
    """A researcher's llama.py with a new weight in every block: transformers_export still maps it, and export_hf.py's
    check (native_model) refuses it, so the export falls back to the checkpoint's own code (export_hf.py's note)."""
    pytest.importorskip("transformers")
    from gptlab.export.hf_folder import NotNative, native_model
    from gptlab.checkpoint import model_source

    with open(llama.__file__, encoding="utf-8") as f:
        code = f.read()
    for old, new in (("        self.mlp = MLP(c)\n",
                      "        self.mlp = MLP(c)\n        self.gate = nn.Parameter(torch.ones(c.model_dim))\n"),
                     ("        return x + self.mlp(self.mlp_norm(x))\n",
                      "        return x + self.gate * self.mlp(self.mlp_norm(x))\n")):
        assert code.count(old) == 1
        code = code.replace(old, new)
    (tmp_path / "gated_llama.py").write_text(code, encoding="utf-8")
    edited = model_source.import_file(str(tmp_path / "gated_llama.py"), "gated_llama_for_export")
    native_model(llama.transformers_export(tiny_model(), VOCAB, EOT))  # today's llama.py: a LlamaForCausalLM
    with pytest.raises(NotNative):
        native_model(edited.transformers_export(edited.GPT(edited.GPTConfig(**SHAPE)), VOCAB, EOT))
