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
    # divisor pairs up to sqrt(rows): a huge --batch_size must not loop once per row
    divisors = {d for k in range(1, int(rows ** 0.5) + 2) if k <= rows and rows % k == 0 for d in (k, rows // k)}
    return sorted((d * seq_len for d in divisors), reverse=True)


def choose_micro_batch(candidates, measure, capacity_bytes, fixed_bytes=0, extra_bytes=0, headroom=0.1,
                       per_token_guess=None):
    """The largest micro-batch (tokens) whose forward+backward fits the device with headroom, for
    --device_batch_size auto; the global batch stays fixed (gradient accumulation fills the gap), so the choice
    never changes the loss curve.

    measure(tokens) runs one forward+backward and returns its peak bytes, or raises MemoryError when it does not
    fit; fixed_bytes is the part of a peak that does not grow with the batch (weights and their gradients),
    extra_bytes what the peak lacks (optimizer states, made at the first step). The cost per token comes from
    per_token_guess (bytes; an estimate from the model's shape) or, without one, from a probe at the smallest
    size. The largest candidate predicted to fit is measured; a peak over budget corrects the cost per token and the
    next prediction follows from it (after an out-of-memory, the next smaller candidate predicted to fit).
    With a good guess the first measurement is the micro-batch training then uses, so a compiled model makes one
    graph for both (a 1-row probe would compile one more). Returns (tokens, [(tokens, measured peak or None for
    out of memory)])."""
    budget = capacity_bytes * (1 - headroom) - extra_bytes
    candidates = sorted(set(candidates), reverse=True)
    smallest = candidates[-1]
    tried = []

    def attempt(tokens):
        try:
            peak = measure(tokens)
        except MemoryError:
            peak = None
        tried.append((tokens, peak))
        return peak

    def too_small():
        return UserError(f"even a micro-batch of {smallest} tokens does not fit the device's memory "
                         f"({capacity_bytes / 2**30:.1f} GiB with {headroom:.0%} headroom); lower --train_seq_len "
                         "or use a smaller model")

    per_token = per_token_guess
    if per_token is None:
        base = attempt(smallest)
        if base is None or base > budget:
            raise too_small()
        per_token = max(0, base - fixed_bytes) / smallest
    for tokens in candidates:
        if any(t == tokens for t, _ in tried):  # the smallest, measured above and fitting
            return tokens, tried
        if tokens != smallest and fixed_bytes + per_token * tokens > budget:
            continue
        peak = attempt(tokens)
        if peak is not None and peak <= budget:
            return tokens, tried
        if peak is not None:  # over budget: its peak gives the cost per token (out of memory: the next one down)
            per_token = max(per_token, (peak - fixed_bytes) / tokens)
    raise too_small()


def probe_batch(tokens, seq_len, vocab_size, eot, device):
    """Random (inputs, targets) of `tokens` tokens for a memory probe, laid out as the loader's batches are: two
    contiguous (tokens // seq_len, seq_len) int64 tensors, each row starting with <|endoftext|>. Views of one
    (B, T + 1) tensor would have stride T + 1, and a model compiled with dynamic=False guards on strides: training
    would compile a second graph. A generator of its own leaves training's RNG untouched."""
    import torch  # heavy: only where a probe runs (compare_experiments.py imports this module's siblings)

    rows = torch.randint(0, vocab_size, (tokens // seq_len, seq_len + 1),
                         generator=torch.Generator(device).manual_seed(0), device=device)
    rows[:, 0] = eot
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
