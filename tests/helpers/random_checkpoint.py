"""A train_gpt checkpoint with random weights, for tests of what reads checkpoints (export, sampling).

A freshly initialised GPT has zero output projections and head, so its logits ignore the input; these weights are
random everywhere, so every part of the network (windows, documents, value embeddings, skips) moves the logits.
"""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def save_random_checkpoint(path, tokenizer_path, *, num_layers=6, num_heads=2, model_dim=64, num_val_emb=2,
                           window_size=256, train_steps=10, max_seq_len=256, seed=0):
    """Write a checkpoint at path for the tokenizer at tokenizer_path; its final windows are window_size tokens
    (long) and half that (short). Returns the checkpoint's model_config."""
    import torch

    import train_gpt
    from gptlab import experiment as exp
    from gptlab.tokenizer import open_tokenizer

    tok = open_tokenizer(tokenizer_path)
    model_config = {"vocab_size": tok.encoding.n_vocab, "num_layers": num_layers, "num_heads": num_heads,
                    "head_dim": model_dim // num_heads, "model_dim": model_dim, "mlp_ratio": 4.0,
                    "num_val_emb": num_val_emb, "max_seq_len": max_seq_len}
    torch.manual_seed(seed)
    model = train_gpt.GPT(**model_config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (1.0 if name == "lm_head.weight" else 0.2))
    exp.save_checkpoint(path, model_state=model.state_dict(), model_config=model_config, step=train_steps,
                        args={"tokenizer": tokenizer_path, "train_steps": train_steps, "window_size": window_size},
                        tokenizer={"name": tok.name, "ranks_sha256": tok.ranks_sha256})
    return model_config
