"""Bits per byte: a validation loss that compares across tokenizers.

    val_bpb = total cross-entropy in nats / ln 2 / total UTF-8 bytes of the target tokens

Special tokens (<|endoftext|>) and the model's vocabulary padding count 0 bytes: they stand for no text.
"""
import math

import torch

from gptlab.core.distributed import all_reduce_sum
from gptlab.dataset.loader import to_device


def token_byte_lengths(encoding, size):
    """(size,) float64 tensor: UTF-8 byte count of every token id of a tiktoken Encoding; ids that are special
    tokens, or beyond the vocabulary (padding up to `size`), count 0."""
    special_ids = {encoding.encode_single_token(s) for s in encoding.special_tokens_set}
    lengths = torch.zeros(size, dtype=torch.float64)
    for token_id in range(min(encoding.n_vocab, size)):
        if token_id not in special_ids:
            lengths[token_id] = len(encoding.decode_single_token_bytes(token_id))
    return lengths


def bits_per_byte(loss_nats, n_bytes):
    """Total loss in nats over targets holding n_bytes of text → bits per byte."""
    return loss_nats / math.log(2) / max(n_bytes, 1)


def evaluate_val(loss_fn, val_set, rows_per_batch, byte_lengths, ctx, lockstep=False):
    """(val_loss nats/token, val_bpb) over a fixed validation set, summed over ranks in float64.

    loss_fn(x, y): the summed cross-entropy (nats) of a batch of inputs x and targets y, LongTensors (B, T) on
    ctx.device; val_set: a gptlab.dataset.loader.ValidationSet; byte_lengths: token_byte_lengths(...).
    lockstep: every rank calls loss_fn equally often (an FSDP model all-gathers in each call): a rank with one
    batch fewer (the rows do not divide by the ranks) runs its first batch once more and drops the result."""
    with torch.no_grad():  # no graph: one kept alive by the all-reduced totals would waste memory
        totals = torch.zeros(3, dtype=torch.float64, device=ctx.device)  # loss nats, target tokens, target bytes
        calls, first = 0, None
        for x_np, y_np in val_set.batches(rows_per_batch):
            x, y = to_device(x_np, ctx.device), to_device(y_np, ctx.device)
            totals[0] += loss_fn(x, y).double()
            totals[1] += y.numel()
            totals[2] += int(byte_lengths[torch.from_numpy(y_np)].sum())  # on the host: no GPU round trip
            calls += 1
            if lockstep and first is None:
                first = (x, y)
        if lockstep:
            most_rows = -(-val_set.n_rows // ctx.world_size)
            for _ in range(-(-most_rows // rows_per_batch) - calls):
                loss_fn(*first)
        all_reduce_sum(ctx, totals)
    loss_nats, n_tokens, n_bytes = totals.tolist()
    return loss_nats / n_tokens, bits_per_byte(loss_nats, n_bytes)
