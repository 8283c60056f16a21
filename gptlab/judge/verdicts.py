"""The judge's prompt, its verdict format, and the statistics of a judging.

The prompt follows MT-bench's pairwise judge (Zheng et al., 2023, "Judging LLM-as-a-Judge with MT-Bench and
Chatbot Arena": its "pair-v2" system prompt), worded for continuations of a text by base models. The verdict is
"[[A]]", "[[B]]" or "[[C]]" (a tie), as there. Every prompt is judged twice, the experiment's continuation once
as B and once as A; the two verdicts agree (a win, a loss or a tie) or they do not, and then the prompt is a tie
(MT-bench's rule for inconsistent verdicts, which cancels a judge's preference for a position).

A reply with no verdict tag, or with two different ones, is "unparseable"; a reply the API marks as a refusal
(message.refusal, finish_reason "content_filter") or with no text is a "refusal". Neither is guessed: a prompt
with such a reply in either order is left out of the win rate and counted apart.
"""
import hashlib
import re

import numpy as np

SYSTEM_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of two continuations of the same text, each written "
    "by a language model that was given the text and asked to continue it. Judge which continuation follows on from "
    "the text better: fluent, grammatical, coherent with the text and with itself, on topic, and plausible (no "
    "contradictions, no nonsense, no endless repetition). The text may stop mid-sentence; a continuation may stop "
    "mid-sentence too. Begin your evaluation by comparing the two continuations and provide a short explanation. "
    "Avoid any position biases and ensure that the order in which the continuations were presented does not "
    "influence your decision. Do not allow the length of the continuations to influence your evaluation. Be as "
    "objective as possible. After providing your explanation, output your final verdict by strictly following this "
    "format: \"[[A]]\" if continuation A is better, \"[[B]]\" if continuation B is better, and \"[[C]]\" for a tie.")
USER_TEMPLATE = ("[The Start of the Text]\n{prompt}\n[The End of the Text]\n\n"
                 "[The Start of Continuation A]\n{a}\n[The End of Continuation A]\n\n"
                 "[The Start of Continuation B]\n{b}\n[The End of Continuation B]")
PROMPT_SHA256 = hashlib.sha256((SYSTEM_PROMPT + "\0" + USER_TEMPLATE).encode()).hexdigest()
_TAG = re.compile(r"\[\[([ABC])\]\]")
# the two orders: which run's continuation is shown as A
ORDERS = {"AB": ("baseline", "experiment"), "BA": ("experiment", "baseline")}
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def messages(prompt, a, b):
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_TEMPLATE.format(prompt=prompt, a=a, b=b)}]


def parse_verdict(reply):
    """(status, verdict) of a reply (api.parse_reply's dict): ("verdict", "A" | "B" | "C"), ("refusal", None) or
    ("unparseable", None)."""
    content = reply.get("content")
    if reply.get("refusal") or reply.get("finish_reason") == "content_filter" or not (content or "").strip():
        return "refusal", None
    tags = set(_TAG.findall(content))
    if len(tags) == 1:
        return "verdict", tags.pop()
    return "unparseable", None


def experiment_outcome(order, verdict):
    """A verdict in one order → "win", "loss" or "tie" for the experiment."""
    if verdict == "C":
        return "tie"
    shown_as = {"A": ORDERS[order][0], "B": ORDERS[order][1]}[verdict]
    return "win" if shown_as == "experiment" else "loss"


def prompt_outcome(records):
    """{order: verdict record (status, verdict)} of one prompt → "win", "loss", "tie", "tie_inconsistent",
    "refusal", "unparseable" or "pending" (an order not answered yet, or an error)."""
    statuses = [records[o]["status"] if o in records else "pending" for o in ORDERS]
    for status in ("pending", "error", "refusal", "unparseable"):
        if status in statuses:
            return "pending" if status == "error" else status
    first, second = (experiment_outcome(o, records[o]["verdict"]) for o in ORDERS)
    return first if first == second else "tie_inconsistent"


SCORES = {"win": 1.0, "loss": 0.0, "tie": 0.5, "tie_inconsistent": 0.5}


def win_rate(outcomes, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED):
    """The experiment's win rate over the judged prompts (ties count half) with a 95% percentile bootstrap interval
    over prompts (numpy's default_rng(seed)) and the two-sided sign test of wins against losses (ties left out).
    {"n", "wins", "losses", "ties", "ties_inconsistent", "win_rate", "ci95", "sign_test_p"}; None where undefined."""
    from scipy.stats import binomtest  # (heavy) only when a summary is made

    scores = np.array([SCORES[o] for o in outcomes if o in SCORES], dtype=float)
    counts = {k: sum(o == k for o in outcomes) for k in ("win", "loss", "tie", "tie_inconsistent")}
    result = {"n": int(scores.size), "wins": counts["win"], "losses": counts["loss"],
              "ties": counts["tie"] + counts["tie_inconsistent"], "ties_inconsistent": counts["tie_inconsistent"],
              "win_rate": None, "ci95": None, "sign_test_p": None}
    if scores.size:
        rng = np.random.default_rng(seed)
        means = scores[rng.integers(0, scores.size, size=(resamples, scores.size))].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        result.update(win_rate=float(scores.mean()), ci95=[float(low), float(high)])
    decided = counts["win"] + counts["loss"]
    if decided:
        result["sign_test_p"] = float(binomtest(counts["win"], decided, 0.5, alternative="two-sided").pvalue)
    return result


def cost_usd(prompt_tokens, completion_tokens, price_in, price_out):
    """Dollars at prices per million tokens (None when either price is not given)."""
    if price_in is None or price_out is None:
        return None
    return (prompt_tokens * price_in + completion_tokens * price_out) / 1e6
