"""Embeddings held in bfloat16 under bfloat16 training (model.py's GPT.store_embeddings_in, decided in
train_gpt.py), as modded-nanogpt record #26 holds them: float32 training keeps them in float32, checkpoints hold
float32 whatever the training dtype, and such a checkpoint loads, samples and resumes on a CPU."""
import glob
import os
import sys

import torch

from conftest import REPO
from helpers.tiny_runs import only_run_dir, tiny_args
from gptlab.checkpoint import checkpointing, model_source
from gptlab.train import records

sys.path.insert(0, REPO)
import model as arch  # noqa: E402
import train_gpt  # noqa: E402

EMBEDDINGS = ("embed.weight", "value_embeds.0.weight", "value_embeds.1.weight")


def small_model():
    torch.manual_seed(0)
    return arch.GPT(arch.GPTConfig(vocab_size=200, num_layers=4, num_heads=2, head_dim=16, model_dim=32,
                                   num_val_emb=2, max_seq_len=128))


def test_bf16_embeddings_give_float32_state_dicts_and_run_without_autocast():
    model = small_model()
    model.store_embeddings_in(torch.bfloat16)
    with torch.no_grad():  # non-zero output projections and head, so every weight shows in the logits
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert all(dtypes.pop(n) == torch.bfloat16 for n in EMBEDDINGS)
    assert set(dtypes.values()) == {torch.float32}  # the head, the blocks and the scalars stay float32
    state = model.state_dict()
    assert all(state[n].dtype == torch.float32 for n in state)
    assert all(torch.equal(state[n], model.get_parameter(n).float()) for n in EMBEDDINGS)  # upcast exactly
    # a float32 model holding the same (rounded) values: the same logits without autocast, bit for bit
    plain = small_model()
    plain.load_state_dict(state)
    assert all(plain.get_parameter(n).dtype == torch.float32 for n in EMBEDDINGS)
    idx = torch.randint(0, 200, (2, 128))
    masks = arch.build_attention_masks(idx, 199, 1, 1, use_flex=False)
    with torch.no_grad():
        assert torch.equal(model(idx, masks), plain(idx, masks))


def test_a_bf16_run_holds_its_embeddings_in_bf16_and_its_checkpoint_loads_and_resumes_on_cpu(tiny, tmp_path,
                                                                                             monkeypatch):
    seen = []
    build = train_gpt.build_optimizers

    def spy(model, *args, **kwargs):  # the parameters' dtypes when training starts
        seen.append({n: p.dtype for n, p in model.named_parameters()})
        return build(model, *args, **kwargs)

    monkeypatch.setattr(train_gpt, "build_optimizers", spy)
    train_gpt.main(tiny_args(tiny, tmp_path / "bf16", dtype="bfloat16", train_steps=3, val_loss_every=0,
                             save_model=True))
    train_gpt.main(tiny_args(tiny, tmp_path / "fp32", dtype="float32", train_steps=3, val_loss_every=0))
    (bf16, fp32) = seen
    embeddings = {n for n in bf16 if n.startswith(("embed.", "value_embeds."))}
    assert embeddings and all(bf16[n] == torch.bfloat16 for n in embeddings)
    assert all(bf16[n] == torch.float32 for n in bf16 if n not in embeddings)
    assert set(fp32.values()) == {torch.float32}  # float32 training: as before

    (path,) = glob.glob(os.path.join(only_run_dir(tmp_path / "bf16"), records.CHECKPOINT_DIR, "*.pt"))
    state = checkpointing.load_checkpoint(path)["model"]
    assert all(state[n].dtype == torch.float32 for n in state)
    assert all(torch.equal(state[n], state[n].bfloat16().float()) for n in embeddings)  # trained in bfloat16
    model, _, _ = model_source.load_model(path)  # sample.py, export_hf.py and the evaluations load so
    assert all(p.dtype == torch.float32 for p in model.parameters())
    logits = model.predict(torch.randint(0, 100, (1, 40)), eot=0)
    assert logits.shape[:2] == (1, 40) and torch.isfinite(logits).all()

    seen.clear()
    train_gpt.main(["--resume", path, "--dtype", "float32", "--train_steps", "4", "--experiments_dir",
                    str(tmp_path / "resumed")])
    assert set(seen[0].values()) == {torch.float32}
    with open(os.path.join(only_run_dir(tmp_path / "resumed"), records.RESULTS_FILE)) as f:
        assert '"status": "finished"' in f.read()
