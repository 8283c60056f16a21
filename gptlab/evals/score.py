"""Log-likelihoods of (context, continuation) pairs, packed into full rows: one forward pass per row.

Each pair is the token sequence [eot] + context + continuation, split into context and continuation tokens as
lm-eval splits them (trailing spaces of the context move to the continuation; the continuation's tokens are those of
encode(context + continuation) after encode(context)); a longer one than MAX_SEQ_LEN + 1 is cut from the left as
lm-eval cuts it, <|endoftext|> included, and then gets a row of its own. Sequences are packed back to back into
rows of `row_len` tokens; the model's document masking (each <|endoftext|> starts a document nobody before it can
see) keeps them apart, and its rotary positions are relative, so a sequence scores as it does alone. Sliding
windows count whole blocks from absolute positions, so a sequence is placed mid-block only where it sees all of
itself both there and alone; otherwise it starts on a block boundary (as it does alone). Rows are filled longest-first, so padding is only
the ends of the rows a sequence did not fit.

Distributed: every rank packs the same rows and groups them into the same batches; batch b is computed by rank
b % world, and the results are gathered, so 1 and N ranks compute each batch identically (the same figures).
"""
import bisect
import itertools
import os

import numpy as np
import torch

from gptlab.core.distributed import all_gather_objects
from gptlab.core.errors import UserError
from gptlab.core.progress import progress_bar

# a longer sequence gets a row of its own; on a CPU rows are shorter: dense attention costs each token the row's length
DEFAULT_ROW_LEN = 256
CUDA_ROW_LEN = 512
# lm-eval's max_length: a longer sequence keeps its last MAX_SEQ_LEN + 1 tokens, <|endoftext|> cut with the context's
# first ones (lm-eval feeds (context + continuation)[-(max_length + 1):][:-1]: the last token is only a target)
MAX_SEQ_LEN = 2048
LOGITS_BUDGET_BYTES = 1 << 28  # a forward's float32 logits stay under this (rows x row_len x vocab x 4)
# on CUDA: 8x, so a GPU runs few large forwards (eager kernels are launch-bound on one 512-token row); a fixed
# figure, not the free memory, so every rank groups the rows alike
CUDA_LOGITS_BUDGET_BYTES = 1 << 31
# a forward's tokens stay under this (with .at the logits hardly bound a forward): on a CPU small forwards stay in
# cache, on a GPU large ones fill it
TOKENS_PER_FORWARD = 1 << 12
CUDA_TOKENS_PER_FORWARD = 1 << 16


def next_multiple(n, k):
    return -(-n // k) * k


def move_spaces(context, continuation):
    """lm-eval's pair: the context's trailing whitespace moved to the front of the continuation."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        return context[:-spaces], context[-spaces:] + continuation
    return context, continuation


def encode_pair(encode, context, continuation):
    """(context tokens, continuation tokens, continuation text scored): lm-eval's split of a pair."""
    context, continuation = move_spaces(context, continuation)
    whole = encode(context + continuation)
    context_tokens = encode(context)
    return context_tokens, whole[len(context_tokens):], continuation


def fit_context(tokens, start, max_len):
    """(tokens, start) of a built sequence cut to max_len tokens for a model that reads no more (GPT-2's position
    table): its last max_len tokens, cut from the left as build_sequences cuts (<|endoftext|> with the context), the
    continuation kept whole. The rows hold a sequence's last token too, so this keeps one token of context less than
    lm-eval with max_length = max_len (which never feeds the last token)."""
    if len(tokens) <= max_len:
        return tokens, start
    cut = len(tokens) - max_len
    if start - cut < 1:
        raise UserError(f"a continuation of {len(tokens) - start} tokens does not fit the model's context of "
                        f"{max_len} tokens (at most {max_len - 1}, after one token of context)")
    return list(tokens[cut:]), start - cut


def build_sequences(encode, eot, pairs, max_len=MAX_SEQ_LEN):
    """[(tokens, first continuation index)] of each (context, continuation): [eot] + context + continuation, of
    which a longer one than max_len + 1 keeps its last max_len + 1 tokens, as lm-eval cuts it (its input is them all
    but the last: max_len tokens, <|endoftext|> gone with the context's first tokens)."""
    out = []
    for context, continuation in pairs:
        ctx_tokens, cont_tokens, _ = encode_pair(encode, context, continuation)
        if len(cont_tokens) > max_len:  # (lm-eval asserts it)
            raise UserError(f"a continuation is {len(cont_tokens)} tokens, longer than the {max_len} a scored "
                            f"sequence can hold: {continuation[:60]!r}...")
        tokens = [eot] + ctx_tokens + cont_tokens
        if len(tokens) > max_len + 1:  # keep the continuation whole and the nearest context
            tokens = tokens[len(tokens) - max_len - 1:]
        out.append((tokens, len(tokens) - len(cont_tokens)))
    return out


def _fits(offset, length, block, window):
    """Whether a sequence at `offset` sees exactly what it sees at offset 0 (window: the smallest sliding window, in
    blocks, or None for none)."""
    if window is None or offset % block == 0:
        return True
    sees_all_alone = (length - 1) // block < window
    sees_all_here = (offset + length - 1) // block - offset // block < window
    return sees_all_alone and sees_all_here


def pack(lengths, row_len, block=1, window=None, tries=8, alone=None):
    """Place sequences of these lengths into rows: ([(row, offset)] per sequence, [width of each row]). Longest
    first, each into the row with the least room that holds it (best fit; at the row's end, or at the next block
    boundary when the window rule asks; the `tries` next-roomiest rows when that does not fit), else into a new row
    of row_len. A sequence longer than row_len gets a row of its own, rounded up to whole blocks, and so does one
    that alone[i] marks (a sequence cut to its last tokens starts with no <|endoftext|> to keep it apart)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    places = [None] * len(lengths)
    fill, widths = [], []  # used length and width of each row
    room = []  # sorted (free tokens, row) of the rows of width row_len with room left
    for i in order:
        length = lengths[i]
        if length > row_len or (alone is not None and alone[i]):
            widths.append(next_multiple(length, block))
            fill.append(length)
            places[i] = (len(widths) - 1, 0)
            continue
        first = bisect.bisect_left(room, (length, -1))
        for k in range(first, min(first + tries, len(room))):
            r = room[k][1]
            offset = fill[r] if _fits(fill[r], length, block, window) else next_multiple(fill[r], block)
            if offset + length <= row_len:
                del room[k]
                places[i], fill[r] = (r, offset), offset + length
                if fill[r] < row_len:
                    bisect.insort(room, (row_len - fill[r], r))
                break
        else:
            widths.append(row_len)
            fill.append(length)
            places[i] = (len(widths) - 1, 0)
            if length < row_len:
                bisect.insort(room, (row_len - length, len(widths) - 1))
    return places, widths


def model_geometry(model):
    """(block size, smallest final sliding window in blocks or None) of a gptlab model (plain models: (1, None))."""
    import sys
    module = sys.modules.get(type(model).__module__)
    block = int(getattr(module, "BLOCK_SIZE", 1))
    windows = model.final_windows() if hasattr(model, "final_windows") else None
    return block, (int(min(windows)) if windows else None)


def units_of(sequences, groups=None):
    """How sequences share rows' tokens: (first sequence, sequences, shared length) per unit, as arrays. groups:
    sizes of runs of consecutive sequences that may share their longest common prefix (an example's choices after
    one context); each run is then one unit, that prefix once and each sequence's rest after it. Without groups
    every sequence is a unit of its own, shared whole."""
    lengths = np.array([len(t) for t, _ in sequences], dtype=np.int64)
    if groups is None:
        return np.arange(len(sequences), dtype=np.int64), np.ones(len(sequences), dtype=np.int64), lengths
    counts = np.asarray(groups, dtype=np.int64)
    if counts.sum() != len(sequences) or (counts < 1).any():
        raise ValueError(f"groups {list(groups)[:5]}... do not split {len(sequences)} sequences into runs")
    first = np.cumsum(counts) - counts
    shared = np.array([len(os.path.commonprefix([sequences[i][0] for i in range(f, f + c)])) if c > 1
                       else lengths[f] for f, c in zip(first.tolist(), counts.tolist())], dtype=np.int64)
    return first, counts, shared


def score_sequences(logits_fn, sequences, *, eot, n_vocab, device="cpu", row_len=None, block=1,
                    window=None, ctx=None, padded_vocab=None, progress=False, desc="scoring", groups=None):
    """Per sequence (summed log-probability of its continuation tokens in nats, whether every continuation token is
    the model's greedy pick), in the order given, identical on every rank.

    logits_fn: LongTensor (B, T) → logits (B, T, >= n_vocab); it must keep documents apart (see the module). Where
    it has .at(tokens, rows, columns) → logits (N, >= n_vocab) at those positions only (model_source.ModelLogits),
    that is used: the head then runs on the scored positions alone. groups (sizes of runs of consecutive
    sequences, an example's choices): where logits_fn.trees (.at takes tree=(position ids, branch ids): the
    model's predict(tree=)), each run's common prefix is computed once, its sequences' rests as branches after it
    that see the prefix and not each other, each token at its position in its own sequence: the same figures for
    less work. row_len: default ROW_LEN on the device's type. The rows are laid out and sent to the device once,
    and the forwards run without waiting for the host: the scores come back in one copy at the end."""
    cuda = torch.device(device).type == "cuda"
    row_len = row_len or (CUDA_ROW_LEN if cuda else DEFAULT_ROW_LEN)
    at = getattr(logits_fn, "at", None)
    trees = groups is not None and at is not None and bool(getattr(logits_fn, "trees", False))
    limit = getattr(logits_fn, "max_len", None)  # a model that reads no longer sequences (GPT-2's positions)
    if limit:
        sequences = [fit_context(tokens, start, limit) for tokens, start in sequences]
    lengths = np.array([len(t) for t, _ in sequences], dtype=np.int64)
    starts = np.array([s for _, s in sequences], dtype=np.int64)
    first, counts, shared = units_of(sequences, groups if trees else None)
    unit_of = np.repeat(np.arange(len(first)), counts)
    rest = lengths - shared[unit_of]  # each sequence's tokens after its unit's shared prefix
    unit_len = shared + np.bincount(unit_of, weights=rest, minlength=len(first)).astype(np.int64)
    # a tree's tokens sit at their own positions, so the window rule of a mid-block start does not apply; a unit
    # that starts with no <|endoftext|> (cut to its last tokens) has a row of its own, so no document runs into it
    alone = [sequences[f][0][0] != eot for f in first.tolist()]
    places, widths = pack(unit_len.tolist(), next_multiple(row_len, block), block, None if trees else window,
                          alone=alone)
    row_of = np.array([r for r, _ in places], dtype=np.int64).reshape(-1)
    offset = np.array([o for _, o in places], dtype=np.int64).reshape(-1)
    scored = np.bincount(row_of[unit_of], weights=lengths - starts, minlength=len(widths)).astype(np.int64)
    vocab = padded_vocab or n_vocab
    batches = _batches(widths, scored.tolist() if at is not None else widths, vocab,
                       CUDA_LOGITS_BUDGET_BYTES if cuda else LOGITS_BUDGET_BYTES,
                       CUDA_TOKENS_PER_FORWARD if cuda else TOKENS_PER_FORWARD)
    rank, world = (ctx.rank, ctx.world_size) if ctx is not None and ctx.is_distributed else (0, 1)
    mine_batches = batches[rank::world]
    units = {"unit_of": unit_of, "first": first, "shared": shared, "rest": rest, "row": row_of, "offset": offset}
    layout = _layout(sequences, lengths, starts, units, widths, mine_batches, eot)
    # everything on the device in one copy each, before the first forward: no copy waits on a forward after that
    on_device = {k: layout[k].to(device) for k in ("tokens", "row", "pos", "target", "positions", "branches")}
    lps, greedies = [], []
    with torch.no_grad(), progress_bar(total=len(widths), unit="row", desc=desc,
                                       disable=not progress or rank != 0, leave=False) as bar:
        for b, batch in enumerate(mine_batches):
            (t0, t1), (e0, e1) = layout["token_span"][b], layout["entry_span"][b]
            shape = (len(batch), widths[batch[0]])
            rows = on_device["tokens"][t0:t1].view(shape)
            tree = (on_device["positions"][t0:t1].view(shape), on_device["branches"][t0:t1].view(shape)) \
                if trees else None
            lp, greedy = _score_batch(logits_fn, at, rows, on_device["row"][e0:e1], on_device["pos"][e0:e1],
                                      on_device["target"][e0:e1], n_vocab, tree)
            lps.append(lp)
            greedies.append(greedy)
            bar.update(len(batch) * world)
    mine = {}
    if mine_batches:  # one copy back; sums in float64 on the host, each sequence's tokens in order
        token_lp = torch.cat(lps).double().cpu()
        misses = (~torch.cat(greedies)).long().cpu()
        seg = layout["segment"]
        ids = layout["ids"]
        sums = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, seg, token_lp)
        missed = torch.zeros(len(ids), dtype=torch.long).index_add_(0, seg, misses)
        mine = {i: (float(sums[k]), bool(missed[k] == 0)) for k, i in enumerate(ids)}
    merged = {}
    for part in all_gather_objects(ctx, mine) if ctx is not None else [mine]:
        merged.update(part)
    return [merged[i] for i in range(len(sequences))]


def _layout(sequences, lengths, starts, units, widths, batches, eot):
    """The rows of these batches, one after another, as one flat LongTensor ("tokens"; batch b is
    tokens[token_span[b][0]:token_span[b][1]]) with each token's position in its own sequence ("positions") and
    branch ("branches": 0 in a unit's shared prefix, k for the rest of its k-th sequence); and every scored
    position as (row within its batch "row", column "pos", the token it predicts "target", sequence "segment" into
    "ids"), entries of batch b at entry_span[b]. A unit (units_of) sits at its row and offset: its shared prefix,
    then each sequence's rest in turn. Built with array operations: no loop over tokens."""
    unit_of, first, shared, rest = units["unit_of"], units["first"], units["shared"], units["rest"]
    n_rows = len(widths)
    widths = np.asarray(widths, dtype=np.int64)
    row_base = np.full(n_rows, -1, dtype=np.int64)  # where each row starts in the flat buffer (-1: not mine)
    row_in_batch = np.zeros(n_rows, dtype=np.int64)
    batch_of_row = np.full(n_rows, -1, dtype=np.int64)
    token_span, at = [], 0
    for b, batch in enumerate(batches):
        for k, r in enumerate(batch):
            row_base[r], row_in_batch[r], batch_of_row[r] = at + k * widths[r], k, b
        token_span.append((at, at + len(batch) * int(widths[batch[0]])))
        at = token_span[-1][1]
    tokens = np.full(at, eot, dtype=np.int64)
    positions = np.zeros(at, dtype=np.int64)
    branches = np.zeros(at, dtype=np.int64)
    row, offset = units["row"][unit_of], units["offset"][unit_of]  # per sequence: its unit's
    # where each sequence's rest starts in its unit: after the shared prefix and the rests before it in the unit
    before = np.cumsum(rest) - rest
    rest_at = shared[unit_of] + before - before[first[unit_of]]
    branch = np.arange(len(sequences)) - first[unit_of] + 1
    mine = np.nonzero(row_base[row] >= 0)[0]
    # my sequences by batch, then row, then offset: each batch's entries are contiguous, each sequence's in order
    mine = mine[np.lexsort((mine, offset[mine], row_in_batch[row[mine]], batch_of_row[row[mine]]))]
    lens = lengths[mine]
    flat = np.fromiter(itertools.chain.from_iterable(sequences[i][0] for i in mine), dtype=np.int64,
                       count=int(lens.sum()))
    base = np.zeros(len(sequences), dtype=np.int64)  # where each of my sequences starts in flat
    base[mine] = np.cumsum(lens) - lens
    column = row_base[row] + offset  # where each sequence's unit starts in the flat buffer
    # pieces: each unit's shared prefix (taken from its first sequence), then each sequence's rest
    heads = np.unique(first[unit_of[mine]])
    p_seq = np.concatenate([heads, mine])
    p_from = np.concatenate([np.zeros(len(heads), dtype=np.int64), shared[unit_of[mine]]])
    p_len = np.concatenate([shared[unit_of[heads]], rest[mine]])
    p_col = np.concatenate([column[heads], column[mine] + rest_at[mine]])
    p_branch = np.concatenate([np.zeros(len(heads), dtype=np.int64), branch[mine]])
    within = _ranges(p_len)
    dest = np.repeat(p_col, p_len) + within
    tokens[dest] = flat[np.repeat(base[p_seq] + p_from, p_len) + within]
    positions[dest] = np.repeat(p_from, p_len) + within
    branches[dest] = np.repeat(p_branch, p_len)
    n_scored = lens - starts[mine]
    # position p - 1 of a sequence predicts its token p, for p from the first continuation token to its end; a
    # position in the shared prefix is read there, one after it in the sequence's rest
    p = np.repeat(starts[mine] - 1, n_scored) + _ranges(n_scored)
    cut = np.repeat(shared[unit_of[mine]], n_scored)
    pos = np.repeat(offset[mine], n_scored) + np.where(p < cut, p, np.repeat(rest_at[mine], n_scored) + p - cut)
    target = flat[np.repeat(base[mine], n_scored) + p + 1]
    entry_row = np.repeat(row_in_batch[row[mine]], n_scored)
    segment = np.repeat(np.arange(len(mine)), n_scored)
    per_batch = np.bincount(np.repeat(batch_of_row[row[mine]], n_scored), minlength=len(batches))
    ends = np.cumsum(per_batch)
    entry_span = [(int(e - c), int(e)) for e, c in zip(ends, per_batch)]
    as_tensors = {"tokens": tokens, "positions": positions, "branches": branches, "row": entry_row, "pos": pos,
                  "target": target, "segment": segment}
    return {**{k: torch.from_numpy(v) for k, v in as_tensors.items()}, "ids": mine.tolist(),
            "token_span": token_span, "entry_span": entry_span}


def _ranges(counts):
    """0..c-1 for each c in counts, concatenated: _ranges([2, 3]) = [0, 1, 0, 1, 2]."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def _batches(widths, scored, vocab, budget=LOGITS_BUDGET_BYTES, max_tokens=None):
    """Rows grouped into forward passes: runs of rows of one width, each pass's float32 logits (scored[r] positions
    of row r, x vocab x 4 bytes) within the budget and its tokens within max_tokens (a row alone may pass either).
    scored: the row widths where the whole logits are made."""
    batches, logits, tokens = [], 0, 0
    for r, width in enumerate(widths):
        need = scored[r] * vocab * 4
        if (batches and widths[batches[-1][0]] == width and logits + need <= budget
                and (max_tokens is None or tokens + width <= max_tokens)):
            batches[-1].append(r)
            logits, tokens = logits + need, tokens + width
        else:
            batches.append([r])
            logits, tokens = need, width
    return batches


def _score_batch(logits_fn, at, rows, row_idx, pos_idx, targets, n_vocab, tree=None):
    """(log-probability, greedy) of each scored token (its target) of these rows, on the device, from one forward
    pass."""
    if at is not None:
        picked = at(rows, row_idx, pos_idx) if tree is None else at(rows, row_idx, pos_idx, tree=tree)
        shape = (len(row_idx), n_vocab)
    else:
        picked = logits_fn(rows)
        shape = (*rows.shape, n_vocab)
    if (not isinstance(picked, torch.Tensor) or picked.dim() != len(shape) or picked.shape[:-1] != shape[:-1]
            or picked.shape[-1] < n_vocab):
        raise UserError(f"the model gives logits of shape {tuple(getattr(picked, 'shape', ()))} for tokens "
                        f"{tuple(rows.shape)}; it must give (B, T, >= {n_vocab}) (the tokenizer's vocabulary)")
    if at is None:
        picked = picked[row_idx.to(picked.device), pos_idx.to(picked.device)]
    targets = targets.to(picked.device)
    logp = torch.log_softmax(picked[:, :n_vocab].float(), dim=-1)
    return logp.gather(1, targets[:, None])[:, 0], logp.argmax(dim=-1) == targets
