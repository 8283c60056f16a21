"""Tests written for the one-line mutants of bench/mutants.py (round 3 of issue 27) that the suite let through:
each expectation comes from a hand computation, a published value or an independent reference implementation."""
from collections import Counter

import pytest
import regex

from conftest import FINEWEB_150
from helpers.tiny_data import read_docs
from gptlab.tokenizer.format import PATTERNS
from gptlab.tokenizer.pretokenize import pretokenize


# ---------------------------------------------------------------------------------------------- BPE engines
@pytest.mark.parametrize("workers", [2, 3])
def test_regex_pretokenize_on_workers_sums_every_workers_table(workers):
    # the regex path merges the workers' Counters itself (the native one adds packed tables in C): every chunk of
    # every worker must count. Reference: regex.findall over each document, counted here.
    texts = read_docs(FINEWEB_150, 60)
    expected = Counter(piece.encode() for text in texts for piece in regex.findall(PATTERNS["gpt2"], text))
    table, chars, docs = pretokenize(iter(texts), PATTERNS["gpt2"], workers=workers, chunk_chars=1,
                                     pretokenizer="regex")
    assert table == expected and docs == len(texts)


# ---------------------------------------------------------------------------------------------- tokenizer format
def test_ranks_sha256_tells_apart_vocabularies_that_give_the_same_bytes_other_ids():
    from gptlab.tokenizer.format import ranks_sha256

    base = {bytes([i]): i for i in range(256)}
    a = {**base, b"ab": 256, b"cd": 257}
    swapped = {**base, b"ab": 257, b"cd": 256}  # the same tokens, other ids: other token ids in every shard
    assert ranks_sha256(a) != ranks_sha256(swapped)
    # one token, other id (ids may have gaps: tokenizers load with them): the same bytes in the same order
    assert ranks_sha256({**base, b"ab": 256}) != ranks_sha256({**base, b"ab": 300})
    assert ranks_sha256(a) == ranks_sha256(dict(reversed(list(a.items()))))  # insertion order is no content


def test_a_vocabulary_without_byte_255_is_refused_as_damaged(tmp_path):
    # byte-level BPE encodes any text only with all 256 single bytes; b"\xff" (never in valid UTF-8, but tiktoken
    # encodes bytes) is the last of them
    import pickle

    from gptlab.core.errors import UserError
    from gptlab.tokenizer.format import EOT, load_tokenizer

    path = tmp_path / "no_ff.pkl"
    path.write_bytes(pickle.dumps({"pat_str": PATTERNS["gpt4"], "mergeable_ranks": {bytes([i]): i for i in range(255)},
                                   "special_tokens": {EOT: 256}}))
    with pytest.raises(UserError, match=r"lacks 1 of the 256 single bytes \(first: b'\\xff'\)"):
        load_tokenizer(str(path))


# ---------------------------------------------------------------------------------------------- optimizers
def test_adam_and_muon_settings_are_modded_nanogpts():
    # modded-nanogpt's FlexAttention-era records (train_gpt.py): Adam betas (0.8, 0.95), eps 1e-10, lr 0.22 for the
    # head, 0.6 for the embeddings, 0.04 for the scalars; Muon lr 0.05, momentum 0.95, 5 Newton-Schulz steps
    import model as arch
    import train_gpt

    gpt = arch.GPT(arch.GPTConfig(vocab_size=128, num_layers=2, num_heads=1, model_dim=64, window_size=128))
    adam, muon = train_gpt.build_optimizers(gpt)
    assert {g["name"]: g["lr"] for g in adam.param_groups} == {"head": 0.22, "embeddings": 0.6, "scalars": 0.04}
    for group in adam.param_groups:
        assert group["betas"] == (0.8, 0.95) and group["eps"] == 1e-10 and group["weight_decay"] == 0
    assert [(g["lr"], g["momentum"], g["ns_steps"]) for g in muon.param_groups] == [(0.05, 0.95, 5)]


# ---------------------------------------------------------------------------------------------- shards
def test_rank_digits_grow_only_past_1000_ranks():
    # ranks 0..999 fit 3 digits; a 1001st rank (number 1000) needs a 4th, and then every rank gets 4 so that names
    # sort by rank (shards.py's docstring)
    from gptlab.dataset.shards import rank_digits, shard_filename

    assert [rank_digits(w) for w in (1, 2, 999, 1000, 1001, 10000, 10001)] == [3, 3, 3, 3, 4, 4, 5]
    assert shard_filename("train", 7, 999, 1000) == "train_r999_000007.bin"
    assert shard_filename("train", 7, 5, 1001) == "train_r0005_000007.bin"


def test_a_writer_resumed_mid_document_records_positions_inside_that_document(tmp_path):
    # resume at document 5, token 2: the chunk starts with all of document 5 ([eot] f g h i j) and the writer drops
    # its first 2 tokens. Shards of 3 tokens: g h i | j [eot] k | l. By hand, the next token after each shard is
    # j = document 5's token 5, l = document 6's token 2, then document 7's start.
    import numpy as np

    from gptlab.dataset import shards as shard_format
    from gptlab.dataset.fineweb import ShardWriter

    eot = 256
    docs = ["fghij", "kl"]
    tokens = np.array([t for d in docs for t in [eot] + list(d.encode())], dtype=np.uint32)
    manifest = {"shard_version": 1, "shards": [], "rank": 0, "world_size": 1}
    plan = [("train", f"train_00000{k}.bin") for k in (2, 3, 4)]
    writer = ShardWriter(str(tmp_path), manifest, plan, (5, 2), eot, np.uint16, shard_size=3, val_tokens=0,
                         progress=None)
    writer.consume(tokens, np.array([len(d) + 1 for d in docs]))
    writer.flush()
    assert [(s["start"], s["end"]) for s in manifest["shards"]] == [([5, 2], [5, 5]), ([5, 5], [6, 2]),
                                                                     ([6, 2], [7, 0])]
    assert shard_format.read_shard(str(tmp_path / "train_000002.bin")).tolist() == list(b"ghi")


# ---------------------------------------------------------------------------------------------- loader
def test_each_ranks_validation_rows_are_the_tokens_at_its_listed_locations(tmp_path):
    # my_rows() names (shard, start) of this rank's rows: every world_size-th row from the rank's own index. The
    # rows batches() yields must be the shard's tokens there (read back here with numpy), in that order.
    import numpy as np

    from gptlab.dataset.loader import ValidationSet
    from gptlab.dataset.shards import write_shard

    paths = []
    for k in range(2):
        path = str(tmp_path / f"val_{k:06d}.bin")
        write_shard(path, np.arange(1000 * k, 1000 * k + 90) % 65536)
        paths.append(path)
    seq_len, n_rows = 8, 19  # shard 0 holds 11 rows ((90 - 1) // 8), shard 1 the other 8
    everything = ValidationSet(paths, seq_len, n_rows).my_rows()
    for world in (2, 3):
        for rank in range(world):
            vs = ValidationSet(paths, seq_len, n_rows, rank=rank, world_size=world)
            assert vs.my_rows() == everything[rank::world]
            rows = [np.r_[x_row, y_row[-1]] for x, y in vs.batches(4) for x_row, y_row in zip(x, y)]
            expected = [np.fromfile(p, dtype="<u2", offset=1024)[s:s + seq_len + 1] for p, s in vs.my_rows()]
            assert len(rows) == len(expected) and all((a == b).all() for a, b in zip(rows, expected))


# ---------------------------------------------------------------------------------------------- model
def test_logits_read_the_rms_normalised_output_of_the_last_block():
    # model.py: x = norm(x) after the blocks, then the soft-capped head. Recomputed here from the last block's output
    # (a forward hook) with torch's F.rms_norm and the formula 30 sigmoid(z / (7.5 sqrt(d))), on random weights (at
    # init the zero-init projections leave the stream normalised, which would hide a missing norm)
    import torch
    import torch.nn.functional as F

    import model as arch

    torch.manual_seed(0)
    gpt = arch.GPT(arch.GPTConfig(vocab_size=64, num_layers=2, num_heads=2, model_dim=32, window_size=128))
    with torch.no_grad():
        for p in gpt.parameters():
            p.normal_(0, 0.5)
    seen = {}
    gpt.blocks[-1].register_forward_hook(lambda module, inputs, out: seen.update(h=out))
    idx = torch.randint(0, 64, (1, 128))
    logits = gpt(idx, gpt.attention_masks(idx, 0, gpt.final_windows()))
    h = seen["h"].float()
    assert h.pow(2).mean(-1).sqrt().sub(1).abs().max() > 0.1  # the stream is not already unit-RMS
    z = F.linear(F.rms_norm(h, (32,)), gpt.lm_head.weight.float())
    torch.testing.assert_close(logits, 30 * torch.sigmoid(z / (7.5 * 32 ** 0.5)), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- checkpoint hash
def test_payload_hash_covers_every_key_and_nested_sha256_but_not_dict_order():
    # format.payload_sha256: every value under its key, in a fixed order, only the top-level "sha256" (the
    # checksum itself) left out; a model_source's own "sha256" is content like any other
    import torch

    from gptlab.checkpoint.format import payload_sha256

    payload = {"step": 3, "model": {"w": torch.arange(4.0)}, "model_source": {"file": "model.py", "sha256": "aa"}}
    reordered = {"model_source": {"sha256": "aa", "file": "model.py"}, "model": {"w": torch.arange(4.0)}, "step": 3}
    assert payload_sha256(payload) == payload_sha256(reordered)
    assert payload_sha256(payload) == payload_sha256({**payload, "sha256": "anything"})
    renamed = {"step": 3, "model": {"v": torch.arange(4.0)}, "model_source": payload["model_source"]}
    assert payload_sha256(renamed) != payload_sha256(payload)
    other_source = {**payload, "model_source": {"file": "model.py", "sha256": "bb"}}
    assert payload_sha256(other_source) != payload_sha256(payload)


# ---------------------------------------------------------------------------------------------- scaling
def test_compute_optimal_spends_c_as_6nd_at_the_minimum_of_the_law():
    # Hoffmann et al.'s allocation: C = 6 N D, and N minimises L(N, C / 6N). Checked against the paper's fitted
    # law (E 1.69, A 406.4, alpha 0.34, B 410.7, beta 0.28; scales 1) with scipy's bounded scalar minimiser
    from types import SimpleNamespace

    import numpy as np
    from scipy.optimize import minimize_scalar

    from gptlab.compare.scaling import compute_optimal

    theta = np.array([1.69, 406.4, 0.34, 410.7, 0.28])
    flops = 5.76e23
    n_of, d_of, loss_of = compute_optimal(SimpleNamespace(scales=(1.0, 1.0)), flops)
    n, d = float(n_of(theta)), float(d_of(theta))
    assert 6 * n * d == pytest.approx(flops, rel=1e-9)

    def law(log_n):
        n_ = np.exp(log_n)
        return 1.69 + 406.4 / n_ ** 0.34 + 410.7 / (flops / 6 / n_) ** 0.28

    best = minimize_scalar(law, bounds=(np.log(1e6), np.log(1e15)), method="bounded", options={"xatol": 1e-10})
    assert n == pytest.approx(np.exp(best.x), rel=1e-4)
    assert float(loss_of(theta)) == pytest.approx(best.fun, rel=1e-9)


def test_a_dollar_budget_is_dollars_over_price_gpu_hours_at_the_runs_flops_per_gpu_hour():
    # $120 at $3/GPU-hour = 40 GPU-hours; the runs did 1e15, 2e15 and 3e15 FLOPs per GPU-hour: median 2e15
    from types import SimpleNamespace

    from gptlab.compare.scaling import budget_in_flops

    points = [SimpleNamespace(flops=r * 10.0, gpu_hours=10.0, usd_per_gpu_hour=None) for r in (1e15, 2e15, 3e15)]
    flops, how = budget_in_flops("usd", 120.0, points, usd_per_gpu_hour=3.0)
    assert flops == pytest.approx(40 * 2e15) and "40 GPU-hours" in how
    assert budget_in_flops("gpu_hours", 40.0, points)[0] == pytest.approx(40 * 2e15)


# ---------------------------------------------------------------------------------------------- statistics
def test_hellaswag_counts_round_an_accuracy_back_to_its_whole_count():
    # 29 of 100 right is recorded as 0.29, and 0.29 * 100 is 28.999999999999996 in binary floating point
    from types import SimpleNamespace

    from gptlab.compare.stats import hellaswag_counts

    assert 0.29 * 100 < 29
    assert hellaswag_counts(SimpleNamespace(hs_acc_norm=0.29, hs_n=100)) == (29, 100)
    assert hellaswag_counts(SimpleNamespace(hs_acc_norm=2913 / 10042, hs_n=10042)) == (2913, 10042)


# ---------------------------------------------------------------------------------------------- sharded Adam
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_flat_shards_slices_of_all_ranks_hold_every_element_once(world_size):
    # 3 + 2 + 4 = 9 elements cut into world_size equal slices (ceil(9 / W) each, zero padding at the end): laid
    # end to end, the ranks' slices are the parameters flattened in order, whatever W divides
    import torch

    from gptlab.train.comm import FlatShards

    params = [torch.nn.Parameter(torch.arange(n, dtype=torch.float32) + 10 * k) for k, n in enumerate((3, 2, 4))]
    groups = [{"params": params}]
    slices = [FlatShards(groups, rank, world_size).my_part(0, [p.detach() for p in params])
              for rank in range(world_size)]
    flat = torch.cat(slices)
    assert all(len(s) == -(-9 // world_size) for s in slices)
    assert flat[:9].tolist() == [0, 1, 2, 10, 11, 20, 21, 22, 23] and not flat[9:].any()


# ---------------------------------------------------------------------------------------------- gradient sync
def test_gradient_sync_gives_each_small_tensor_back_its_own_summed_gradient():
    # a one-process gloo group: the all-reduce is the identity, so after finish() every gradient must be what
    # backward alone gives (autograd, computed again here); the small tensors travel in one flat bucket and must
    # each come back from their own place in it
    import torch
    import torch.distributed as dist

    from gptlab.train.comm import GradientSync

    torch.manual_seed(0)
    params = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n)) for n in (3, 5, 2)])
    model = torch.nn.Module()
    model.params = params

    def loss():
        return sum((k + 1) * (p ** 2).sum() for k, p in enumerate(params)) + (params[0].sum() * params[2].sum())

    expected = torch.autograd.grad(loss(), list(params))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        sync = GradientSync(model, [torch.optim.Adam(params)], world_size=2)  # 2: the hooks and buckets are used
        assert len(sync.buckets) == 1 and len(sync.buckets[0]) == 3
        sync.armed = True
        loss().backward()
        sync.finish()
    finally:
        dist.destroy_process_group()
    for p, g in zip(params, expected):
        torch.testing.assert_close(p.grad, g)


# ---------------------------------------------------------------------------------------------- export
def test_tiktoken_merges_are_ranked_by_the_merged_tokens_id_whatever_the_dicts_order():
    # tiktoken's rule: the pair whose concatenation has the lowest id merges first; a token reachable by two cuts
    # lists both, lower (left id, right id) first. The vocabulary here is given in reverse id order (a file's dict
    # need not be sorted). By hand: 256 = a+b, 257 = c+d, 258 = ab+c (a+bc is no pair: bc is no token),
    # 259 = ab+cd or abc+d: (256, 257) before (258, 100)
    from gptlab.export.hf_folder import tiktoken_merges

    ranks = {bytes([i]): i for i in range(256)}
    ranks.update({b"ab": 256, b"cd": 257, b"abc": 258, b"abcd": 259})
    reverse = dict(reversed(list(ranks.items())))
    expected = [(b"a", b"b"), (b"c", b"d"), (b"ab", b"c"), (b"ab", b"cd"), (b"abc", b"d")]
    assert tiktoken_merges(reverse) == expected


def test_cached_next_logits_are_the_full_forwards_logits_at_the_last_token():
    # generate() samples the token after everything fed so far: after a prompt (many new tokens at once) and after
    # each sampled token, the cached path must give the full forward's logits at the LAST position (model.predict
    # over the whole row, cut to the tokenizer's ids), on random weights that make every position's logits differ
    import torch

    import model as arch
    from gptlab.export.generate import cached_next_logits

    torch.manual_seed(0)
    gpt = arch.GPT(arch.GPTConfig(vocab_size=100, num_layers=2, num_heads=2, model_dim=32, window_size=256)).eval()
    with torch.no_grad():
        for p in gpt.parameters():
            p.normal_(0, 0.5)
    eot, n_vocab = 99, 90
    prompt = [eot] + torch.randint(0, 90, (40,)).tolist()
    next_logits = cached_next_logits(arch.KVCache(gpt, eot), n_vocab=n_vocab)
    fed = list(prompt)
    got = next_logits(prompt)
    for token in (5, 17):
        torch.testing.assert_close(got, gpt.predict(torch.tensor([fed]), eot)[0, -1, :n_vocab], rtol=1e-4, atol=1e-4)
        fed.append(token)
        got = next_logits([token])
    full = gpt.predict(torch.tensor([fed]), eot)[0, :, :n_vocab]
    torch.testing.assert_close(got, full[-1], rtol=1e-4, atol=1e-4)
    assert (full[0] - full[-1]).abs().max() > 1e-2  # positions differ: the test can tell them apart
