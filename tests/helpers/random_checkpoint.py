"""A train_gpt.py checkpoint with random weights, for tests of what reads checkpoints (export, sampling).

A freshly initialised GPT has zero output projections and head, so its logits ignore the input; these weights are
random everywhere, so every part of the network (windows, documents, value embeddings, skips) moves the logits.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def save_random_checkpoint(path, tokenizer_path, *, num_layers=6, num_heads=2, model_dim=64, num_val_emb=2,
                           window_size=256, train_steps=10, max_seq_len=256, seed=0, model_source=None, arch=None,
                           **fields):
    """Write a checkpoint at path for the tokenizer at tokenizer_path; its final windows are window_size tokens
    (long) and half that (short). model_source: a {file, code, sha256} dict (default: today's model.py; the model
    is built from it). arch: another architecture's module of today (gpt2, llama), with only the settings its
    GPTConfig has (fields: more of them, e.g. num_kv_heads). Returns the checkpoint's model_config."""
    import dataclasses

    import torch

    from gptlab.checkpoint import checkpointing
    from gptlab.tokenizer.format import open_tokenizer
    from gptlab.checkpoint import model_source as ms

    tok = open_tokenizer(tokenizer_path)
    if arch is not None:
        source = ms.current_source(ms.arch_file(arch))
        module = ms.current_module(source["file"])
    else:
        source = model_source or ms.current_source()
        module = ms.import_file(ms.MODEL_FILE, ms.MODULE_NAME) if model_source is None else None
    if module is None:
        import tempfile
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "m.py"), "w") as f:
            f.write(source["code"])
        module = ms.import_file(os.path.join(folder, "m.py"), f"random_ckpt_model_{source['sha256'][:12]}")
    settings = dict(vocab_size=tok.encoding.n_vocab, num_layers=num_layers, num_heads=num_heads, model_dim=model_dim,
                    num_val_emb=num_val_emb, window_size=window_size, max_seq_len=max_seq_len, **fields)
    known = {f.name for f in dataclasses.fields(module.GPTConfig)}
    config = module.GPTConfig(**{k: v for k, v in settings.items() if k in known})
    model_config = dataclasses.asdict(config)
    torch.manual_seed(seed)
    model = module.GPT(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (1.0 if name == "lm_head.weight" else 0.2))
    checkpointing.save_checkpoint(path, model_state=model.state_dict(), model_config=model_config, step=train_steps,
                        args={"tokenizer": tokenizer_path, "train_steps": train_steps, "window_size": window_size},
                        tokenizer={"name": tok.name, "ranks_sha256": tok.ranks_sha256}, model_source=source)
    return model_config
