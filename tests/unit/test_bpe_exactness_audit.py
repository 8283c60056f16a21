"""Adversarial exactness audit of the BPE trainer: every engine and the whole in-process pipeline against a naive
reference written here (recount every pair from scratch after each merge, the textbook algorithm), on corpora
built to break trainers; and the saved tiktoken encoder against replaying the merges in rank order."""
import random

import pytest
import torch
import regex

from gptlab.core.errors import UserError
from gptlab.tokenizer.format import EOT, PATTERNS, load_tokenizer
from gptlab.tokenizer.job import train_tokenizer
from gptlab.tokenizer.merges import train_merges_python, train_merges_torch
from gptlab.tokenizer.native import train_merges_native
from helpers.bpe_reference import pretoken_table, reference_bpe, txt_documents

ENGINES = {"python": train_merges_python, "native": train_merges_native,
           "torch": lambda table, n: train_merges_torch(table, n, "cpu")}
if torch.cuda.is_available():  # the GPU engine, where there is one (bench/gpu_session.sh runs these there)
    ENGINES["torch-cuda"] = lambda table, n: train_merges_torch(table, n, "cuda")


# ---------------------------------------------------------------------------------------------- the reference
def naive_bpe(word_counts, limit=None):
    """(merges, counts) of tests/helpers/bpe_reference.py's textbook BPE (ranks not needed here)."""
    return reference_bpe(word_counts, limit)[:2]


def apply_merges(piece, merges):
    """A pre-token's ids after replaying the merges in rank order (each left to right, non-overlapping)."""
    seq = list(piece)
    for k, (a, b) in enumerate(merges):
        i = 0
        while i < len(seq) - 1:
            if seq[i] == a and seq[i + 1] == b:
                seq[i:i + 2] = [256 + k]
            i += 1
    return seq


def test_the_reference_is_the_textbook_algorithm():
    # worked by hand: aaaaa → (a,a) x4 → [aa aa a]: (aa,aa) x1, (aa,a) x1; tie → greater bytes: (aa, aa) > (aa, a)
    assert naive_bpe({b"aaaaa": 1}) == ([(97, 97), (256, 256), (257, 97)], [4, 1, 1])
    # abababa: (a,b) x3 and (b,a) x3 tie → (b"b", b"a") is greater → b ba ba ba
    assert naive_bpe({b"abababa": 1}, 1) == ([(98, 97)], [3])
    assert apply_merges(b"aaa", [(97, 97)]) == [256, 97]


# ---------------------------------------------------------------------------------------------- merge engines
TABLES = {
    "runs_odd_even": {b"a" * n: 1 for n in range(2, 12)},
    "run_weights": {b"aaaa": 3, b"aaaaa": 2, b"aaaaaaa": 1},
    "alternating": {b"abababa": 1, b"babab": 2, b"ab": 1},
    "all_ties": {bytes([x, y]): 1 for x in b"pqrs" for y in b"pqrs"},
    "ties_later": {b"abcd": 1, b"dcba": 1, b"cdab": 1, b"badc": 1},
    "zero_then_back": {b"abab": 2, b"aab": 1, b"bab": 1, b"abb": 3},  # (a, b) sinks and new pairs around it rise
    "high_bytes": {b"\xff\xfe\xff\xfe\xff": 1, b"\xfe\xff": 2, b"\x00\xff\x00": 1, b"\xff\x00\xff\x00": 1},
    "utf8_mix": {"日本語".encode(): 2, "👨\u200d👩\u200d👧".encode(): 1, "e\u0301\u0301".encode(): 3,
                 "\ufffd\ufffd".encode(): 1},
    "huge_counts": {b"xyxy": 2**40, b"yxyx": 2**40, b"xx": 2**41 - 1},
    "many_ties_over_64": {bytes([x, y]): 1 for x in range(32, 42) for y in range(32, 42)},
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_engine_makes_every_merge_of_the_reference(name):
    table = TABLES[name]
    ref_merges, ref_counts = naive_bpe(table)
    possible = len(ref_merges)
    for engine, train in ENGINES.items():
        for n in sorted({1, max(1, possible // 2), possible}):
            result = train(table, n)
            assert (result.merges, result.counts) == (ref_merges[:n], ref_counts[:n]), (engine, n)
        with pytest.raises(UserError, match=f"only allows {possible} merges"):
            train(table, possible + 1)


def test_random_overlap_heavy_tables_on_every_engine():
    rng = random.Random(2026)
    for trial in range(30):
        alphabet = [b"a", b"ab", b"aab", b"\xe6\x97\xa5", b"\xf0\x9f"][trial % 5]
        table = {bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 24))): rng.choice([1, 1, 2, 3, 9])
                 for _ in range(rng.randint(1, 8))}
        ref_merges, ref_counts = naive_bpe(table)
        for engine, train in ENGINES.items():
            if ref_merges:
                result = train(table, len(ref_merges))
                assert (result.merges, result.counts) == (ref_merges, ref_counts), (engine, table)


# ---------------------------------------------------------------------------------------------- the pipeline
CORPORA = {
    "runs": b"aaaa aaaaa abababa " + b"a" * 7 + b" " + b"b" * 8 + EOT.encode() + b"xxxxxxxxx yyyyyyyy",
    "scripts": ("日本語のテキスト 👨\u200d👩\u200d👧\u200d👦👨\u200d👩\u200d👧\u200d👦 e\u0301e\u0301e\u0301 한국어 "
                "🙂🙂" + EOT + EOT + "Ωμέγα ΩΩΩ").encode(),
    "invalid_utf8": b"ab\xff\xfeab\xe6\x97 \xf0\x9f\x98ab \x80\x80\x80" + EOT.encode() + b"\xc3(\xa9 ab\xed\xa0\x80",
    "single_byte": b"a",
    "eot_as_text": b"text <|endoftext|> more <|endoftext| |endoftext|> <|endoftext|",
    "empty_documents": EOT.encode() * 2 + b"ab" + EOT.encode() * 2 + b"ba" + EOT.encode(),
}
PIPELINES = [("native", "native"), ("python", "regex"), ("torch", "native")]


def train_file(tmp_path, raw, vocabsize, samples=10**6, pattern="gpt4", engine="native", pretokenizer="native"):
    path = tmp_path / "corpus.txt"
    path.write_bytes(raw)
    return train_tokenizer(samples=samples, vocabsize=vocabsize, inputs=[str(path)], pattern=pattern,
                           device="cpu", engine=engine, pretokenizer=pretokenizer, workers=1, progress=False)


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_whole_pipeline_equals_the_reference_on_adversarial_text(tmp_path, corpus):
    raw = CORPORA[corpus]
    for pattern in ("gpt4", "gpt2"):
        ref_merges, ref_counts = naive_bpe(pretoken_table(txt_documents(raw, 10**6), PATTERNS[pattern]))
        possible = len(ref_merges)
        for engine, pretokenizer in PIPELINES:
            for n in sorted({0, min(1, possible), possible // 2, possible}):
                trained = train_file(tmp_path, raw, 256 + n, pattern=pattern, engine=engine,
                                     pretokenizer=pretokenizer)
                assert trained.result.merges == ref_merges[:n], (pattern, engine, n)
                assert trained.metadata["merge_counts"] == ref_counts[:n]
            with pytest.raises(UserError, match=f"only allows {possible} merges"):
                train_file(tmp_path, raw, 257 + possible, pattern=pattern, engine=engine, pretokenizer=pretokenizer)


def test_samples_cut_inside_documents_and_emoji_sequences(tmp_path):
    raw = ("ab 日本語のテキスト 👨\u200d👩\u200d👧\u200d👦 ab" + EOT + "aaaaaaa" + EOT + "x\xe9\u0301 é").encode()
    raw += b"\xff\xfe tail"
    for samples in (1, 5, 10, 14, 23, 30, 38, 41):  # inside words, inside the ZWJ sequence, at and past a separator
        table = pretoken_table(txt_documents(raw, samples), PATTERNS["gpt4"])
        ref_merges, _ = naive_bpe(table)
        for engine, pretokenizer in PIPELINES[:2]:
            trained = train_file(tmp_path, raw, 256 + len(ref_merges), samples=samples, engine=engine,
                                 pretokenizer=pretokenizer)
            assert trained.result.merges == ref_merges, (samples, engine)
            assert trained.metadata["chars_used"] == sum(map(len, txt_documents(raw, samples)))


def test_few_characters_of_multibyte_text_allow_more_merges_than_characters(tmp_path):
    # 10 characters, one pre-token of 30 bytes: more merges than characters (22, by the reference)
    raw = "日本語のテキスト日本語のテキスト".encode()
    ref_merges, _ = naive_bpe(pretoken_table(txt_documents(raw, 10), PATTERNS["gpt4"]))
    possible = len(ref_merges)
    assert possible > 10
    assert train_file(tmp_path, raw, 256 + possible, samples=10).result.merges == ref_merges
    with pytest.raises(UserError, match=f"only allows {possible} merges"):
        train_file(tmp_path, raw, 257 + possible, samples=10)
    with pytest.raises(UserError, match="--samples 10 characters cannot make that many"):  # 4 bytes a char at most
        train_file(tmp_path, raw, 256 + 40, samples=10)


# ---------------------------------------------------------------------------------------------- the saved encoder
def random_text(rng, n):
    pools = ["abc xyz  ", "aaaa", "日本語テキ", "👨\u200d👩🙂", "e\u0301\u0308", "\r\n\t ", "0123", "'s'll'VE",
             "Ωμ", "\ufffd", EOT]
    pick = lambda: rng.choice(rng.choice(pools)) if rng.random() < 0.9 else rng.choice(pools)  # noqa: E731
    return "".join(pick() for _ in range(n))


def test_the_saved_encoder_replays_the_merges_and_round_trips(tmp_path):
    rng = random.Random(11)
    raw = EOT.join([random_text(rng, 300) for _ in range(12)]).encode() + b"\xff\xfe\x80"
    trained = train_file(tmp_path, raw, 256 + 150)
    trained_path = tmp_path / "t.pkl"
    from gptlab.tokenizer.job import save

    save(trained, str(trained_path))
    enc = load_tokenizer(str(trained_path))
    merges = trained.result.merges
    texts = [random_text(rng, rng.randint(0, 80)) for _ in range(150)]
    texts += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))).decode("utf-8", "replace")
              for _ in range(100)]
    for text in texts:
        tokens = enc.encode_ordinary(text)
        expected = [t for piece in regex.findall(PATTERNS["gpt4"], text)
                    for t in apply_merges(piece.encode(), merges)]
        assert tokens == expected, text
        assert enc.decode_bytes(tokens) == text.encode()
    assert enc.encode(EOT, allowed_special="all") == [256 + 150]
