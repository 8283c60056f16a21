"""export_hf.py ships the checkpoint's own model source: a checkpoint trained by an edited model.py (a SwiGLU MLP,
with a weight today's model.py does not have) exports, only with --trust_model_code since no run here trained it,
and transformers runs that edited source. The reference is the checkpoint's own model, built from its source by
gptlab.checkpoint.model_source."""
import json
import os
import re

import pytest
import torch

from conftest import FINEWEB_150, SHARED_DATA, TINY_SHAKESPEARE, run_script
from gptlab.checkpoint import model_source as ms

pytest.importorskip("transformers")
pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]

SWIGLU_MLP = '''class MLP(nn.Module):
    # SwiGLU (Shazeer 2020), an edit for tests/e2e/test_hf_export_model_source.py: a gate beside c_fc
    def __init__(self, dim, mlp_ratio):
        super().__init__()
        hidden = int(mlp_ratio * dim)
        self.c_fc = CastedLinear(dim, hidden)
        self.c_gate = CastedLinear(dim, hidden)
        self.c_proj = CastedLinear(hidden, dim, zero_init=True)

    def forward(self, x):
        return self.c_proj(F.silu(self.c_gate(x)) * self.c_fc(x))


'''


def swiglu_source():
    """Today's model.py with its MLP class replaced by SWIGLU_MLP, as a checkpoint records a model source."""
    code = ms.current_source()["code"]
    start, end = code.index("class MLP(nn.Module):"), code.index("class Block(nn.Module):")
    edited = code[:start] + SWIGLU_MLP + code[end:]
    return {"file": "model.py", "code": edited, "sha256": ms.sha256_text(edited)}


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """(checkpoint path, its model source, out_dir, refused CLI run, CLI run with --trust_model_code)."""
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer

    folder = tmp_path_factory.mktemp("hf_swiglu")
    tok_path = save_tiny_tokenizer(str(folder / "tok_300.pkl"), read_docs(FINEWEB_150)[:40]
                                   + read_docs(TINY_SHAKESPEARE)[:200], 300)
    source = swiglu_source()
    ckpt_path = str(folder / "step_000010.pt")
    save_random_checkpoint(ckpt_path, tok_path, num_layers=4, window_size=256, model_source=source)
    out_dir = str(folder / "hf_model")
    env = {"GPTLAB_HOME": str(folder / "gptlab_home")}  # an empty store: no run on this machine trained it
    refused = run_script(["export_hf.py", ckpt_path, out_dir], env_extra=env)
    trusted = run_script(["export_hf.py", ckpt_path, out_dir, "--trust_model_code"], env_extra=env)
    return ckpt_path, source, out_dir, refused, trusted


def test_a_foreign_model_source_needs_trust_model_code(edited):
    ckpt_path, source, out_dir, refused, trusted = edited
    assert refused.returncode == 2 and refused.stdout == ""
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--trust_model_code" in lines[0], refused.stderr
    assert source["sha256"][:12] in lines[0]
    assert trusted.returncode == 0, trusted.stderr
    checked = re.search(r"checked with transformers: (\d+) tokens, tokenizer (\w+), max \|logits difference\| (\S+);",
                        trusted.stdout)
    assert checked and checked.group(2) == "identical" and float(checked.group(3)) <= 1e-4, trusted.stdout


def test_an_edited_architecture_exports_with_its_own_source(edited):
    """The folder holds the edited source verbatim, transformers loads the gate's weights and runs it: its logits
    are the checkpoint's own model's, and differ from what today's MLP (no gate) makes of the same weights."""
    from transformers import AutoModelForCausalLM

    ckpt_path, source, out_dir, _, trusted = edited
    assert trusted.returncode == 0, trusted.stderr
    with open(os.path.join(out_dir, "gptlab_model.py"), encoding="utf-8", newline="") as f:
        assert f.read() == source["code"]
    hf_model = AutoModelForCausalLM.from_pretrained(out_dir, trust_remote_code=True).float().eval()
    assert "model.blocks.0.mlp.c_gate.weight" in hf_model.state_dict()
    logits_fn, enc, ckpt = ms.checkpoint_logits_fn(ckpt_path, trust_code=True)
    assert json.load(open(os.path.join(out_dir, "config.json")))["model_config"] == ckpt["model_config"]
    eot = enc.eot_token
    row = [eot] + enc.encode_ordinary("The water cycle moves water between the oceans, the air and the land. " * 4)
    with torch.no_grad():
        got = hf_model(torch.tensor([row])).logits
        expected = logits_fn(torch.tensor([row]))
        assert got.shape == expected.shape == (1, len(row), enc.n_vocab)
        assert (got - expected).abs().max() <= 1e-5
        # today's model.py with the same weights (it has no gate: strict=False drops them) is another model
        today = ms.model_from_config(ms.current_module(), ckpt["model_config"])
        missing, unexpected = today.load_state_dict(ckpt["model"], strict=False)
        assert not missing and unexpected and all(".c_gate." in name for name in unexpected)
        assert (today.predict(torch.tensor([row]), eot)[..., :enc.n_vocab] - got).abs().max() > 1e-2


def test_the_wrapper_imports_its_sibling_afresh_whenever_it_runs(tmp_path, monkeypatch):
    """transformers 4 names an export's modules after its folder alone, and runs modeling_gptlab.py again for
    another folder of that name: the wrapper must then build that folder's gptlab_model, not the one imported
    before under the same name."""
    import importlib
    import shutil
    import sys
    import types

    from gptlab.export.hf_folder import MODELING_FILE

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    shutil.copyfile(MODELING_FILE, tmp_path / "modeling_gptlab.py")
    (tmp_path / "gptlab_model.py").write_text(ms.current_source()["code"], encoding="utf-8")
    name = "gptlab_test_hf_folder"
    package = types.ModuleType(name)
    package.__path__ = [str(tmp_path)]
    monkeypatch.setitem(sys.modules, name, package)
    try:
        config = dict(vocab_size=300, num_layers=2, num_heads=2, model_dim=32)
        wrapper = importlib.import_module(f"{name}.modeling_gptlab")
        assert not any(".c_gate." in key for key in wrapper.GPT(wrapper.GPTConfig(**config)).state_dict())
        (tmp_path / "gptlab_model.py").write_text(swiglu_source()["code"], encoding="utf-8")
        wrapper = importlib.reload(wrapper)  # what transformers 4 does when a folder's files differ
        assert any(".c_gate." in key for key in wrapper.GPT(wrapper.GPTConfig(**config)).state_dict())
    finally:
        for key in [key for key in sys.modules if key.startswith(name + ".")]:
            del sys.modules[key]
