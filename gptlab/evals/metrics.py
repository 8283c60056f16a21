"""Per-example predictions and the figures of a task and of a suite of tasks.

Per example (choice i: summed log-probability ll_i in nats, the choice's length in characters c_i, the continuation's
length in UTF-8 bytes b_i):
    pred       argmax ll_i                     (lm-eval's acc; ties: the first)
    pred_norm  argmax ll_i / c_i               (lm-eval's acc_norm: c_i is len(choice), without the delimiter)
    gold_bpb   -ll_gold / ln 2 / b_gold        bits per byte of the right answer (OLMES / DataDecide)
A "greedy" task (LAMBADA) is right when every continuation token is the model's argmax (lm-eval's acc there).
Per task: acc and acc_norm with 95% Wilson intervals; centred = (acc - baseline) / (1 - baseline), its interval
the Wilson one mapped the same way (baseline: the mean random baseline of the examples); gold_bpb's mean with a
normal 95% interval. Suite: core = mean centred accuracy over the tasks, gold_bpb = mean of the tasks' means, each
with a normal 95% interval from the tasks' standard errors (the tasks' examples are independent; a task's accuracy
standard error is its Wilson interval's half-width / 1.96, which is not 0 at an accuracy of 0 or 1).
"""
import math

from gptlab.evals.hellaswag import wilson_interval

Z95 = 1.959963984540054


def _argmax(values):
    return max(range(len(values)), key=lambda i: (values[i], -i))


def example_record(index, request, scores, n_tokens, n_bytes, kind, baseline):
    """The line written for one example (scores: [(log-prob, greedy)] per choice)."""
    lls = [s for s, _ in scores]
    chars = [len(c) for c in request["choices"]]
    gold = request["gold"]
    pred = _argmax(lls)
    pred_norm = _argmax([ll / max(c, 1) for ll, c in zip(lls, chars)])
    correct = scores[gold][1] if kind == "greedy" else pred == gold
    return {"index": index, "gold": gold, "logprob": lls, "tokens": n_tokens, "bytes": n_bytes, "chars": chars,
            "greedy": [g for _, g in scores], "pred": pred, "pred_norm": pred_norm, "correct": bool(correct),
            "correct_norm": bool(correct if kind == "greedy" else pred_norm == gold),
            "gold_bpb": -lls[gold] / math.log(2) / max(n_bytes[gold], 1), "baseline": baseline}


def mean_interval(values):
    """(mean, [lo, hi], standard error): a normal 95% interval of the mean (None for one value: no spread)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, [None, None], None
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return mean, [mean - Z95 * se, mean + Z95 * se], se


def task_summary(records, kind):
    n = len(records)
    correct = sum(r["correct"] for r in records)
    correct_norm = sum(r["correct_norm"] for r in records)
    base = sum(r["baseline"] for r in records) / n
    acc = correct / n
    acc_ci = wilson_interval(correct, n)
    bpb, bpb_ci, bpb_se = mean_interval([r["gold_bpb"] for r in records])
    return {"n": n, "kind": kind, "acc": acc, "acc_ci95": acc_ci, "acc_norm": correct_norm / n,
            "acc_norm_ci95": wilson_interval(correct_norm, n), "baseline": base,
            "centred": (acc - base) / (1 - base), "centred_ci95": [(x - base) / (1 - base) for x in acc_ci],
            # half the Wilson interval's width / 1.96: a standard error that is not 0 at acc 0 or 1
            "centred_se": (acc_ci[1] - acc_ci[0]) / (2 * Z95) / (1 - base),
            "gold_bpb": bpb, "gold_bpb_ci95": bpb_ci, "gold_bpb_se": bpb_se}


def suite_summary(tasks):
    """core and gold_bpb over {name: task_summary}."""
    k = len(tasks)
    out = {}
    for name, key in (("core", "centred"), ("gold_bpb", "gold_bpb")):
        mean = sum(t[key] for t in tasks.values()) / k
        ses = [t[key + "_se"] for t in tasks.values()]
        se = None if None in ses else math.sqrt(sum(x ** 2 for x in ses)) / k
        out[name] = mean
        out[name + "_ci95"] = [None, None] if se is None else [mean - Z95 * se, mean + Z95 * se]
    out["tasks"] = sorted(tasks)
    return out
