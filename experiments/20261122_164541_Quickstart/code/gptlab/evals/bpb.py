"""Bits per byte: a validation loss that compares across tokenizers.

    val_bpb = total cross-entropy in nats / ln 2 / total UTF-8 bytes of the target tokens

Special tokens (<|endoftext|>) and the model's vocabulary padding count 0 bytes: they stand for no text.
"""
import math


def token_byte_lengths(encoding, size):
    """(size,) float64 tensor: UTF-8 byte count of every token id of a tiktoken Encoding; ids that are special
    tokens, or beyond the vocabulary (padding up to `size`), count 0."""
    import torch

    special_ids = {encoding.encode_single_token(s) for s in encoding.special_tokens_set}
    lengths = torch.zeros(size, dtype=torch.float64)
    for token_id in range(min(encoding.n_vocab, size)):
        if token_id not in special_ids:
            lengths[token_id] = len(encoding.decode_single_token_bytes(token_id))
    return lengths


def bits_per_byte(loss_nats, n_bytes):
    """Total loss in nats over targets holding n_bytes of text → bits per byte."""
    return loss_nats / math.log(2) / max(n_bytes, 1)
