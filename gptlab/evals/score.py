"""Log-likelihoods of (context, continuation) pairs, packed into full rows: one forward pass per row.

Each pair is the token sequence [eot] + context + continuation, split into context and continuation tokens as
lm-eval splits them (trailing spaces of the context move to the continuation; the continuation's tokens are those of
encode(context + continuation) after encode(context)). Sequences are packed back to back into rows of `row_len`
tokens; the model's document masking (each <|endoftext|> starts a document nobody before it can see) keeps them
apart, and its rotary positions are relative, so a sequence scores as it does alone. Sliding windows count whole
blocks from absolute positions, so a sequence is placed mid-block only where it sees all of itself both there and
alone; otherwise it starts on a block boundary (as it does alone). Rows are filled longest-first, so padding is only
the ends of the rows a sequence did not fit.

Distributed: every rank packs the same rows and groups them into the same batches; batch b is computed by rank
b % world, and the results are gathered, so 1 and N ranks compute each batch identically (the same figures).
"""
import bisect

import torch

from gptlab.core.distributed import all_gather_objects
from gptlab.core.errors import UserError
from gptlab.core.progress import progress_bar

DEFAULT_ROW_LEN = 512  # a longer sequence gets a row of its own
MAX_SEQ_LEN = 2048  # a longer sequence keeps its last tokens (the context is cut from the left, as lm-eval does)
LOGITS_BUDGET_BYTES = 1 << 28  # a forward's float32 logits stay under this (rows x row_len x vocab x 4)
# on CUDA: 8x, so a GPU runs few large forwards (eager kernels are launch-bound on one 512-token row); a fixed
# figure, not the free memory, so every rank groups the rows alike
CUDA_LOGITS_BUDGET_BYTES = 1 << 31


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


def build_sequences(encode, eot, pairs, max_len=MAX_SEQ_LEN):
    """[(tokens, first continuation index)] of each (context, continuation), [eot] first, cut to max_len tokens."""
    out = []
    for context, continuation in pairs:
        ctx_tokens, cont_tokens, _ = encode_pair(encode, context, continuation)
        if len(cont_tokens) + 1 > max_len:
            raise UserError(f"a continuation is {len(cont_tokens)} tokens, longer than a scored row can hold "
                            f"({max_len - 1}): {continuation[:60]!r}...")
        tokens = [eot] + ctx_tokens + cont_tokens
        if len(tokens) > max_len:  # keep the continuation whole and the nearest context
            tokens = [eot] + tokens[len(tokens) - max_len + 1:]
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


def pack(lengths, row_len, block=1, window=None, tries=8):
    """Place sequences of these lengths into rows: ([(row, offset)] per sequence, [width of each row]). Longest
    first, each into the row with the least room that holds it (best fit; at the row's end, or at the next block
    boundary when the window rule asks; the `tries` next-roomiest rows when that does not fit), else into a new row
    of row_len. A sequence longer than row_len gets a row of its own, rounded up to whole blocks."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    places = [None] * len(lengths)
    fill, widths = [], []  # used length and width of each row
    room = []  # sorted (free tokens, row) of the rows of width row_len with room left
    for i in order:
        length = lengths[i]
        if length > row_len:
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


def score_sequences(logits_fn, sequences, *, eot, n_vocab, device="cpu", row_len=DEFAULT_ROW_LEN, block=1,
                    window=None, ctx=None, padded_vocab=None, progress=False, desc="scoring"):
    """Per sequence (summed log-probability of its continuation tokens in nats, whether every continuation token is
    the model's greedy pick), in the order given, identical on every rank.

    logits_fn: LongTensor (B, T) → logits (B, T, >= n_vocab); it must keep documents apart (see the module)."""
    lengths = [len(t) for t, _ in sequences]
    places, widths = pack(lengths, next_multiple(row_len, block), block, window)
    by_row = [[] for _ in widths]
    for i, (r, offset) in enumerate(places):
        by_row[r].append((i, offset))
    cuda = torch.device(device).type == "cuda"
    batches = _batches(widths, padded_vocab or n_vocab, CUDA_LOGITS_BUDGET_BYTES if cuda else LOGITS_BUDGET_BYTES)
    rank, world = (ctx.rank, ctx.world_size) if ctx is not None and ctx.is_distributed else (0, 1)
    mine = {}
    with torch.no_grad(), progress_bar(total=len(widths), unit="row", desc=desc,
                                       disable=not progress or rank != 0, leave=False) as bar:
        for batch in batches[rank::world]:
            rows = torch.full((len(batch), widths[batch[0]]), eot, dtype=torch.long)
            spans = []
            for k, r in enumerate(batch):
                spans.append([])
                for i, offset in by_row[r]:
                    tokens, start = sequences[i]
                    rows[k, offset:offset + len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                    spans[k].append((i, offset + start, offset + len(tokens)))
            mine.update(_score_batch(logits_fn, rows, spans, n_vocab, device))
            bar.update(len(batch) * world)
    merged = {}
    for part in all_gather_objects(ctx, mine) if ctx is not None else [mine]:
        merged.update(part)
    return [merged[i] for i in range(len(sequences))]


def _batches(widths, vocab, budget=LOGITS_BUDGET_BYTES):
    """Rows grouped into forward passes: runs of rows of one width, each pass's logits within the budget."""
    batches = []
    for r, width in enumerate(widths):
        per_forward = max(1, budget // (width * vocab * 4))
        if batches and widths[batches[-1][0]] == width and len(batches[-1]) < per_forward:
            batches[-1].append(r)
        else:
            batches.append([r])
    return batches


def _score_batch(logits_fn, rows, by_row, n_vocab, device):
    """{sequence index: (log-prob sum, greedy)} of the sequences in these rows, from one forward pass."""
    row_idx, pos_idx, seq_idx, ids = [], [], [], []
    for r, seqs in enumerate(by_row):
        for i, first, end in seqs:
            for p in range(first, end):  # position p - 1 predicts token p
                row_idx.append(r)
                pos_idx.append(p - 1)
            seq_idx += [i] * (end - first)
            ids.append(i)
    logits = logits_fn(rows.to(device))
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.shape[2] < n_vocab:
        raise UserError(f"the model gives logits of shape {tuple(getattr(logits, 'shape', ()))} for tokens "
                        f"{tuple(rows.shape)}; it must give (B, T, >= {n_vocab}) (the tokenizer's vocabulary)")
    rows_t, pos_t = torch.tensor(row_idx, dtype=torch.long), torch.tensor(pos_idx, dtype=torch.long)
    picked = logits[rows_t.to(logits.device), pos_t.to(logits.device)][:, :n_vocab].float()
    targets = rows[rows_t, pos_t + 1].to(picked.device)
    logp = torch.log_softmax(picked, dim=-1)
    token_lp = logp.gather(1, targets[:, None])[:, 0].double().cpu()
    greedy = (logp.argmax(dim=-1) == targets).cpu()
    order = {i: k for k, i in enumerate(ids)}
    seg = torch.tensor([order[i] for i in seq_idx], dtype=torch.long)
    sums = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, seg, token_lp)
    misses = torch.zeros(len(ids), dtype=torch.long).index_add_(0, seg, (~greedy).long())
    return {i: (float(sums[k]), bool(misses[k] == 0)) for k, i in enumerate(ids)}
