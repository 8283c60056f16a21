"""Exactness audit of the evaluations and the training loader against plain, independent computations:
val bpb by a per-position log_softmax loop on a tiny random model.py GPT (1 rank and 2 ranks' shares summed),
HellaSwag acc/acc_norm by a per-token loop on hand-made examples (multi-byte UTF-8 endings, ties), Wilson
intervals in closed form at the edges, and the loader's rows over shards of different sizes against a plain
re-reading of the documented contract."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import model as arch
from gptlab.core.distributed import DistContext
from gptlab.dataset.loader import BOSAlignedLoader, ValidationSet
from gptlab.dataset.shards import write_shard
from gptlab.evals import bpb as bpb_module
from gptlab.evals.bpb import evaluate_val, token_byte_lengths
from gptlab.evals.hellaswag import evaluate_hellaswag, score_examples, wilson_interval
from helpers.hellaswag_tiny import make_tokenizer

SEQ = 128  # the model's masks want multiples of its 128-token block
WINDOWS = (1, 1)


@pytest.fixture(scope="module")
def encoding(tmp_path_factory):
    return make_tokenizer(str(tmp_path_factory.mktemp("tok") / "tiny_v261_n0.pkl"))


@pytest.fixture(scope="module")
def gpt(encoding):
    torch.set_num_threads(1)
    state = torch.random.get_rng_state()
    torch.manual_seed(7)
    model = arch.GPT(arch.GPTConfig(vocab_size=encoding.n_vocab, num_layers=2, num_heads=2, model_dim=16,
                                    num_val_emb=1, window_size=128))
    with torch.no_grad():  # the head starts at zero (uniform logits): give it random weights so losses differ
        model.lm_head.weight.normal_(0, 3.0)
    torch.random.set_rng_state(state)
    return model.eval()


def text_tokens(encoding, n_docs, seed):
    """<|endoftext|> + a document of words with multi-byte characters, n_docs times."""
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "héllo", "naïve", "日本", "in", "a", "€5", "🙂", "then"]
    tokens = []
    for _ in range(n_docs):
        doc = " ".join(words[int(i)] for i in rng.integers(0, len(words), int(rng.integers(3, 40))))
        tokens += [encoding.eot_token] + encoding.encode_ordinary(doc)
    return tokens


# ------------------------------------------------------------------------------------------------- val bpb
def plain_bpb(gpt, encoding, rows):
    """Per position: -log_softmax(logits)[target] summed in float64; bytes of each target from the tokenizer
    (<|endoftext|> 0)."""
    nats, n_bytes, n_tokens = 0.0, 0, 0
    with torch.no_grad():
        for row in rows:
            x = torch.tensor([row[:-1]])
            logits = gpt(x, gpt.attention_masks(x, encoding.eot_token, WINDOWS))[0]
            log_probs = torch.log_softmax(logits.double(), dim=-1)
            for t in range(SEQ):
                target = row[t + 1]
                nats -= float(log_probs[t, target])
                n_bytes += 0 if target == encoding.eot_token else len(encoding.decode_single_token_bytes(target))
                n_tokens += 1
    return nats / n_tokens, nats / math.log(2) / n_bytes


@pytest.fixture(scope="module")
def val_shards(encoding, tmp_path_factory):
    """Two shards of different sizes: 3 rows' worth + a tail, then 5 rows' worth + a tail."""
    folder = tmp_path_factory.mktemp("val")
    tokens = text_tokens(encoding, 400, seed=3)
    a, b = tokens[:3 * SEQ + 1 + 50], tokens[3 * SEQ + 1 + 50:3 * SEQ + 1 + 50 + 5 * SEQ + 1 + 17]
    paths = [str(folder / "val_000000.bin"), str(folder / "val_000001.bin")]
    write_shard(paths[0], np.array(a))
    write_shard(paths[1], np.array(b))
    # the documented rows: windows of SEQ + 1 tokens, one every SEQ tokens, shard by shard
    rows = [a[s:s + SEQ + 1] for s in range(0, 3 * SEQ, SEQ)] + [b[s:s + SEQ + 1] for s in range(0, 5 * SEQ, SEQ)]
    assert all(len(r) == SEQ + 1 for r in rows)
    return paths, rows


def loss_fn_of(gpt, encoding):
    def loss_fn(x, y):
        return gpt(x, gpt.attention_masks(x, encoding.eot_token, WINDOWS), y)
    return loss_fn


@pytest.mark.parametrize("n_rows,rows_per_batch", [(7, 3), (8, 8), (8, 5)])
def test_val_bpb_equals_a_per_position_loop(gpt, encoding, val_shards, n_rows, rows_per_batch):
    """Every target of the first n_rows rows is scored once (the last partial batch included, rows crossing into
    the second shard), its bytes counted from the tokenizer with <|endoftext|> 0."""
    paths, rows = val_shards
    ctx = DistContext(0, 0, 1, torch.device("cpu"), None)
    val_set = ValidationSet(paths, SEQ, n_rows)
    got_loss, got_bpb = evaluate_val(loss_fn_of(gpt, encoding), val_set, rows_per_batch,
                                     token_byte_lengths(encoding, gpt.padded_vocab), ctx)
    want_loss, want_bpb = plain_bpb(gpt, encoding, rows[:n_rows])
    assert got_loss == pytest.approx(want_loss, rel=2e-6)
    assert got_bpb == pytest.approx(want_bpb, rel=2e-6)


def test_val_bpb_two_ranks_sum_to_the_one_rank_figure(gpt, encoding, val_shards, monkeypatch):
    """Each rank scores its share; the all-reduced totals give the one-rank figure. The all-reduce is stood in for
    by adding the other rank's totals (ranks run one after the other here); lockstep calls are counted."""
    paths, rows = val_shards
    want_loss, want_bpb = plain_bpb(gpt, encoding, rows[:7])
    byte_lengths = token_byte_lengths(encoding, gpt.padded_vocab)
    kept = []

    def fake_all_reduce(ctx, tensor):
        if kept:
            tensor += kept[0]
        else:
            kept.append(tensor.clone())
        return tensor

    monkeypatch.setattr(bpb_module, "all_reduce_sum", fake_all_reduce)
    figures, calls = [], []
    for rank in (0, 1):
        ctx = DistContext(rank, rank, 2, torch.device("cpu"), "gloo")
        loss_fn = loss_fn_of(gpt, encoding)

        def counting(x, y, loss_fn=loss_fn):
            calls.append(rank)
            return loss_fn(x, y)
        figures.append(evaluate_val(counting, ValidationSet(paths, SEQ, 7, rank, 2), 3, byte_lengths, ctx,
                                    lockstep=True))
    # rank 0 has rows 0, 2, 4, 6 (batches of 3 + 1), rank 1 rows 1, 3, 5 (one batch of 3): lockstep runs rank 1's
    # first batch once more, and its result must not count
    assert calls.count(0) == calls.count(1) == 2
    assert figures[1][0] == pytest.approx(want_loss, rel=2e-6)
    assert figures[1][1] == pytest.approx(want_bpb, rel=2e-6)


# ----------------------------------------------------------------------------------------------- HellaSwag
def plain_hellaswag(model_fn, encoding, example):
    """One ending at a time: sum and per-token mean of -log p(completion token) over the tokenizer's logits."""
    prefix = [encoding.eot_token] + encoding.encode_ordinary(example["ctx"])
    sums, means = [], []
    for ending in example["endings"]:
        completion = encoding.encode_ordinary(" " + ending)
        row = prefix + completion
        with torch.no_grad():
            log_probs = torch.log_softmax(model_fn(torch.tensor([row]))[0, :, :encoding.n_vocab].double(), -1)
        losses = [-float(log_probs[t - 1, row[t]]) for t in range(len(prefix), len(row))]
        sums.append(sum(losses))
        means.append(sum(losses) / len(losses))
    return sums, means


HAND_EXAMPLES = [
    {"ctx": "Le café était", "endings": ["très chaud.", "naïve 日本語 🙂", "froid.", "€5 the cat"], "label": 1},
    {"ctx": "A cat", "endings": ["sat on the mat.", "sat on the mat.", "ran", "in a hat"], "label": 1},  # tie
    {"ctx": "Then", "endings": ["a", "the 🙂🙂", "héllo naïve", "in"], "label": 0},
    {"ctx": "x", "endings": ["ab", "ab", "ab", "ab"], "label": 0},  # all tie: ending 0 wins
]


def test_hellaswag_scores_and_ties_match_a_per_token_loop(gpt, encoding):
    def model_fn(idx):
        return gpt.predict(idx, encoding.eot_token, WINDOWS)

    scores = score_examples(model_fn, encoding, HAND_EXAMPLES, batch_size=3)
    acc = acc_norm = 0
    for example, got in zip(HAND_EXAMPLES, scores):
        sums, means = plain_hellaswag(model_fn, encoding, example)
        assert got["loss_sum"] == pytest.approx(sums, rel=1e-5)
        assert got["loss_mean"] == pytest.approx(means, rel=1e-5)
        # ties (identical endings) go to the lowest index: written out, not min()
        pred = next(i for i in range(4) if all(sums[i] <= s for s in sums))
        pred_norm = next(i for i in range(4) if all(means[i] <= m for m in means))
        assert (got["pred"], got["pred_norm"]) == (pred, pred_norm)
        acc += pred == example["label"]
        acc_norm += pred_norm == example["label"]
    assert scores[1]["pred"] in (0, 2, 3) and scores[3]["pred"] == scores[3]["pred_norm"] == 0
    result = evaluate_hellaswag(model_fn, encoding, HAND_EXAMPLES, batch_size=2, progress=False)
    assert (result["n"], result["acc_correct"], result["acc_norm_correct"]) == (4, acc, acc_norm)


Z = 1.959963984540054


@pytest.mark.parametrize("correct,n,want", [
    (1, 1, [1 / (1 + Z * Z), 1.0]),      # all right: lower bound n / (n + z^2)
    (0, 1, [0.0, Z * Z / (1 + Z * Z)]),  # all wrong: upper bound z^2 / (n + z^2)
    (10, 10, [10 / (10 + Z * Z), 1.0]),
    (0, 1000, [0.0, Z * Z / (1000 + Z * Z)]),
])
def test_wilson_interval_at_the_edges(correct, n, want):
    assert wilson_interval(correct, n) == pytest.approx(want, abs=1e-12)


# ------------------------------------------------------------------------------------------------- loader
BOS = 500


def plain_rows(shards, seq_len):
    """The documented contract, shard by shard in the given order: a row starts at the first BOS within seq_len
    tokens of where the previous one ended (else right there); a shard ends when a row of seq_len + 1 no longer
    fits; a shard shorter than that gives nothing."""
    rows = []
    for tokens in shards:
        end = 0
        while end + seq_len + 1 <= len(tokens):
            bos = [p for p in range(end, end + seq_len) if tokens[p] == BOS]
            start = bos[0] if bos else end
            if start + seq_len + 1 > len(tokens):
                break
            rows.append(tokens[start:start + seq_len + 1])
            end = start + seq_len
    return rows


def docs_shard(rng, n_tokens):
    tokens = []
    while len(tokens) < n_tokens:
        tokens += [BOS] + [int(t) for t in rng.integers(0, BOS, int(rng.integers(1, 30)))]
    return tokens[:n_tokens]


def test_loader_rows_over_shards_of_different_sizes_follow_the_contract(tmp_path):
    rng = np.random.default_rng(11)
    seq_len = 16
    # sizes: ordinary, shorter than one row (skipped), exactly one row, a long one, a last short one
    shards = [docs_shard(rng, n) for n in (203, 9, seq_len + 1, 517, 40)]
    shards[2][:5] = [1, 2, BOS, 3, 4]  # a row's worth, its first document cut: aligning leaves no row, so none
    paths = []
    for i, tokens in enumerate(shards):
        paths.append(str(tmp_path / f"train_{i:06d}.bin"))
        write_shard(paths[-1], np.array(tokens))
    want = plain_rows(shards, seq_len)
    rows_per_step = 4
    steps = len(want) // rows_per_step
    loader = BOSAlignedLoader(paths, seq_len, rows_per_step * seq_len, BOS)
    got = []
    for _ in range(steps):
        (x, y), = loader.next_batch()
        assert np.array_equal(x[:, 1:], y[:, :-1])
        got += np.concatenate([x, y[:, -1:]], axis=1).tolist()
    assert got == want[:steps * rows_per_step]
    # the next pass (shards in a seeded order) serves the same rows of each shard again, nothing else
    second = []
    for _ in range(steps + 3):
        (x, y), = loader.next_batch()
        second += np.concatenate([x, y[:, -1:]], axis=1).tolist()
    assert loader.epoch >= 1
    epoch1 = second[len(want) - steps * rows_per_step:][:len(want)]
    assert sorted(map(tuple, epoch1)) == sorted(map(tuple, want))


def test_loader_resume_at_every_step_continues_exactly(tmp_path):
    rng = np.random.default_rng(12)
    seq_len = 16
    paths = []
    for i, n in enumerate((150, 70, 301)):
        paths.append(str(tmp_path / f"train_{i:06d}.bin"))
        write_shard(paths[-1], np.array(docs_shard(rng, n)))
    straight = BOSAlignedLoader(paths, seq_len, 2 * seq_len, BOS, seed=5)
    batches = [straight.next_batch() for _ in range(60)]  # several epochs
    for k in range(0, 59, 7):
        first = BOSAlignedLoader(paths, seq_len, 2 * seq_len, BOS, seed=5)
        for _ in range(k):
            first.next_batch()
        resumed = BOSAlignedLoader(paths, seq_len, 2 * seq_len, BOS, seed=5)
        resumed.load_state_dict(first.state_dict())
        (x, y), = resumed.next_batch()
        (want_x, want_y), = batches[k]
        assert np.array_equal(x, want_x) and np.array_equal(y, want_y), k



def test_loader_resume_keeps_the_recorded_shard_order_whatever_seed_the_new_run_has(tmp_path):
    """The position (epoch, shard k of that epoch's order, offset) only means something in the order it was taken
    in: a run resumed with another --seed must still finish the epoch over the shards it had not read yet."""
    rng = np.random.default_rng(13)
    seq_len = 16
    paths = []
    for i in range(6):
        paths.append(str(tmp_path / f"train_{i:06d}.bin"))
        write_shard(paths[-1], np.array(docs_shard(rng, 60)))
    straight = BOSAlignedLoader(paths, seq_len, 2 * seq_len, BOS, seed=3)
    batches = [straight.next_batch()[0] for _ in range(60)]
    first = BOSAlignedLoader(paths, seq_len, 2 * seq_len, BOS, seed=3)
    steps = 0
    while not (first.epoch == 1 and first.order_pos == 2):  # mid-way through the first shuffled pass
        first.next_batch()
        steps += 1
    resumed = BOSAlignedLoader(paths, seq_len, 2 * seq_len, BOS, seed=4)
    resumed.load_state_dict(first.state_dict())
    for want_x, want_y in batches[steps:]:
        (x, y), = resumed.next_batch()
        assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
