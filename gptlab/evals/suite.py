"""Score a model on a set of tasks: render every row, score every continuation in one packed pass, and write
DIR/<task>.jsonl (one line per example) and DIR/summary.json. See gptlab/evals/task_spec.py (the tasks),
gptlab/evals/score.py (the packing) and gptlab/evals/metrics.py (the figures)."""
import json
import os
import time

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_output_dir
from gptlab.evals import metrics, score, task_spec


def checked_encoder(encoding, what):
    """encode(text) → token ids that decode back to exactly text; anything else is a UserError naming `what`."""
    def encode(text):
        try:
            data = text.encode("utf-8")
            tokens = encoding.encode_ordinary(text)
        except (UnicodeEncodeError, ValueError, TypeError) as err:
            # the text around the character: it may be in one of the row's few-shot rows, not the row named
            at = (f", in {text[max(0, err.start - 40):err.end + 40]!r}" if isinstance(err, UnicodeEncodeError)
                  else "")
            raise UserError(f"the checkpoint's tokenizer cannot encode {what()} ({type(err).__name__}: "
                            f"{str(err)[:120]}{at}); fix the row, or score this task with another tokenizer") from None
        if encoding.decode_bytes(tokens) != data:
            raise UserError(f"the checkpoint's tokenizer cannot encode {what()}: its tokens decode to other text "
                            f"than {text[:60]!r}; score this task with a byte-level tokenizer")
        return tokens
    return encode


def memoised(fn):
    """fn(text), each text computed once (the caller must not change what it returns)."""
    seen = {}

    def cached(text):
        if text not in seen:
            seen[text] = fn(text)
        return seen[text]
    return cached


def task_requests(task, fewshot=0, limit=None, data_dir=task_spec.DATA_DIR):
    """(rows, [request per scored example]) of a task: the first `limit` rows, each after `fewshot` shots drawn
    from its few-shot split (task_spec.fewshot_draws: as lm-eval draws them, for these rows in order)."""
    rows = task_spec.load_rows(task, data_dir)
    n = len(rows) if limit is None else min(limit, len(rows))
    pool = task_spec.fewshot_pool(task, rows, fewshot, data_dir)
    draws = task_spec.fewshot_draws(task, rows[:n], pool, fewshot)
    rendered = {}
    pool_rendered = rendered if pool is rows else {}
    requests = [task_spec.requests(task, rows, i, draws[i], pool, rendered, pool_rendered) for i in range(n)]
    for i, req in enumerate(requests):
        blank = [j for j, choice in enumerate(req["choices"]) if not choice.strip()]
        if blank:  # scored as the delimiter alone (or nothing: log-probability 0), it would win for no reason
            raise UserError(f"{task.NAME} row {i + 1}: choice {blank[0] + 1} of {len(req['choices'])} is "
                            f"{req['choices'][blank[0]]!r}, with no text to score; fix the row, or re-download it: "
                            f"{task_spec.download_command(task, data_dir, overwrite=True)}")
    return rows, requests


def fewshot_sources(tasks, fewshot, data_dir=task_spec.DATA_DIR):
    """What summary.json records of where each task's shots came from: {task: None (0-shot) or {"split", "file",
    "rows", "sha256"}}; file None where the pool is the scored file."""
    from gptlab.dataset.hellaswag_file import sha256_file

    out = {}
    for task in tasks:
        if fewshot <= 0:
            out[task.NAME] = None
            continue
        path = task.fewshot_path(data_dir) if task.fewshot_file() else task.data_path(data_dir)
        with open(path, "rb") as f:
            rows = sum(1 for line in f if line.strip())
        out[task.NAME] = {"split": task.FEWSHOT_SPLIT, "file": os.path.basename(path), "rows": rows,
                          "sha256": sha256_file(path), "seed": task_spec.FEWSHOT_SEED,
                          "sampler": task.FEWSHOT_SAMPLER, "exclude_self": task.FEWSHOT_EXCLUDE_SELF}
    return out


def encode_requests(encoding, tasks, prepared):
    """The token sequences of every continuation of `prepared` ({task name: requests}), in task order:
    {"sequences": [(tokens, first continuation index)], "owners": [(task, example, choice)], "tokens": [n],
    "bytes": [n]}. A row the tokenizer cannot encode is a UserError naming it."""
    eot = encoding.eot_token
    out = {"sequences": [], "owners": [], "tokens": [], "bytes": []}
    current = [None]
    checked = checked_encoder(encoding, lambda: f"{current[0][0]} row {current[0][1] + 1}")
    for task in tasks:
        for i, req in enumerate(prepared[task.NAME]):
            encode = memoised(checked)  # an example's choices share their context: encoded once
            for j, (context, continuation) in enumerate(zip(req["contexts"], req["continuations"])):
                current[0] = (task.NAME, i, j)
                seq = score.build_sequences(encode, eot, [(context, continuation)])[0]
                out["sequences"].append(seq)
                out["owners"].append(current[0])
                out["tokens"].append(len(seq[0]) - seq[1])
                out["bytes"].append(len(score.move_spaces(context, continuation)[1].encode("utf-8")))
    return out


def score_tasks(logits_fn, encoding, tasks, *, fewshot=0, limit=None, data_dir=task_spec.DATA_DIR,
                device="cpu", block=1, window=None, padded_vocab=None, ctx=None, progress=False,
                row_len=None, prepared=None, encoded=None):
    """{task name: [example record]} and {task name: task summary}, plus the suite's summary; every rank returns the
    same. prepared: {task name: requests} already made by task_requests (else made here); encoded: what
    encode_requests gave for them (else made here)."""
    prepared = dict(prepared or {})
    for task in tasks:
        if task.NAME not in prepared:
            prepared[task.NAME] = task_requests(task, fewshot, limit, data_dir)[1]
    if encoded is None:
        encoded = encode_requests(encoding, tasks, prepared)
    sequences, n_tokens, byte_lengths = encoded["sequences"], encoded["tokens"], encoded["bytes"]
    t0 = time.perf_counter()
    groups = [len(req["continuations"]) for task in tasks for req in prepared[task.NAME]]  # an example's choices
    scores = score.score_sequences(logits_fn, sequences, eot=encoding.eot_token, n_vocab=encoding.n_vocab,
                                   device=device, row_len=row_len, block=block, window=window, ctx=ctx,
                                   padded_vocab=padded_vocab, progress=progress, groups=groups)
    seconds = time.perf_counter() - t0
    records, summaries, k = {}, {}, 0
    for task in tasks:
        records[task.NAME] = []
        for i, req in enumerate(prepared[task.NAME]):
            m = len(req["continuations"])
            rec = metrics.example_record(i, req, scores[k:k + m], n_tokens[k:k + m], byte_lengths[k:k + m],
                                         task.KIND, task_spec.baseline(task, m))
            records[task.NAME].append(rec)
            k += m
        summaries[task.NAME] = metrics.task_summary(records[task.NAME], task.KIND)
    suite = metrics.suite_summary(summaries)
    suite.update({"fewshot": fewshot, "limit": limit, "sequences": len(sequences), "seconds": seconds})
    return records, summaries, suite


def write_results(out_dir, records, summaries, suite, meta, overwrite=False, inputs=()):
    """DIR/<task>.jsonl and DIR/summary.json, the folder written whole or not at all; a DIR holding any of `inputs`
    (the files the command read) is refused, as atomic_output_dir refuses it."""
    with atomic_output_dir(out_dir, overwrite, inputs) as tmp:
        for name, recs in records.items():
            with open(os.path.join(tmp, f"{name}.jsonl"), "w", encoding="utf-8") as f:
                for rec in recs:
                    f.write(json.dumps(rec) + "\n")
        with open(os.path.join(tmp, "summary.json"), "w", encoding="utf-8") as f:
            json.dump({**meta, **suite, "per_task": summaries}, f, indent=2)
            f.write("\n")
