"""HellaSwag accuracy of a causal language model, batched and data-parallel.

Scoring follows build-nanogpt / llm.c: each of the 4 rows of an example is
    tokens = [eot] + encode(ctx) + encode(" " + ending)
and the loss of an ending is the cross-entropy of each completion token given everything before it.
    acc       picks the ending with the lowest SUM of completion-token losses
    acc_norm  picks the ending with the lowest MEAN (length-normalised) completion-token loss
Ties go to the lowest ending index.

Batching: `batch_size` examples (4 x batch_size rows) share one forward pass. Rows are padded at the END with
the eot token to the longest row of the batch, rounded up to `seq_multiple`; a causal model never looks ahead,
so padding cannot change the scores (examples are also sorted by length to keep padding small). Rows longer than
`max_seq_len` (default DEFAULT_MAX_SEQ_LEN, 2048) keep their last `max_seq_len` tokens (the context is cut from the
left, as lm-eval does; the ending is kept whole), and a batch of long rows holds fewer examples, so memory stays
bounded whatever the file holds. HellaSwag's own rows are far shorter: none is cut.

Distributed: with a DistContext that is_distributed, rank r scores examples r, r + world, r + 2*world, ... and
the correct counts are all-reduced, so every rank returns the same totals. Pass the plain model (not a DDP
wrapper) in eval mode; autocast, if wanted, is the caller's (wrap the call in torch.autocast).

Confidence intervals are 95% Wilson score intervals [lo, hi] (better than the normal approximation for small n
or accuracies near 0 or 1).
"""
import math
import os
import time

import torch
import torch.nn.functional as F

from gptlab.core.distributed import all_reduce_sum
from gptlab.core.errors import UserError
from gptlab.core.progress import progress_bar
from gptlab.dataset.hellaswag_file import DEFAULT_PATH, NUM_ENDINGS, load_hellaswag, not_a_file

DEFAULT_BATCH_SIZE = 16  # examples per forward pass (64 rows)
DEFAULT_MAX_SEQ_LEN = 2048  # tokens a row keeps when no max_seq_len is given (HellaSwag's longest is ~300)
BATCH_ROW_TOKENS = 512  # batch_size examples share a forward pass while their rows are at most this long; longer
#                         rows share it with proportionally fewer (the tokens per pass stay within the same budget)
_Z95 = 1.959963984540054


def wilson_interval(correct, n, z=_Z95):
    """95% Wilson score interval [lo, hi] of a proportion correct / n ([0, 1] when n == 0)."""
    if n == 0:
        return [0.0, 1.0]
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


def encode_example(encoding, example, prepend_eot=True, max_seq_len=None):
    """The 4 rows of one example → (rows: 4 token lists, starts: index of each row's first completion token)."""
    prefix = ([encoding.eot_token] if prepend_eot else []) + encoding.encode_ordinary(example["ctx"])
    rows, starts = [], []
    for ending in example["endings"]:
        completion = encoding.encode_ordinary(" " + ending)
        row, start = prefix + completion, len(prefix)
        if max_seq_len is not None and len(row) > max_seq_len:
            cut = len(row) - max_seq_len
            if cut >= start:  # the first completion token needs at least one token before it
                raise UserError(f"a HellaSwag ending is {len(completion)} tokens, which does not fit "
                                f"max_seq_len={max_seq_len}; use a longer sequence length")
            row, start = row[cut:], start - cut
        if start == 0:
            raise UserError("a HellaSwag example has an empty context and prepend_eot=False, so its first "
                            "completion token cannot be scored; use prepend_eot=True")
        rows.append(row)
        starts.append(start)
    return rows, starts


def _score_rows(model_fn, rows, starts, *, pad_id, n_vocab, device, seq_multiple):
    """Sum of completion-token losses and completion lengths of each row, in one forward pass."""
    n_rows = len(rows)
    lengths = [len(r) for r in rows]
    width = -(-max(lengths) // seq_multiple) * seq_multiple
    tokens = torch.full((n_rows, width), pad_id, dtype=torch.long)
    # score_mask[i, t]: position t of row i predicts a completion token (the one at t + 1)
    score_mask = torch.zeros((n_rows, width), dtype=torch.bool)
    for i, (row, start) in enumerate(zip(rows, starts)):
        tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        score_mask[i, start - 1:len(row) - 1] = True
    targets = torch.roll(tokens, -1, dims=1)[score_mask]  # (N,) completion tokens
    row_of_target = score_mask.nonzero()[:, 0]  # (N,)

    logits = model_fn(tokens.to(device))
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != (n_rows, width):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"model_fn must map tokens ({n_rows}, {width}) to logits ({n_rows}, {width}, V); got {shape}")
    if logits.shape[2] < n_vocab:
        raise UserError(f"the model has {logits.shape[2]} output logits but the tokenizer has {n_vocab} tokens; "
                        "evaluate with the tokenizer the model was trained with")
    # Only the scored positions, and only the tokenizer's logits (vocab padding is never a valid answer).
    picked = logits[score_mask.to(logits.device)][:, :n_vocab]  # (N, n_vocab)
    if picked.dtype in (torch.float16, torch.bfloat16):
        picked = picked.float()
    losses = F.cross_entropy(picked, targets.to(picked.device), reduction="none").cpu()
    loss_sums = torch.zeros(n_rows, dtype=losses.dtype).index_add_(0, row_of_target, losses)
    return loss_sums.tolist(), [n - s for n, s in zip(lengths, starts)]


def score_examples(model_fn, encoding, examples, *, device="cpu", batch_size=DEFAULT_BATCH_SIZE, seq_multiple=1,
                   prepend_eot=True, max_seq_len=None, progress=False, progress_desc="hellaswag"):
    """Per-example scores, in the order given (no rank split): a list of dicts
    {"label", "loss_sum": [4], "loss_mean": [4], "pred": argmin loss_sum, "pred_norm": argmin loss_mean}."""
    if batch_size < 1:
        raise UserError(f"HellaSwag batch size must be >= 1, got {batch_size}")
    if seq_multiple < 1:
        raise UserError(f"seq_multiple must be >= 1, got {seq_multiple}")
    if max_seq_len is None:
        max_seq_len = max(DEFAULT_MAX_SEQ_LEN // seq_multiple, 1) * seq_multiple
        limit = getattr(model_fn, "max_len", None)  # a model that reads no longer rows (GPT-2's positions)
        if limit and limit < max_seq_len:
            max_seq_len = max(limit // seq_multiple, 1) * seq_multiple
    if max_seq_len < 2 or max_seq_len % seq_multiple:
        raise UserError(f"max_seq_len={max_seq_len} must be >= 2 and a multiple of seq_multiple={seq_multiple}")
    encoded = [encode_example(encoding, ex, prepend_eot, max_seq_len) for ex in examples]
    # Longest first: similar lengths share a batch (little padding), and a too-large batch fails at once.
    order = sorted(range(len(examples)), key=lambda i: -max(len(r) for r in encoded[i][0]))
    results = [None] * len(examples)
    with torch.no_grad(), progress_bar(total=len(examples), unit="ex", desc=progress_desc, disable=not progress,
                                       leave=False) as bar:
        b = 0
        while b < len(order):
            width = -(-max(len(r) for r in encoded[order[b]][0]) // seq_multiple) * seq_multiple  # longest first
            batch = order[b:b + max(1, min(batch_size, batch_size * BATCH_ROW_TOKENS // width))]
            b += len(batch)
            rows = [row for i in batch for row in encoded[i][0]]
            starts = [s for i in batch for s in encoded[i][1]]
            loss_sums, counts = _score_rows(model_fn, rows, starts, pad_id=encoding.eot_token,
                                            n_vocab=encoding.n_vocab, device=device, seq_multiple=seq_multiple)
            for k, i in enumerate(batch):
                sums = loss_sums[k * NUM_ENDINGS:(k + 1) * NUM_ENDINGS]
                means = [s / c for s, c in zip(sums, counts[k * NUM_ENDINGS:(k + 1) * NUM_ENDINGS])]
                results[i] = {"label": examples[i]["label"], "loss_sum": sums, "loss_mean": means,
                              "pred": min(range(NUM_ENDINGS), key=sums.__getitem__),
                              "pred_norm": min(range(NUM_ENDINGS), key=means.__getitem__)}
            bar.update(len(batch))
    return results


def evaluate_hellaswag(model_fn, encoding, examples_or_path=DEFAULT_PATH, *, ctx=None, device=None,
                       batch_size=DEFAULT_BATCH_SIZE, limit=None, seq_multiple=1, prepend_eot=True,
                       max_seq_len=None, progress=True):
    """HellaSwag accuracy of `model_fn` (LongTensor (B, T) on `device` → logits (B, T, V >= n_vocab)).

    encoding: the tiktoken.Encoding the model was trained with (its eot_token starts each row and pads).
    examples_or_path: a list of examples (see gptlab.dataset.hellaswag_file.load_hellaswag) or a .jsonl path; all of
    them are scored unless `limit` (the first `limit`). ctx: a gptlab.core.distributed.DistContext or None.
    device: where the tokens go (default ctx.device, else cpu).
    Returns {"n", "acc", "acc_ci95": [lo, hi], "acc_norm", "acc_norm_ci95": [lo, hi], "acc_correct",
    "acc_norm_correct", "seconds"}; the counts and accuracies are identical on every rank (seconds is this
    rank's wall time).
    """
    if isinstance(examples_or_path, (str, os.PathLike)):
        examples = load_hellaswag(os.fspath(examples_or_path), limit)
    else:
        examples = list(examples_or_path)[:limit] if limit is not None else list(examples_or_path)
    if device is None:
        device = ctx.device if ctx is not None else "cpu"
    rank, world = (ctx.rank, ctx.world_size) if ctx is not None and ctx.is_distributed else (0, 1)
    t0 = time.perf_counter()
    mine = examples[rank::world]
    scores = score_examples(model_fn, encoding, mine, device=device, batch_size=batch_size,
                            seq_multiple=seq_multiple, prepend_eot=prepend_eot, max_seq_len=max_seq_len,
                            progress=progress and rank == 0,
                            progress_desc="hellaswag" if world == 1 else f"hellaswag (rank 0 of {world})")
    counts = torch.tensor([len(scores), sum(s["pred"] == s["label"] for s in scores),
                           sum(s["pred_norm"] == s["label"] for s in scores)], dtype=torch.long, device=device)
    if ctx is not None:
        all_reduce_sum(ctx, counts)
    n, acc_correct, acc_norm_correct = (int(c) for c in counts.tolist())
    return {
        "n": n,
        "acc": acc_correct / n if n else float("nan"),
        "acc_ci95": wilson_interval(acc_correct, n),
        "acc_norm": acc_norm_correct / n if n else float("nan"),
        "acc_norm_ci95": wilson_interval(acc_norm_correct, n),
        "acc_correct": acc_correct,
        "acc_norm_correct": acc_norm_correct,
        "seconds": time.perf_counter() - t0,
    }


def missing_file_warning(path):
    return (f"warning: HellaSwag file {path} not found, so this run skips HellaSwag; get it with "
            "`python download_hellaswag.py` (or pass --hellaswag_path)")


def check_hellaswag_file(path, limit=None, required=False):
    """Before a training run: a warning (str) when the file is missing, None when it is there and parses; a
    damaged file, or a missing one that was asked for by name (required), is a UserError now rather than after
    hours of training. limit 0 means no HellaSwag at all."""
    if limit == 0:
        return None
    problem = not_a_file(path)
    if problem == "does not exist":
        if required:
            raise UserError(f"--hellaswag_path {path} does not exist; pass the file `python download_hellaswag.py` "
                            "wrote, or leave the flag out (then a missing default file only warns)")
        return missing_file_warning(path)
    if problem:  # a folder, a FIFO, a device: never a HellaSwag file, named or not
        raise UserError(f"--hellaswag_path {path} {problem}; pass the .jsonl file `python download_hellaswag.py` "
                        "wrote")
    load_hellaswag(path, limit=limit)
    return None


def evaluate_hellaswag_in_run(logits_fn, encoding, path, *, limit, padded_vocab, ctx, log, seq_multiple=1,
                              prints=None):
    """HellaSwag during a training run: the figures a run records ({acc, acc_ci95, acc_norm, acc_norm_ci95, n}),
    or None when limit is 0 or the file is missing (then `log` gets the warning). prints: the run's
    gptlab.evals.file_prints.FilePrints, taken at start: a file missing then is skipped all run long, and one
    changed since is a UserError."""
    if limit == 0:
        return None
    if not (os.path.isfile(path) if prints is None else path in prints):
        log(missing_file_warning(path))
        return None
    if prints is not None:
        prints.check(path)
    examples = load_hellaswag(path, limit)
    if prints is not None:  # and after: the examples scored were read from the file the run started with
        prints.check(path)
    # examples per forward (x4 endings): keep the (rows, ~256, padded vocab) float32 logits under ~1 GiB
    batch_size = max(1, min(64, 2**28 // (4 * 256 * padded_vocab)))
    result = evaluate_hellaswag(logits_fn, encoding, examples, ctx=ctx, device=str(ctx.device), batch_size=batch_size,
                                seq_multiple=seq_multiple, prepend_eot=True, progress=ctx.is_main)
    return {k: result.get(k) for k in ("acc", "acc_ci95", "acc_norm", "acc_norm_ci95", "n")}
