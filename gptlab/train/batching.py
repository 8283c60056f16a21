"""The arithmetic of a step's batch: the global batch split into ranks x micro-batches, and on a GPU the
largest micro-batch that fits, chosen from a probe.
"""
from gptlab.core.errors import UserError


def split_batch(batch_size, seq_len, world_size, device_batch_size, grad_acc_steps=None):
    """How a GLOBAL batch of `batch_size` tokens is cut: (grad_acc_steps, tokens per micro-batch), so that
    batch_size = world_size x grad_acc_steps x micro-batch and every micro-batch holds whole rows of seq_len.
    grad_acc_steps (positive, as the flag's type makes it) defaults to batch_size / (world_size x
    device_batch_size)."""
    if batch_size % seq_len:
        raise UserError(f"--batch_size {batch_size} is not a multiple of --train_seq_len {seq_len}; "
                        f"use {max(1, batch_size // seq_len) * seq_len}")
    if batch_size < world_size * seq_len:
        raise UserError(f"--batch_size {batch_size} tokens holds fewer than one row of {seq_len} per "
                        f"rank for {world_size} ranks; raise --batch_size to at least "
                        f"{world_size * seq_len} or use fewer ranks")
    if grad_acc_steps is None:
        per_rank = batch_size // world_size
        if batch_size % world_size or per_rank % device_batch_size and device_batch_size < per_rank:
            raise UserError(f"--batch_size {batch_size} is not world_size {world_size} x a whole number of "
                            f"--device_batch_size {device_batch_size}; pick sizes that divide, or pass "
                            "--grad_acc_steps")
        grad_acc_steps = max(1, per_rank // device_batch_size)
    micro_tokens, rem = divmod(batch_size, world_size * grad_acc_steps)
    if rem or micro_tokens % seq_len or micro_tokens == 0:
        raise UserError(f"--batch_size {batch_size} cannot be split into world_size {world_size} x "
                        f"grad_acc_steps {grad_acc_steps} micro-batches of whole {seq_len}-token rows; "
                        f"use a multiple of {world_size * grad_acc_steps * seq_len}")
    return grad_acc_steps, micro_tokens


def micro_batch_candidates(per_rank_tokens, seq_len):
    """Micro-batch sizes (tokens) that cut a rank's share of the global batch into whole micro-batches of whole
    rows, largest first."""
    rows = per_rank_tokens // seq_len
    return [rows // k * seq_len for k in range(1, rows + 1) if rows % k == 0]


def choose_micro_batch(candidates, measure, capacity_bytes, fixed_bytes=0, extra_bytes=0, headroom=0.1):
    """The largest micro-batch (tokens) whose forward+backward fits the device with headroom, for
    --device_batch_size auto; the global batch stays fixed (gradient accumulation fills the gap), so the choice
    never changes the loss curve.

    measure(tokens) runs one forward+backward and returns its peak bytes, or raises MemoryError when it does not
    fit; fixed_bytes is the part of a peak that does not grow with the batch (weights and their gradients),
    extra_bytes what the peak lacks (optimizer states, made at the first step). One probe at the smallest size
    gives the cost per token; the largest candidate predicted to fit is then measured itself and, if it does not
    fit after all, the next smaller one. Returns (tokens, [(tokens, measured peak or None for out of memory)])."""
    budget = capacity_bytes * (1 - headroom) - extra_bytes
    candidates = sorted(set(candidates), reverse=True)
    smallest = candidates[-1]
    tried = []

    def fits(tokens):
        try:
            peak = measure(tokens)
        except MemoryError:
            tried.append((tokens, None))
            return None
        tried.append((tokens, peak))
        return peak if peak <= budget else None

    base = fits(smallest)
    if base is None:
        raise UserError(f"even a micro-batch of {smallest} tokens does not fit the device's memory "
                        f"({capacity_bytes / 2**30:.1f} GiB with {headroom:.0%} headroom); lower --train_seq_len or "
                        "use a smaller model")
    per_token = max(0, base - fixed_bytes) / smallest
    for tokens in candidates:
        if tokens == smallest:
            return smallest, tried
        if fixed_bytes + per_token * tokens > budget:
            continue
        if fits(tokens) is not None:
            return tokens, tried
    return smallest, tried
