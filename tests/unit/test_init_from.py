"""gptlab/train/init_from.py (train_gpt.py --init_from) on folders transformers itself wrote: the checkpoint's
model type picks the module, its weights (one file, or shards behind an index; a tied Llama head) give
transformers' logits; what no module holds is one UserError. The whole runs: tests/e2e/test_arch_llama_e2e.py."""
import json
import sys

import pytest
import torch

from conftest import REPO
from gptlab.core.errors import UserError
from gptlab.checkpoint import model_source
from gptlab.train import init_from

sys.path.insert(0, REPO)
transformers = pytest.importorskip("transformers")
VOCAB = 300


def modules():
    return {arch: model_source.current_module(file) for arch, file in model_source.ARCHITECTURES.items()}


def saved(model, folder, **kwargs):
    torch.manual_seed(1)
    with torch.no_grad():  # weights that matter (HF's init: unit norms, zero biases, std 0.02)
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p)) if p.ndim == 1 else p.mul_(5)
    model.eval().save_pretrained(folder, **kwargs)
    return model


def loaded(folder):
    init = init_from.open_checkpoint(str(folder), modules())
    module = modules()[init.arch]
    model = module.GPT(module.GPTConfig(**init.fields)).eval()
    init_from.load_weights(init, module, model)
    return init, model


def assert_same_logits(ours, hf):
    x = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = hf(x).logits
        assert theirs.abs().max() > 0.5 and (ours(x, None)[..., :VOCAB] - theirs).abs().max() <= 1e-5


def test_a_sharded_gpt2_folder_loads_with_its_logits(tmp_path):
    torch.manual_seed(0)
    hf = saved(transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32,
                                                                    n_layer=2, n_head=4, n_inner=96)),
               tmp_path / "gpt2", max_shard_size="40KB")
    assert (tmp_path / "gpt2" / "model.safetensors.index.json").exists()  # shards behind an index
    init, ours = loaded(tmp_path / "gpt2")
    assert init.arch == "gpt2" and init.fields["max_seq_len"] == 64 and ours.config.mlp_ratio == 3.0
    assert ours.lm_head.weight is ours.embed.weight
    assert_same_logits(ours, hf)


def test_a_llama_with_a_tied_head_loads_into_the_untied_one(tmp_path):
    torch.manual_seed(0)
    hf = saved(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)), tmp_path / "tied")
    init, ours = loaded(tmp_path / "tied")
    assert (init.arch, init.fields["rope_theta"], init.fields["norm_eps"], ours.config.ffn_hidden) == (
        "llama", 10000.0, 1e-6, 64)
    assert_same_logits(ours, hf)


@pytest.mark.parametrize("config, words", [
    (dict(model_type="bert"), "is a 'bert' model; train_gpt.py starts from transformers' 'gpt2', 'llama'"),
    (dict(model_type="gpt2", n_embd=32, n_layer=1, n_head=2, n_positions=8, vocab_size=9,
          activation_function="relu"), "this GPT-2 has activation 'relu', which gpt2.py does not have"),
    (dict(model_type="llama", hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=9,
          num_hidden_layers=1, rope_scaling={"rope_type": "llama3", "factor": 8.0}), "RoPE scaling 'llama3'"),
])
def test_what_no_module_holds_is_one_user_error(tmp_path, config, words):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        init_from.open_checkpoint(str(tmp_path), modules())


def test_a_folder_without_the_files_is_one_user_error(tmp_path):
    with pytest.raises(UserError, match="has no config.json"):
        init_from.open_checkpoint(str(tmp_path), modules())
    (tmp_path / "config.json").write_text(json.dumps(dict(model_type="gpt2", n_embd=32, n_layer=1, n_head=2,
                                                          n_positions=8, vocab_size=9)))
    init = init_from.open_checkpoint(str(tmp_path), modules())
    module = modules()["gpt2"]
    with pytest.raises(UserError, match="has no model.safetensors.index.json"):
        init_from.load_weights(init, module, module.GPT(module.GPTConfig(**init.fields)))


def test_a_hub_that_cannot_be_reached_is_one_user_error_at_once(tmp_path, monkeypatch):
    """No endpoint answers: one line naming it, from one quick request (huggingface_hub would retry for ~30 s);
    offline (HF_HUB_OFFLINE) with nothing in the cache: one line naming the setting."""
    import time

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # (nothing listens on the discard port)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    start = time.monotonic()
    with pytest.raises(UserError, match=r"--init_from org/model: cannot reach the HuggingFace Hub at "
                                        r"http://127\.0\.0\.1:9 \(.*\); .*HF_HUB_OFFLINE=1"):
        init_from.open_checkpoint("org/model", modules())
    assert time.monotonic() - start < 20
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UserError, match="cannot fetch config.json from the Hub .*HF_HUB_OFFLINE=1 reads only"):
        init_from.open_checkpoint("org/model", modules())
