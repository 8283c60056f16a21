"""gpt2.py, the GPT-2 architecture beside model.py, against independent references: transformers'
GPT2LMHeadModel with the same weights (logits to 1e-5 in float32), the full-sequence forward for the positions
subset and the KV cache, a document alone in its row for a packed one, cross-entropy and FLOPs worked out by hand."""
import dataclasses
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO
from helpers.arch_checks import (check_a_packed_document_scores_as_it_does_alone,
                                  check_kv_cache_equals_the_full_forward)

sys.path.insert(0, REPO)
import gpt2  # noqa: E402

VOCAB = 50  # padded to 128 inside the model
EOT = VOCAB - 1


def tiny_config(**overrides):
    return gpt2.GPTConfig(**dict(dict(vocab_size=VOCAB, num_layers=2, num_heads=2, model_dim=16, max_seq_len=32),
                                 **overrides))


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    model = gpt2.GPT(tiny_config(**overrides)).eval()
    with torch.no_grad():  # GPT-2's init zeroes biases and sets LayerNorms to 1, 0: make every weight matter
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def tokens(seed, B, T):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, EOT, (B, T), generator=g)  # no <|endoftext|> unless a test puts one


def hf_to_ours(hf_state, padded_vocab):
    """GPT2LMHeadModel's state dict under gpt2.py's names: Conv1D weights (in, out) transposed to nn.Linear's (out,
    in); the token embedding (tied to the head) padded with zero rows to padded_vocab."""
    out = {}
    for name, tensor in hf_state.items():
        if name.endswith(("attn.bias", "attn.masked_bias")) and tensor.ndim != 1:  # old versions' causal buffers
            continue
        ours = (name.replace("transformer.wte.", "embed.").replace("transformer.wpe.", "pos_embed.")
                .replace("transformer.h.", "blocks.").replace("transformer.ln_f.", "ln_f."))
        if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            tensor = tensor.t()
        if name in ("transformer.wte.weight", "lm_head.weight"):
            tensor = torch.cat([tensor, tensor.new_zeros(padded_vocab - tensor.size(0), tensor.size(1))])
        out[ours] = tensor.contiguous()
    return out


def test_same_logits_as_transformers_gpt2_with_its_weights():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2,
                                        activation_function="gelu_new", layer_norm_epsilon=1e-5, resid_pdrop=0.0,
                                        embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    hf = transformers.GPT2LMHeadModel(hf_config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.ndim == 1:  # HF's init zeroes the biases and sets LayerNorms to 1, 0: make them matter
                p.add_(0.1 * torch.randn_like(p))
            else:  # weights of std 0.2: pre-activations of order 1, where exact and tanh GELU differ
                p.mul_(10)
    ours = gpt2.GPT(tiny_config()).eval()
    ours.load_state_dict(hf_to_ours(hf.state_dict(), ours.padded_vocab), strict=True)
    assert ours.lm_head.weight is ours.embed.weight  # still tied after loading
    x = tokens(1, 2, 24)
    x[:, 0] = EOT  # a single document, as the scorer's sequences start: positions 0, 1, ... as HF's
    with torch.no_grad():
        expected = hf(x).logits
        got = ours(x, ours.attention_masks(x, EOT, None))[..., :VOCAB]
        plain = ours(x, None)[..., :VOCAB]  # no masks: one causal document, as HF reads any row
    assert expected.abs().max() > 0.1  # not a trivial comparison
    assert (got - expected).abs().max() <= 1e-5
    assert (plain - expected).abs().max() <= 1e-5
    assert (ours.predict(x, EOT) - expected).abs().max() <= 1e-5


def test_init_is_gpt2s():
    model = gpt2.GPT(tiny_config(model_dim=64, num_heads=4, num_layers=2))
    assert model.lm_head.weight is model.embed.weight  # tied
    assert model.embed.weight.shape == (128, 64) and model.pos_embed.weight.shape == (32, 64)
    for block in model.blocks:  # 0.02, and 0.02 / sqrt(2 x 2 layers) = 0.01 for the residual projections
        assert block.attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert block.mlp.c_fc.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert block.attn.c_proj.weight.std().item() == pytest.approx(0.01, rel=0.1)
        assert block.mlp.c_proj.weight.std().item() == pytest.approx(0.01, rel=0.1)
        assert block.attn.c_attn.bias.abs().max() == 0 and block.ln_1.weight.eq(1).all()
    assert model.pos_embed.weight.std().item() == pytest.approx(0.02, rel=0.1)
    no_bias = gpt2.GPT(tiny_config(bias=False))
    assert not any(n.endswith("bias") for n, _ in no_bias.named_parameters())


def test_gpt2_small_has_gpt2s_parameter_count():
    """The defaults are GPT-2 small: transformers' GPT2LMHeadModel has 124,439,808 parameters (nanoGPT prints
    123.65M without the 786,432 of the position table); ours has 47 padding rows of 768 more (50,257 -> 50,304)."""
    with torch.device("meta"):
        model = gpt2.GPT(gpt2.GPTConfig(vocab_size=50257))
    assert sum(p.numel() for p in model.parameters()) == 124_439_808 + 47 * 768


def test_predict_at_positions_equals_the_full_logits_there():
    model = tiny_model()
    x = tokens(2, 3, 20)
    x[1, 7] = EOT
    rows, cols = torch.tensor([0, 1, 1, 2, 2]), torch.tensor([0, 6, 7, 19, 3])
    full = model.predict(x, EOT)
    assert full.shape == (3, 20, VOCAB)
    at = model.predict(x, EOT, positions=(rows, cols))
    assert at.shape == (5, VOCAB)
    torch.testing.assert_close(at, full[rows, cols], rtol=0, atol=1e-6)


def test_kv_cache_one_token_at_a_time_equals_the_full_forward():
    check_kv_cache_equals_the_full_forward(gpt2, tiny_model(), EOT)


def test_a_packed_document_scores_as_it_does_alone():
    model = tiny_model()
    check_a_packed_document_scores_as_it_does_alone(model, EOT)


def test_forward_with_targets_is_the_summed_cross_entropy():
    model = tiny_model()
    x, y = tokens(6, 2, 16), tokens(7, 2, 16)
    x[0, 5] = EOT
    masks = model.attention_masks(x, EOT, None)
    with torch.no_grad():
        logits = model(x, masks)
        loss = model(x, masks, y)
    by_hand = -sum(logits[b, t].log_softmax(-1)[y[b, t]] for b in range(2) for t in range(16))
    assert logits.shape == (2, 16, 128)
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-6)
    assert loss.item() == pytest.approx(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item(),
                                        rel=1e-6)


def test_training_flops_and_attention_pairs_by_hand():
    model = gpt2.GPT(tiny_config())  # 2 layers, 2 heads of 8, width 16, vocab 50 -> 128 rows, 32 positions
    # per block: c_attn 16 x 48, attn.c_proj 16 x 16, c_fc 16 x 64, mlp.c_proj 64 x 16 = 768 + 256 + 1024 + 1024;
    # the tied head 128 x 16 once; the position table none (a look-up)
    n_matmul = 2 * (768 + 256 + 1024 + 1024) + 128 * 16
    assert gpt2.training_flops(model, 100, {"long": 50, "short": 50}) == (6 * 100 * n_matmul, 2 * 12 * 8 * 2 * 50)
    assert gpt2.training_flops(model, 100, 50) == (6 * 100 * n_matmul, 2 * 12 * 8 * 2 * 50)
    # rows [e a b e c] (documents from 0 and 3: 1+2+3 + 1+2 pairs) and [a b c d e] (one: 1+2+3+4+5)
    idx = torch.tensor([[EOT, 1, 2, EOT, 3], [1, 2, 3, 4, 5]])
    assert int(gpt2.attention_pairs(idx, EOT, 3)) == 9 + 15
    assert int(model.attention_masks(idx, EOT, None)["mask"].sum()) == 9 + 15


def test_positions_restart_at_each_document():
    model = tiny_model()
    idx = torch.tensor([[3, 4, EOT, 5, 6, EOT, EOT, 7]])
    assert model.attention_masks(idx, EOT, None)["positions"].tolist() == [[0, 1, 0, 1, 2, 0, 0, 1]]


def test_a_document_longer_than_the_position_table_is_refused():
    model = tiny_model(max_seq_len=8)
    ok = tokens(8, 1, 12)
    ok[0, 6] = EOT  # two documents of 6: fit
    assert model.predict(ok, EOT).shape == (1, 12, VOCAB)
    with pytest.raises(ValueError, match="document of 9 tokens is longer than the 8 learned positions"):
        model.predict(tokens(8, 1, 9), EOT)
    cache = gpt2.KVCache(model, EOT)
    cache.forward(tokens(9, 1, 8))
    with pytest.raises(ValueError, match="max_seq_len"):
        cache.forward(tokens(9, 1, 1))


@pytest.mark.parametrize("fields, words", [(dict(model_dim=16, num_heads=3), "not divisible by --num_heads 3"),
                                           (dict(num_layers=0), "--num_layers must be a positive integer"),
                                           (dict(mlp_ratio=0.0), "--mlp_ratio 0.0 gives no MLP")])
def test_impossible_configs_name_the_field(fields, words):
    with pytest.raises(ValueError, match=words):
        tiny_config(**fields)


def test_the_tools_build_and_check_it_as_they_do_model_py():
    from gptlab.core.errors import UserError
    from gptlab.checkpoint import model_source
    from gptlab.train import config, flags
    cfg = dataclasses.asdict(tiny_config())
    model = model_source.model_from_config(gpt2, cfg)
    model_source.check_weights_fit(gpt2, cfg, model.state_dict(), "a checkpoint")  # tied weights: both names
    assert tiny_config().head_dim == 8 and "head_dim" not in cfg  # derived, as config.py reads it
    assert "max_seq_len" not in [f.name for f in flags.model_flags(gpt2.GPTConfig)]  # the tools set it
    # no FP8 head: "auto" leaves it off and --fp8_head is one error, even on a GPU that has FP8
    h100 = torch.device("cuda", 0)
    assert config.resolve_fp8_head("auto", h100, gpt2, 768, capability=(9, 0)) is False
    with pytest.raises(UserError, match="no FP8 head"):
        config.resolve_fp8_head(True, h100, gpt2, 768, capability=(9, 0))
    assert math.isclose(model.final_windows()[0], 32) and gpt2.BLOCK_SIZE == 1 and gpt2.SEQ_MULTIPLE == 1


def test_a_tree_row_scores_each_branch_as_its_sequence_alone():
    """predict(tree=): a shared start once and three branches after it, behind another document in the row: each
    sequence's logits are those it has alone (its positions, not its columns; no branch sees another), checked
    against the sequences in rows of their own (tests/helpers/tree_rows.py writes the row out by hand)."""
    from helpers.tree_rows import assert_tree_scores_as_alone

    model = tiny_model(max_seq_len=16)
    start = [EOT] + tokens(9, 1, 9)[0].tolist()
    sequences = [start + tokens(10 + k, 1, 3 + k)[0].tolist() for k in range(3)]  # 13, 14 and 15 tokens
    # the row holds 4 + 10 + 3 + 4 + 5 = 26 tokens, more than the 16 positions: only positions count
    assert_tree_scores_as_alone(model.predict, EOT, sequences, 10, before=[EOT, 3, 4, 5])
