"""The packed, batched scorer (gptlab/evals/score.py, suite.py) against a plain loop written here: one continuation at a
time, alone in its own forward pass, split into context and continuation tokens as lm-eval splits them. And the
packing and the metrics, worked out by hand."""
import math

import pytest
import torch

from helpers.eval_tasks import LAMBADA_ROWS, data_dir_with, loop_loglikelihood, tiny_checkpoint, write_rows
from gptlab.evals import metrics, score, suite, task_spec
from gptlab.evals.hellaswag import wilson_interval

TASKS = ["boolq", "hellaswag", "winogrande", "copa", "arc_easy", "lambada"]
LIMIT = 3


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The tiny model (every layer's final window one 128-token block), its encoding, and the tasks' requests."""
    from gptlab.checkpoint import checkpointing
    from gptlab.checkpoint.model_source import load_model

    folder = tmp_path_factory.mktemp("eval_score")
    ckpt, _ = tiny_checkpoint(str(folder), window_size=128)
    data = data_dir_with(folder / "data", [t for t in TASKS if t != "lambada"], limit=LIMIT)
    write_rows(data, "lambada", LAMBADA_ROWS)
    model, _, ck = load_model(ckpt, "cpu")
    tok = checkpointing.checkpoint_tokenizer(ck, ckpt)
    tasks = [task_spec.load_task(t) for t in TASKS]
    return model, tok, tasks, data


def run(scored, autocast_dtype=None, **kwargs):
    model, tok, tasks, data = scored
    block, window = score.model_geometry(model)
    from gptlab.checkpoint.model_source import logits_fn
    kw = {"data_dir": data, "block": block, "window": window, "row_len": 256, **kwargs}
    fn = logits_fn(model, tok.eot, tok.encoding.n_vocab, autocast_dtype=autocast_dtype)
    return suite.score_tasks(fn, tok.encoding, tasks, **kw)


@pytest.fixture(scope="module")
def packed(scored):
    return run(scored)


def test_batched_equals_one_at_a_time(scored, packed):
    model, tok, tasks, data = scored
    assert score.model_geometry(model) == (128, 1)  # a one-block window: the packing must respect it
    from gptlab.checkpoint.model_source import logits_fn
    # today's model.py takes tree=: an example's choices are scored after one copy of their context (the path
    # checked here; test_a_model_source_without_positions... checks the one for older model sources)
    assert logits_fn(model, tok.eot, tok.encoding.n_vocab).trees
    records, _, suite_figures = packed
    checked = 0
    for task in tasks:
        _, reqs = suite.task_requests(task, 0, None, data)
        for req, rec in zip(reqs, records[task.NAME]):
            for j, (c, cont) in enumerate(zip(req["contexts"], req["continuations"])):
                ll, greedy, n_tok, n_bytes = loop_loglikelihood(model, tok.encoding, tok.eot, c, cont)
                assert rec["logprob"][j] == pytest.approx(ll, abs=2e-4, rel=1e-5), (task.NAME, rec["index"], j)
                assert (rec["greedy"][j], rec["tokens"][j], rec["bytes"][j]) == (greedy, n_tok, n_bytes)
                checked += 1
    assert checked == suite_figures["sequences"] > 40


def test_sliding_windows_matter_here(scored):
    """Two 100-token sequences in a row of 256: packed back to back, the second would straddle the 128-token block
    boundary and, with a one-block window, lose sight of its start; the scorer moves it to the boundary, so it
    scores as alone, and a packing that ignored the window would not."""
    model, tok = scored[:2]
    from gptlab.checkpoint.model_source import logits_fn
    fn = logits_fn(model, tok.eot, tok.encoding.n_vocab)
    text = " ".join(["the model reads this sentence and scores every word of it"] * 30)
    tokens = [tok.eot] + tok.encoding.encode_ordinary(text)[:99]
    seqs = [(tokens, 2), (tokens, 2)]
    alone = score.score_sequences(fn, seqs[:1], eot=tok.eot, n_vocab=tok.encoding.n_vocab, row_len=256, block=128,
                                  window=1)[0][0]
    kw = {"eot": tok.eot, "n_vocab": tok.encoding.n_vocab, "row_len": 256, "block": 128}
    aligned = score.score_sequences(fn, seqs, window=1, **kw)
    careless = score.score_sequences(fn, seqs, window=None, **kw)
    assert score.pack([100, 100], 256, 128, 1)[0] == [(0, 0), (0, 128)]
    assert aligned[1][0] == pytest.approx(alone, abs=2e-4)
    assert abs(careless[1][0] - alone) > 1e-2


def test_longer_rows_and_forward_batches_give_the_same_scores(scored, packed, monkeypatch):
    a = packed[0]
    model, tok = scored[:2]
    monkeypatch.setattr(score, "LOGITS_BUDGET_BYTES", 2 * 512 * tok.encoding.n_vocab * 4)  # two rows per forward
    b, _, _ = run(scored, row_len=512, padded_vocab=tok.encoding.n_vocab)
    for t in a:
        for ra, rb in zip(a[t], b[t]):
            assert ra["logprob"] == pytest.approx(rb["logprob"], abs=2e-4, rel=1e-5)


def test_forward_batches_by_hand():
    # whole logits (scored = widths): two 512-token rows of a 100-token vocabulary fit the budget; a 1024-token row
    # alone; runs of one width only
    budget = 2 * 512 * 100 * 4
    w = [512, 512, 512, 1024, 512, 512]
    assert score._batches(w, w, 100, budget) == [[0, 1], [2], [3], [4, 5]]
    assert score._batches([512] * 3, [512] * 3, 100, budget - 1) == [[0], [1], [2]]
    assert score._batches([512] * 3, [512] * 3, 100, 8 * budget) == [[0, 1, 2]]
    # logits at the scored positions only: 30 + 40 + 50 positions x 100 x 4 bytes = 48,000 bytes
    assert score._batches([512] * 3, [30, 40, 50], 100, 48_000) == [[0, 1, 2]]
    assert score._batches([512] * 3, [30, 40, 50], 100, 47_999) == [[0, 1], [2]]
    # the token cap: two 512-token rows per forward
    assert score._batches([512] * 3, [1] * 3, 100, budget, max_tokens=1024) == [[0, 1], [2]]
    assert score._batches([512] * 3, [1] * 3, 100, budget, max_tokens=1023) == [[0], [1], [2]]


def test_cuda_devices_get_the_larger_forwards_and_every_rank_the_same(scored, monkeypatch):
    """The batches on CUDA come from CUDA_LOGITS_BUDGET_BYTES and CUDA_TOKENS_PER_FORWARD (fixed figures: ranks
    must group rows alike), on the CPU from LOGITS_BUDGET_BYTES and TOKENS_PER_FORWARD; seen on a CPU machine by
    stopping at the grouping."""
    seen = []

    class Stop(Exception):
        pass

    def capture(widths, scored, vocab, budget=None, max_tokens=None):
        seen.append((budget, max_tokens))
        raise Stop

    monkeypatch.setattr(score, "_batches", capture)
    for device in ("cpu", "cuda:1", torch.device("cuda", 0)):
        with pytest.raises(Stop):
            score.score_sequences(lambda t: t, [([1, 2, 3], 1)], eot=0, n_vocab=10, device=device)
    cpu = (score.LOGITS_BUDGET_BYTES, score.TOKENS_PER_FORWARD)
    cuda = (score.CUDA_LOGITS_BUDGET_BYTES, score.CUDA_TOKENS_PER_FORWARD)
    assert seen == [cpu, cuda, cuda]
    assert cuda[0] > cpu[0] and cuda[1] > cpu[1]


def test_bfloat16_autocast_scores_close_to_float32_but_not_equal(scored, packed):
    """evaluate.py --dtype bfloat16 (its default on CUDA): logits_fn under autocast; on the CPU the same code runs."""
    bf16, _, _ = run(scored, autocast_dtype=torch.bfloat16)
    diffs = [abs(x - y) / max(1.0, abs(y)) for t in packed[0] for ra, rb in zip(bf16[t], packed[0][t])
             for x, y in zip(ra["logprob"], rb["logprob"])]
    assert 0 < max(diffs) < 0.05


def test_pack_by_hand():
    # longest first; 30 fits neither row 0 (100 + 30 > 128) nor row 1 (60 + 50 + 30 > 128)
    assert score.pack([100, 60, 50, 30], 128) == ([(0, 0), (1, 0), (1, 60), (2, 0)], [128] * 3)
    # longest first: 5 opens row 0, the 4s fill row 1, 3 takes the 3 tokens left in row 0
    assert score.pack([4, 5, 3, 4], 8) == ([(1, 0), (0, 0), (0, 5), (1, 4)], [8, 8])
    # a sequence longer than a row: a row of its own, whole blocks
    assert score.pack([10, 3], 8, block=4) == ([(0, 0), (1, 0)], [12, 8])
    # blocks of 4, a one-block window: a 3-token sequence at offset 3 would straddle a block, so it starts at 4;
    # a 5-token one never sees all of itself, so it goes only where a block starts
    assert score.pack([3, 3], 16, block=4, window=1) == ([(0, 0), (0, 4)], [16])
    assert score.pack([5, 2], 16, block=4, window=1) == ([(0, 0), (0, 5)], [16])
    assert score.pack([5, 5, 2], 16, block=4, window=1) == ([(0, 0), (0, 8), (0, 13)], [16])  # rows fill forward


def test_example_record_and_task_summary_by_hand():
    req = {"choices": ["ab", "abcdef"], "gold": 0}
    rec = metrics.example_record(7, req, [(-4.0, False), (-3.0, True)], [2, 5], [3, 7], "multiple_choice", 0.5)
    assert (rec["pred"], rec["pred_norm"], rec["correct"], rec["correct_norm"]) == (1, 1, False, False)
    assert rec["gold_bpb"] == pytest.approx(4.0 / math.log(2) / 3)
    norm = metrics.example_record(0, {"choices": ["abcdefgh", "a"], "gold": 0}, [(-4.0, False), (-1.0, False)],
                                  [1, 1], [9, 2], "multiple_choice", 0.5)
    assert (norm["pred"], norm["pred_norm"]) == (1, 0)  # -0.5 per character beats -1.0
    greedy = metrics.example_record(0, {"choices": [" w"], "gold": 0}, [(-9.0, True)], [1], [2], "greedy", 0.0)
    assert greedy["correct"] and greedy["correct_norm"]
    records = [{"correct": c, "correct_norm": c, "baseline": 0.5, "gold_bpb": b}
               for c, b in [(True, 1.0), (True, 2.0), (True, 3.0), (False, 4.0)]]
    s = metrics.task_summary(records, "multiple_choice")
    assert s["acc"] == 0.75 and s["centred"] == pytest.approx(0.5)  # (0.75 - 0.5) / (1 - 0.5)
    lo, hi = wilson_interval(3, 4)
    assert s["centred_ci95"] == pytest.approx([2 * lo - 1, 2 * hi - 1])
    se = math.sqrt(((1 - 2.5) ** 2 + (2 - 2.5) ** 2 + (3 - 2.5) ** 2 + (4 - 2.5) ** 2) / 3 / 4)
    assert s["gold_bpb"] == 2.5 and s["gold_bpb_ci95"] == pytest.approx([2.5 - 1.96 * se, 2.5 + 1.96 * se], abs=1e-3)
    both = metrics.suite_summary({"a": s, "b": {**s, "centred": 0.1, "gold_bpb": 1.5}})
    assert both["core"] == pytest.approx(0.3) and both["gold_bpb"] == pytest.approx(2.0)
    half = (2 * hi - 1 - (2 * lo - 1)) / 2  # one task's centred interval, half its width; two equal ones averaged
    assert both["core_ci95"] == pytest.approx([0.3 - half / math.sqrt(2), 0.3 + half / math.sqrt(2)])
    assert both["gold_bpb_ci95"] == pytest.approx([2.0 - 1.96 * se / math.sqrt(2), 2.0 + 1.96 * se / math.sqrt(2)],
                                                  abs=1e-3)


def test_logits_at_positions_equal_the_whole_logits_there(scored):
    """model.predict(positions=...) and ModelLogits.at give the whole forward's logits at those positions."""
    from gptlab.checkpoint.model_source import logits_fn
    model, tok = scored[:2]
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, tok.encoding.n_vocab, (3, 200), generator=g)
    tokens[:, 0] = tok.eot
    tokens[1, 90] = tok.eot  # a second document in row 1
    rows, cols = torch.tensor([0, 0, 1, 1, 2, 2]), torch.tensor([0, 199, 89, 91, 5, 150])
    fn = logits_fn(model, tok.eot, tok.encoding.n_vocab)
    whole = fn(tokens)
    assert whole.shape == (3, 200, tok.encoding.n_vocab)
    picked = fn.at(tokens, rows, cols)
    assert picked.shape == (6, tok.encoding.n_vocab)
    torch.testing.assert_close(picked, whole[rows, cols], atol=2e-5, rtol=1e-5)


def test_a_model_source_without_positions_is_scored_from_its_whole_logits(scored):
    """Older model sources score the same through the fallbacks: predict without positions (whole logits), and
    predict with positions but without tree (each choice laid out whole, its context repeated)."""
    from gptlab.checkpoint.model_source import logits_fn
    model, tok, tasks, data = scored

    class Older(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def predict(self, tokens, eot, windows=None):
            return model.predict(tokens, eot, windows)

    class NoTrees(Older):
        def predict(self, tokens, eot, windows=None, positions=None):
            return model.predict(tokens, eot, windows, positions)

    older, no_trees = (logits_fn(m(), tok.eot, tok.encoding.n_vocab) for m in (Older, NoTrees))
    assert not older.selects and logits_fn(model, tok.eot, tok.encoding.n_vocab).selects
    assert no_trees.selects and not no_trees.trees and not older.trees
    block, window = score.model_geometry(model)
    kw = {"data_dir": data, "block": block, "window": window, "row_len": 256}
    new, _, _ = suite.score_tasks(logits_fn(model, tok.eot, tok.encoding.n_vocab), tok.encoding, tasks, **kw)
    for fn in (older, no_trees):
        old, _, _ = suite.score_tasks(fn, tok.encoding, tasks, **kw)
        for t in new:
            for a, b in zip(new[t], old[t]):
                assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-4)


def test_the_scorer_asks_for_the_scored_positions_only_when_it_can(scored):
    """With .at, no forward makes the whole logits, and .at is asked for exactly the continuation tokens' positions
    (counted by hand from the sequences: each scores len(tokens) - start positions)."""
    seqs = [([0, 5, 6, 7], 2), ([0, 8, 9], 1), ([0, 4, 4, 4, 4, 4], 5)]
    asked = []

    class OnlyAt:
        def __call__(self, tokens):
            raise AssertionError("the whole logits were asked for")

        def at(self, tokens, rows, cols):
            asked.append(len(rows))
            out = torch.zeros(len(rows), 10)
            out[:, 4] = 5.0  # the greedy pick is always token 4
            return out

    got = score.score_sequences(OnlyAt(), seqs, eot=0, n_vocab=10, row_len=8)
    assert sum(asked) == 2 + 2 + 1
    lp4 = 5.0 - math.log(math.exp(5.0) + 9)  # log-probability of token 4; the other tokens: 0 - log(e^5 + 9)
    other = -math.log(math.exp(5.0) + 9)
    assert got[0][0] == pytest.approx(2 * other) and not got[0][1]
    assert got[1][0] == pytest.approx(2 * other) and not got[1][1]
    assert got[2][0] == pytest.approx(lp4) and got[2][1]


def test_scorers_on_cuda_leave_out_cudnn_attention_and_change_nothing_elsewhere():
    """attention_kernels: on CUDA every SDPA backend but cuDNN's (its per-shape host plans), on the CPU none
    restricted; seen on the CPU through torch's own record of the allowed backends."""
    import contextlib
    from torch.nn.attention import SDPBackend
    from gptlab.checkpoint.model_source import attention_kernels

    assert isinstance(attention_kernels("cpu"), contextlib.nullcontext)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with attention_kernels("cuda"):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    assert SDPBackend.CUDNN_ATTENTION is not None


def test_fit_context_keeps_the_last_tokens_and_the_continuation():
    """A model that reads at most max_len tokens (GPT-2's position table): the last max_len, cut from the left with
    the leading <|endoftext|>, as build_sequences (and lm-eval) cut; a continuation that cannot fit is one
    UserError."""
    from gptlab.core.errors import UserError

    assert score.fit_context([9, 1, 2, 3, 4, 5], 4, 4) == ([2, 3, 4, 5], 2)
    assert score.fit_context([9, 1, 2], 1, 4) == ([9, 1, 2], 1)
    with pytest.raises(UserError, match="a continuation of 4 tokens does not fit the model's context of 4 tokens"):
        score.fit_context([9, 1, 2, 3, 4, 5], 2, 4)


def test_build_sequences_cuts_as_lm_eval_does():
    """lm-eval keeps (context_enc + continuation_enc)[-(max_length + 1):] (its input all but the last): the BOS goes
    with the context's first tokens; max_length + 1 tokens are kept whole; a continuation over max_length is
    refused (lm-eval asserts it)."""
    from gptlab.core.errors import UserError

    def encode(text):
        return [ord(c) for c in text]
    assert score.build_sequences(encode, 0, [("abcdef", " gh")], max_len=4) == [([101, 102, 32, 103, 104], 2)]
    assert score.build_sequences(encode, 0, [("ab", " c")], max_len=4) == [([0, 97, 98, 32, 99], 3)]
    assert score.build_sequences(encode, 0, [("a", " bc")], max_len=4) == [([0, 97, 32, 98, 99], 2)]
    assert score.build_sequences(encode, 0, [("ab", " cde")], max_len=4) == [([98, 32, 99, 100, 101], 1)]
    with pytest.raises(UserError, match="a continuation is 5 tokens, longer than the 4 a scored sequence can hold"):
        score.build_sequences(encode, 0, [("ab", " cdef")], max_len=4)


def test_a_sequence_longer_than_lm_evals_max_length_scores_as_lm_eval_cuts_it(scored):
    """A row whose context runs past max_length: the packed scorer (rows, trees, a row of its own for a sequence
    that no longer starts with <|endoftext|>) gives what the plain loop gives on lm-eval's input for it."""
    model, tok, _, _ = scored
    from gptlab.checkpoint.model_source import logits_fn
    pairs = [(f"Passage: {text * 20}\nQuestion: did it?\nAnswer:", c) for text in
             ("the tide came in and went out again. ", "a moon rose over the hills, ") for c in (" yes", " no")]
    pairs += [("Q: short one?\nA:", " yes"), ("Q: short two?\nA:", " no")]
    encode = suite.checked_encoder(tok.encoding, lambda: "a test row")
    seqs = [score.build_sequences(encode, tok.eot, [p], max_len=300)[0] for p in pairs]
    assert all(len(t) == 301 and t[0] != tok.eot for t, _ in seqs[:4]) and seqs[4][0][0] == tok.eot
    block, window = score.model_geometry(model)
    fn = logits_fn(model, tok.eot, tok.encoding.n_vocab)
    # rows long enough to hold both cut examples: each must still have its own (no <|endoftext|> parts them)
    got = score.score_sequences(fn, seqs, eot=tok.eot, n_vocab=tok.encoding.n_vocab, row_len=2048, block=block,
                                window=window, groups=[2, 2, 1, 1])
    for (context, continuation), (ll, greedy) in zip(pairs, got):
        want, want_greedy, _, _ = loop_loglikelihood(model, tok.encoding, tok.eot, context, continuation, 300)
        assert ll == pytest.approx(want, abs=2e-4, rel=1e-5) and greedy == want_greedy
