"""Exactness of the BPE trainer: both implementations against a slow, obviously-correct reference written here."""
import json
import random
from collections import Counter

import pytest
import torch
import regex

from gptlab.tokenizer import native
from gptlab.tokenizer.native import train_merges_native
from gptlab.tokenizer.pretokenize import clean_document, pretokenize
from gptlab.tokenizer.merges import finish_result, tie_key, train_merges_python, train_merges_torch
from gptlab.core.errors import UserError
from gptlab.tokenizer.format import EOT, PATTERNS

from conftest import FINEWEB_150
from helpers.bpe_reference import reference_bpe


# Every engine the trainer has, the C loop included: the README promises it wherever a C compiler is (see
# test_the_c_merge_loop_builds), so a missing compiler fails these tests rather than skipping the engine.
ENGINES = {"python": train_merges_python, "native": train_merges_native,
           "torch": lambda table, n: train_merges_torch(table, n, "cpu")}
if torch.cuda.is_available():  # the GPU engine, where there is one (bench/gpu_session.sh runs these there)
    ENGINES["torch-cuda"] = lambda table, n: train_merges_torch(table, n, "cuda")


def test_the_c_merge_loop_builds():
    assert native.available(), (
        f"the C merge loop (gptlab/tokenizer/merge_loop.c, the default engine) could not be built: "
        f"{native.unavailable_reason()}. Install a C compiler (apt-get install gcc) so that its tests run")


# ---------------------------------------------------------------------------------------------- the reference
def reference_word_counts(texts, pattern):
    counts = Counter()
    for text in texts:
        for piece in regex.findall(pattern, clean_document(text)):
            counts[piece.encode("utf-8")] += 1
    return counts


# ---------------------------------------------------------------------------------------------- corpora
HAND_MADE = [
    ["aaaa", "aaa", "a", "aa aaaaaaa"],
    ["!!!!!", "!!!!!!!!!!", "?!?!?!", "....   ....", "\t\t\t\t"],
    ["x" + " " * 40 + "y", "\n\n\n\n", "  \n  \n", "\r\n\r\n\r\n", "line\r\nline\r\n"],
    ["héllo wörld", "日本語のテキスト", "🙂🙂🙂 🙂🙂", "👨‍👩‍👧‍👦 family", "Ωμέγα ΩΩΩ", "a\u0301\u0301\u0301"],
    ["1234567890", "3.14159265358979", "2024-05-20 12:00", "1,000,000"],
    ["don't won't it's we'll they've I'm you're", "DON'T IT'S", "'s's's's"],
    ["", "", "ab", "", "ba", "ab ba ab ba"],
    ["ab ba", "ba ab", "cd dc", "xy yx"],  # every pair count ties
    ["abc abc abcabc", "bcab bcab", "ab c a bc abc"],
    ["text with " + EOT + " inside", EOT + EOT, "<|endoftext|>x"],
    ["\udcff lone surrogate", "ok"],
]


def random_corpus(rng, n_docs):
    alphabet = list("aab  \n\t!?.'0123456789éü日🙂\r") + ["'s", "'ll", "\r\n", "    ", "aaaa", "!!!"]
    docs = []
    for _ in range(n_docs):
        length = rng.randint(0, 60)
        docs.append("".join(rng.choice(alphabet) for _ in range(length)))
    return docs


def corpora():
    rng = random.Random(1234)
    out = [(f"hand{i}", texts) for i, texts in enumerate(HAND_MADE)]
    out += [(f"random{i}", random_corpus(rng, rng.randint(1, 12))) for i in range(12)]
    return out


def max_merges(word_counts):
    """How many merges the words allow at most (each merge shortens some word by at least one)."""
    return sum(len(w) - 1 for w in word_counts)


CASES = [(name, texts, pat) for name, texts in corpora() for pat in ("gpt4", "gpt2")]


@pytest.mark.parametrize("name,texts,pattern_name", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_python_trainer_matches_reference(name, texts, pattern_name):
    word_counts = reference_word_counts(texts, PATTERNS[pattern_name])
    table, _, _ = pretokenize(texts, PATTERNS[pattern_name])
    assert table == dict(word_counts)
    possible = reference_possible(word_counts)
    num = min(possible, 60)
    ref_merges, ref_counts, ref_ranks = reference_bpe(word_counts, num)
    result = train_merges_python(table, num)
    assert result.merges == ref_merges
    assert result.counts == ref_counts
    assert result.mergeable_ranks == ref_ranks
    fast = train_merges_native(table, num)
    assert (fast.merges, fast.counts, fast.mergeable_ranks) == (ref_merges, ref_counts, ref_ranks)
    with pytest.raises(UserError, match=f"only allows {possible} merges"):
        train_merges_native(table, possible + 1)
    with pytest.raises(UserError, match=f"only allows {possible} merges"):
        train_merges_python(table, possible + 1)


def reference_possible(word_counts):
    """Run the reference until it runs out of pairs (bounded): the exact number of possible merges."""
    bound = max_merges(word_counts)
    try:
        reference_bpe(word_counts, bound + 1)
    except UserError as err:
        return int(str(err).split()[1])
    raise AssertionError("the reference never ran out of pairs")


@pytest.mark.parametrize("name,texts", corpora()[:14:2] + corpora()[-4:])
def test_torch_trainer_equals_python_trainer(name, texts):
    table, _, _ = pretokenize(texts, PATTERNS["gpt4"])
    num = min(reference_possible(table), 40)
    python = train_merges_python(table, num)
    torch_cpu = train_merges_torch(table, num, device="cpu")
    assert torch_cpu.merges == python.merges
    assert torch_cpu.counts == python.counts


def test_torch_trainer_without_nonzero_static_gives_the_same_merges(monkeypatch):
    """Where a torch build lacks nonzero_static for the device, the engine falls back to nonzero (same result)."""
    from gptlab.tokenizer import merges as trainer

    texts = corpora()[-1][1]
    table, _, _ = pretokenize(texts, PATTERNS["gpt4"])
    num = min(reference_possible(table), 60)
    monkeypatch.setitem(trainer._NONZERO_STATIC_WORKS, "cpu", False)
    assert train_merges_torch(table, num, device="cpu").merges == train_merges_python(table, num).merges


def test_running_out_of_pairs_is_a_clear_error():
    table = {b"ab": 3, b"abc": 1}  # at most 2 merges: (a,b) then (ab,c)
    assert train_merges_python(table, 2).merges == [(97, 98), (256, 99)]
    assert train_merges_native(table, 2).merges == [(97, 98), (256, 99)]
    for train in ENGINES.values():
        with pytest.raises(UserError, match="only allows 2 merges"):
            train(table, 3)


def test_overlapping_runs_merge_left_to_right():
    result = train_merges_python({b"aaa": 1}, 2)
    assert result.merges == [(97, 97), (256, 97)]  # aaa → aa a → aaa
    assert result.counts == [2, 1]
    for train in ENGINES.values():
        assert train({b"aaa": 1}, 2).merges == result.merges


def test_tie_goes_to_greatest_bytes():
    # (b, a), (a, b), (c, d) all occur once: the greatest (left, right) bytes is (c, d)
    for train in ENGINES.values():
        assert train({b"ab": 1, b"ba": 1, b"cd": 1}, 1).merges == [(ord("c"), ord("d"))]
    # a prefix sorts before its extension: (b"a", b"b") < (b"a", b"bc")-like comparisons via tie_key
    assert tie_key(b"ab") < tie_key(b"a") < tie_key(b"")
    assert tie_key(b"b") < tie_key(b"a\xff")


def test_a_merge_spelling_an_existing_token_is_refused():
    # (a,b)=256 'ab', (256,c)=257 'abc', (b,c)=258 'bc', (a,258)=259 'abc' again: no exact BPE makes this list
    with pytest.raises(RuntimeError, match=r"merge 3 \(97, 258\) spells b'abc', which id 257 already spells"):
        finish_result([(97, 98), (256, 99), (98, 99), (97, 258)], [5, 4, 3, 2])
    assert finish_result([(97, 98), (256, 99)], [5, 4]).mergeable_ranks[b"abc"] == 257


def test_no_merge_repeats_a_token_on_overlap_heavy_tables():
    # gptlab/tokenizer/merges.py proves it; the reference checks it here on tables built to try: runs of one letter
    # (overlapping pairs), two and three letters, every merge they allow. Each engine agrees with the reference.
    rng = random.Random(7)
    for trial in range(45):
        alphabet = (b"a", b"ab", b"abc")[trial % 3]
        table = {bytes(rng.choice(alphabet) for _ in range(rng.randint(2, 14))): rng.choice([1, 1, 2, 3, 5, 8])
                 for _ in range(rng.randint(1, 6))}
        num = reference_possible(table)
        ref_merges, _, ref_ranks = reference_bpe(table, num)
        assert len(ref_ranks) == 256 + num, table  # every merge made a byte string of its own
        for name, train in ENGINES.items():
            assert train(table, num).merges == ref_merges, (name, table)


def test_real_text_matches_reference():
    with open(FINEWEB_150) as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(6), f)]
    texts = [t[:3000] for t in texts]
    table, _, _ = pretokenize(texts, PATTERNS["gpt4"])
    ref_merges, ref_counts, _ = reference_bpe(dict(table), 120)
    assert train_merges_python(table, 120).merges == ref_merges
    assert train_merges_torch(table, 120, "cpu").merges == ref_merges
    assert train_merges_native(table, 120).merges == ref_merges


def test_native_equals_python_on_real_text_at_scale():
    with open(FINEWEB_150) as f:
        texts = [json.loads(line)["text"] for line in f]
    table, _, _ = pretokenize(texts, PATTERNS["gpt4"], workers=2)
    python, fast = train_merges_python(table, 3000), train_merges_native(table, 3000)
    assert fast.merges == python.merges and fast.counts == python.counts


def test_parallel_pretokenize_equals_single_process():
    with open(FINEWEB_150) as f:
        texts = [json.loads(line)["text"] for line in f]
    single, chars, docs = pretokenize(texts, PATTERNS["gpt4"], workers=1)
    parallel, chars2, docs2 = pretokenize(iter(texts), PATTERNS["gpt4"], workers=2, chunk_chars=50_000)
    assert parallel == single and (chars, docs) == (chars2, docs2) == (sum(map(len, texts)), len(texts))
    assert all(isinstance(c, int) for c in single.values())
