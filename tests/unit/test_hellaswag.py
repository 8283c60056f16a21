"""The HellaSwag evaluator against a plain one-row-at-a-time reference scorer, on real examples; data loading errors.
2 ranks (torchrun, gloo) giving the same totals as 1: tests/e2e/test_hellaswag_e2e.py."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

from conftest import HELLASWAG_VAL, REPO
from gptlab.core.errors import UserError
from gptlab.evals.hellaswag import evaluate_hellaswag, score_examples, wilson_interval
from gptlab.dataset.hellaswag_file import SAMPLE_GZ, load_hellaswag
from helpers.hellaswag_tiny import TinyCausalLM, make_tokenizer

N_EXAMPLES = 40


@pytest.fixture(scope="module")
def encoding(tmp_path_factory):
    return make_tokenizer(str(tmp_path_factory.mktemp("tok") / "tiny_v261_n0.pkl"))


@pytest.fixture(scope="module")
def model(encoding):
    torch.set_num_threads(1)  # the machine is shared; tiny model, no need for more
    return TinyCausalLM(encoding.n_vocab)


@pytest.fixture(scope="module")
def examples():
    return load_hellaswag(HELLASWAG_VAL, limit=N_EXAMPLES)


def reference_scores(model, encoding, example, max_seq_len=None):
    """Obviously correct: one ending at a time, no batch, no padding; log-softmax over the tokenizer's tokens."""
    ctx_tokens = [encoding.eot_token] + encoding.encode_ordinary(example["ctx"])
    sums, means = [], []
    for ending in example["endings"]:
        completion = encoding.encode_ordinary(" " + ending)
        row = ctx_tokens + completion
        if max_seq_len is not None:
            row = row[-max_seq_len:]  # keep the end: the context is cut from the left
        with torch.no_grad():
            logits = model(torch.tensor([row]))[0, :, :encoding.n_vocab]
        log_probs = F.log_softmax(logits, dim=-1)
        first = len(row) - len(completion)
        losses = [-log_probs[t - 1, row[t]].item() for t in range(first, len(row))]
        sums.append(sum(losses))
        means.append(sum(losses) / len(losses))
    return sums, means, sums.index(min(sums)), means.index(min(means))


@pytest.fixture(scope="module")
def reference(model, encoding, examples):
    return [reference_scores(model, encoding, ex) for ex in examples]


def assert_same_scores(scores, reference):
    assert len(scores) == len(reference)
    for i, (got, (sums, means, pred, pred_norm)) in enumerate(zip(scores, reference)):
        assert got["pred"] == pred, f"example {i}"
        assert got["pred_norm"] == pred_norm, f"example {i}"
        assert got["loss_sum"] == pytest.approx(sums, rel=1e-9), f"example {i}"
        assert got["loss_mean"] == pytest.approx(means, rel=1e-9), f"example {i}"


def test_real_examples_load(examples):
    assert len(examples) == N_EXAMPLES
    first = examples[0]
    assert first["ctx"] == "A man is sitting on a roof. he"
    assert first["label"] == 3 and len(first["endings"]) == 4
    assert first["endings"][3] == "starts pulling up roofing on a roof."
    bundled = load_hellaswag(os.path.join(REPO, SAMPLE_GZ), limit=N_EXAMPLES)  # .jsonl.gz loads the same
    assert bundled == examples


def test_matches_reference_scorer(model, encoding, examples, reference):
    scores = score_examples(model, encoding, examples, batch_size=6)
    assert_same_scores(scores, reference)
    # the model must not be trivially constant: endings really get different scores
    assert len({s["pred"] for s in scores}) > 1

    result = evaluate_hellaswag(model, encoding, examples, batch_size=6, progress=False)
    acc_correct = sum(pred == ex["label"] for (_, _, pred, _), ex in zip(reference, examples))
    acc_norm_correct = sum(pred_norm == ex["label"] for (_, _, _, pred_norm), ex in zip(reference, examples))
    assert result["n"] == N_EXAMPLES
    assert result["acc_correct"] == acc_correct and result["acc_norm_correct"] == acc_norm_correct
    assert result["acc"] == acc_correct / N_EXAMPLES and result["acc_norm"] == acc_norm_correct / N_EXAMPLES
    assert result["acc_ci95"] == wilson_interval(acc_correct, N_EXAMPLES)
    assert result["acc_norm_ci95"][0] <= result["acc_norm"] <= result["acc_norm_ci95"][1]


@pytest.mark.parametrize("batch_size,seq_multiple", [(1, 1), (N_EXAMPLES, 1), (7, 64)])
def test_batching_and_padding_do_not_change_scores(model, encoding, examples, reference, batch_size, seq_multiple):
    calls = []

    def recording_model(idx):
        calls.append(tuple(idx.shape))
        return model(idx)

    scores = score_examples(recording_model, encoding, examples, batch_size=batch_size, seq_multiple=seq_multiple)
    assert_same_scores(scores, reference)
    assert len(calls) == math.ceil(N_EXAMPLES / batch_size)
    assert all(rows <= 4 * batch_size and width % seq_multiple == 0 for rows, width in calls)


def test_path_and_limit(model, encoding, examples):
    from_path = evaluate_hellaswag(model, encoding, HELLASWAG_VAL, limit=12, batch_size=5, progress=False)
    from_list = evaluate_hellaswag(model, encoding, examples, limit=12, batch_size=3, progress=False)
    assert from_path["n"] == from_list["n"] == 12
    assert from_path["acc_correct"] == from_list["acc_correct"]
    assert from_path["acc_norm_correct"] == from_list["acc_norm_correct"]


def test_long_rows_keep_their_end(model, encoding, examples):
    max_seq_len = 64  # shorter than most rows of these examples (nearly byte-level tokens)
    some = [ex for ex in examples[:12]
            if all(len(encoding.encode_ordinary(" " + e)) < max_seq_len - 1 for e in ex["endings"])]
    assert len(some) >= 5
    calls = []

    def recording_model(idx):
        calls.append(idx.shape[1])
        return model(idx)

    scores = score_examples(recording_model, encoding, some, batch_size=4, max_seq_len=max_seq_len)
    assert max(calls) == max_seq_len
    assert_same_scores(scores, [reference_scores(model, encoding, ex, max_seq_len) for ex in some])
    with pytest.raises(UserError, match="max_seq_len"):
        score_examples(model, encoding, some, max_seq_len=4)


def test_model_output_is_checked(model, encoding, examples):
    with pytest.raises(UserError, match="output logits"):
        score_examples(lambda idx: model(idx)[..., :100], encoding, examples[:2])
    with pytest.raises(ValueError, match="logits"):
        score_examples(lambda idx: model(idx)[:, -1], encoding, examples[:2])


def test_wilson_interval():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(0, 0) == [0.0, 1.0]


def test_missing_file_says_how_to_download(tmp_path, model, encoding):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="python download_hellaswag.py"):
        load_hellaswag(missing)
    with pytest.raises(UserError, match="python download_hellaswag.py"):
        evaluate_hellaswag(model, encoding, missing, progress=False)


@pytest.mark.parametrize("bad_line,problem", [
    ('{"ctx": "a", "endings": ["b", "c"', "not valid JSON"),
    ('{"ctx": "a", "endings": ["b", "c", "d"], "label": 0}', "'endings' must be a list of 4"),
    ('{"ctx": "a", "endings": ["b", "c", "d", "e"], "label": 4}', "'label' must be an integer"),
    ('{"endings": ["b", "c", "d", "e"], "label": 1}', "'ctx' must be a string"),
    ('[1, 2]', "expected a JSON object"),
])
def test_malformed_line_is_named(tmp_path, bad_line, problem):
    with open(HELLASWAG_VAL) as f:
        good = [next(f) for _ in range(2)]
    path = tmp_path / "hs.jsonl"
    path.write_text("".join(good) + bad_line + "\n")
    with pytest.raises(UserError, match=f"hs.jsonl line 3: .*{problem}"):
        load_hellaswag(str(path))
    assert len(load_hellaswag(str(path), limit=2)) == 2  # the lines before it are fine
