"""Round-3 mutants (bench/mutants.py) that only an exported Hugging Face folder can show: the expectation comes from
transformers' documented convention (labels are the inputs; the model shifts them) and the checkpoint's own logits."""
import os

import pytest
import torch
import torch.nn.functional as F

from conftest import FINEWEB_150, SHARED_DATA, run_script
from gptlab.checkpoint.model_source import checkpoint_logits_fn

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout"),
              pytest.mark.usefixtures("one_torch_thread")]


def test_the_exported_models_loss_with_labels_is_next_token_cross_entropy(tmp_path):
    # transformers' causal-LM convention: labels=input_ids, and the loss is the mean cross-entropy of the logits at
    # positions 0..T-2 against the tokens at 1..T-1 (computed here from the checkpoint's own logits)
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer
    from transformers import AutoModelForCausalLM

    tok_path = save_tiny_tokenizer(str(tmp_path / "tok_v556.pkl"), read_docs(FINEWEB_150)[:40], 300)
    ckpt_path = str(tmp_path / "step_000010.pt")
    save_random_checkpoint(ckpt_path, tok_path, window_size=256)
    out_dir = str(tmp_path / "hf_model")
    run_script(["export_hf.py", ckpt_path, out_dir], check=True)
    logits_fn, enc, _ = checkpoint_logits_fn(ckpt_path)
    ids = torch.tensor([[enc.eot_token] + enc.encode_ordinary(read_docs(FINEWEB_150)[0])[:60]])
    model = AutoModelForCausalLM.from_pretrained(out_dir, trust_remote_code=True).float().eval()
    with torch.no_grad():
        loss = model(ids, labels=ids).loss
        expected = F.cross_entropy(logits_fn(ids)[0, :-1].float(), ids[0, 1:])
    assert float(loss) == pytest.approx(float(expected), rel=1e-4)
