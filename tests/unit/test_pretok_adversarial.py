"""Adversarial cases for the native pre-tokenizer (gptlab/tokenizer/pretok_scan.c) with `regex.findall` as the
reference: hand-worked splits at each alternative's boundary, every string of up to four characters over one
representative of each class the scanner tells apart, runs longer than any fixed buffer, document boundaries, and
a grammar-based differential fuzz (concatenations of boundary tokens, a different generator from
test_pretok_native.py's)."""
import itertools
import random
from collections import Counter

import pytest
import regex

from gptlab.tokenizer import native
from gptlab.tokenizer import pretokenize as pretok
from gptlab.tokenizer.format import PATTERNS
from gptlab.tokenizer.native import NativeCounter, native_split

pytestmark = pytest.mark.skipif(not native.scanner_available(), reason="no C compiler for pretok_scan.c "
                                "(test_pretok_native.py's build test fails then)")

# (text, gpt4 split, gpt2 split), each worked out by hand from the pattern's alternatives (format.PATTERNS)
HAND_WORKED = [
    # (?i:[sdmt]) takes U+017F (long s folds to s) in gpt4 only; after it a new pre-token starts
    ("'\u017fa", ["'\u017f", "a"], ["'", "\u017fa"]),
    ("WE'LL", ["WE", "'LL"], ["WE", "'", "LL"]),
    ("x'l", ["x", "'l"], ["x", "'", "l"]),  # 'l alone is no contraction: apostrophe + letters (gpt4)
    ("it\u2019s", ["it", "\u2019s"], ["it", "\u2019", "s"]),  # U+2019 starts no contraction
    ("'\u212aa", ["'\u212aa"], ["'", "\u212aa"]),  # Kelvin sign: a letter, folds to k (no contraction)
    # \s is White_Space: U+00A0, U+3000 are; U+FEFF and U+001C..U+001F are not (str.isspace() says they are)
    ("x \u00a0\u3000y", ["x", " \u00a0", "\u3000y"], ["x", " \u00a0", "\u3000", "y"]),
    ("\ufeffword", ["\ufeffword"], ["\ufeff", "word"]),
    ("\x1c\x1d a", ["\x1c\x1d", " a"], ["\x1c\x1d", " a"]),
    # \p{N} takes Nl and No (Roman numerals, fractions, superscripts, the ideographic zero), three at a time in gpt4
    ("\u216b\u00bd\u00b2\u300712345", ["\u216b\u00bd\u00b2", "\u300712", "345"], ["\u216b\u00bd\u00b2\u300712345"]),
    # combining marks are not letters: they form their own punctuation run
    ("e\u0301\u0301x", ["e", "\u0301\u0301", "x"], ["e", "\u0301\u0301", "x"]),
    # \s*[\r\n] backs off to the last line break; \s+(?!\S) leaves one space for the word
    ("a\r\n  \n   b", ["a", "\r\n  \n", "  ", " b"], ["a", "\r\n  \n  ", " b"]),
    ("!!\r\n\r\nx", ["!!\r\n\r\n", "x"], ["!!", "\r\n\r", "\n", "x"]),
    ("abc '", ["abc", " '"], ["abc", " '"]),  # ends after ' ?[^\s\p{L}\p{N}]
    ("a \n", ["a", " \n"], ["a", " \n"]),
    ("a  ", ["a", "  "], ["a", "  "]),  # (?!\S) holds at the end of the text
    # astral letters, digits and symbols; private use and unassigned code points are "other"
    ("\U00020000\U0001d7ce\U0001f600\U000f0000\u0378", ["\U00020000", "\U0001d7ce", "\U0001f600\U000f0000\u0378"],
     ["\U00020000", "\U0001d7ce", "\U0001f600\U000f0000\u0378"]),
]


@pytest.mark.parametrize("text,gpt4,gpt2", HAND_WORKED)
def test_hand_worked_splits(text, gpt4, gpt2):
    for name, expected in (("gpt4", gpt4), ("gpt2", gpt2)):
        assert regex.findall(PATTERNS[name], text) == expected, f"the reference itself ({name})"
        assert native_split(text, name) == expected, name


# one character of each kind the scanner tells apart (class bits, byte length, the contraction letters, ' ' \r \n)
REPRESENTATIVES = ["a", "\u017f", "s", "L", "e", "v", "r", "1", "\u00b2", " ", "\r", "\n", "\t", "\u3000", "!", "'",
                   "\u0301", "\U0001f600", "\U0001d400", "\x85", "\u2019", "\u212a"]


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_every_short_string_of_class_representatives(pattern_name):
    """All 245,410 strings of 1 to 4 representatives (an offline run took all 13.5M of up to 5, 23 kinds)."""
    compiled = regex.compile(PATTERNS[pattern_name])
    differences = []
    for k in (1, 2, 3, 4):
        for chars in itertools.product(REPRESENTATIVES, repeat=k):
            text = "".join(chars)
            if native_split(text, pattern_name) != compiled.findall(text):
                differences.append(text)
    assert not differences, f"{len(differences)} strings split differently, e.g. {differences[:5]!r}"


LONG_RUNS = {
    "letters": "a" * 300_000, "astral letters": "\U00020000" * 70_000, "spaces": " " * 100_000,
    "spaces, letter": " " * 100_000 + "a", "spaces, digit": " " * 100_000 + "1",
    "spaces, punctuation": " " * 100_000 + "!", "ideographic spaces, letter": "\u3000" * 100_000 + "x",
    "digits": "7" * 100_001, "Arabic-Indic digits": "\u0663" * 100_000,
    "line breaks, spaces, letter": "\r\n" * 50_000 + "   a", "space-newline pairs": " \n" * 50_000 + " x",
    "punctuation, line breaks": "!" * 100_000 + "\n" * 1000 + "x", "apostrophes": "'" * 100_000 + "s",
    "contractions": "'s" * 50_000, "ZWJ": "\U0001f468\u200d" * 50_000, "marks": "\u0301" * 100_000 + "a",
    "NUL": "\x00" * 100_000 + "a\x00b", "NEL": "\x85" * 70_000 + "\n" + "\x85" * 10 + "a",
}


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_long_runs_split_and_count_as_regex_does(pattern_name):
    """Runs far longer than the table's first arena (64 KiB) and any fixed buffer, split and counted."""
    compiled = regex.compile(PATTERNS[pattern_name])
    for label, text in LONG_RUNS.items():
        expected = compiled.findall(text)
        assert native_split(text, pattern_name) == expected, label
        counter = NativeCounter(pattern_name)
        counter.scan([text.encode()])
        assert counter.into_dict() == {w.encode(): c for w, c in Counter(expected).items()}, label


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_no_pre_token_spans_two_documents(pattern_name):
    """Each document ends the text for (?!\\S) and for every run: split on their own, never joined."""
    docs = ["a", "b", " ", "x", "'", "s", "12", "34", "!", "\n", "\r", "\n", "  ", "y", "", "\u00e9", "\u0301"]
    counter = NativeCounter(pattern_name)
    counter.scan([d.encode() for d in docs])
    expected = Counter(w.encode() for d in docs for w in regex.findall(PATTERNS[pattern_name], d))
    assert counter.into_dict() == expected
    assert expected[b"'"] == 1 and b"'s" not in expected and expected[b"\r"] == 1  # the hand-worked part


def test_surrogates_are_cleaned_the_same_way_on_both_paths():
    """Lone surrogates become U+FFFD; a high + low pair held as two code points becomes one astral character."""
    docs = ["\ud83d\ude00a", "x\ud800 y", "\udfff", "'\ud83ds", "1\udc00" * 3]
    for name in ("gpt4", "gpt2"):
        table, _, _ = pretok.pretokenize(iter(docs), PATTERNS[name], pretokenizer="native")
        expected, _, _ = pretok.pretokenize(iter(docs), PATTERNS[name], pretokenizer="regex")
        assert table == expected
        assert "\ufffd".encode() in table and any(key.startswith("\U0001f600".encode()) for key in table)


# ---- grammar-based differential fuzz: documents made of tokens at the alternatives' boundaries
_WS = [chr(c) for c in (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                        0x2029, 0x202F, 0x205F, 0x3000)]
GRAMMAR = {
    "contraction": ["'s", "'S", "'\u017f", "'ll", "'lL", "'Ll", "'ve", "'VE", "'vE", "'re", "'rE", "'d", "'D", "'m",
                    "'t", "'T", "'", "''", "'l", "'v", "'r", "'le", "'\u212a", "'\u0130", "'\u00df", "'\ufb06",
                    "\u2019s", "\u02bcs", "\uff07s"],
    "whitespace": _WS + ["\r\n", "\n\r", " \r\n ", " \n", "\t\n", "\r\r\n"],
    "not whitespace": ["\x1c", "\x1d", "\x1e", "\x1f", "\u180e", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
                       "\x00", "\x7f"],
    "letter": ["a", "Z", "\u00e9", "\u017f", "\u01c5", "\u02b0", "\u05d0", "\u0627", "\u0e01", "\u3042", "\u4e00",
               "\uac00", "\u1100", "\u1161", "\u11a8", "\U00020000", "\U0002a700", "\U00030000", "\U0001d400",
               "\u1e9e", "\u0130", "\u0131", "\u212a", "\uff21", "\u00aa"],
    "number": ["0", "9", "\u0660", "\u06f5", "\u0966", "\u0e51", "\uff11", "\U0001d7ce", "\u00b2", "\u00bd",
               "\u2153", "\u2160", "\u216b", "\u3007", "\u2460", "\U00010107", "\U00010140", "\U0001f100",
               "\u0f33", "\u1369"],
    "mark": ["\u0300", "\u0301", "\u0327", "\u064b", "\u0903", "\u093f", "\u20dd", "\u20e3", "\ufe0f", "\ufe0e",
             "\U000e0061", "\U000e0100", "\u0488"],
    "emoji": ["\U0001f642", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f44d\U0001f3fd",
              "\U0001f1eb\U0001f1f7", "\u2764\ufe0f", "1\ufe0f\u20e3", "#\ufe0f\u20e3"],
    "odd": ["\ue000", "\U000f0000", "\U0010fffd", "\u0378", "\ufffe", "\uffff", "\U0001fffe", "\U0010ffff",
            "\ufffd", "\ud800", "\udfff", "\ud83d\ude00"],
    "punctuation": list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "\u2014", "\u00bf", "\u3001", "\u20ac"],
}


def grammar_document(rng):
    out = []
    for _ in range(rng.randint(0, rng.choice([6, 20, 60]))):
        if rng.random() < 0.05:
            token = chr(rng.randrange(0x110000))
        else:
            token = rng.choice(GRAMMAR[rng.choice(list(GRAMMAR))])
        if rng.random() < 0.07:
            token *= rng.randint(2, 30)
        out.append(token)
    return pretok.clean_document("".join(out))


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_grammar_fuzz_splits_and_tables_match_regex(pattern_name):
    """2,000 documents (an offline run compared millions): each split, and the table of each batch of 50."""
    compiled = regex.compile(PATTERNS[pattern_name])
    rng = random.Random(28)
    differences = []
    for _ in range(40):
        docs = [grammar_document(rng) for _ in range(50)]
        expected = Counter()
        for doc in docs:
            split = compiled.findall(doc)
            expected.update(split)
            if native_split(doc, pattern_name) != split:
                differences.append(doc)
        counter = NativeCounter(pattern_name)
        counter.scan([d.encode() for d in docs])
        assert counter.into_dict() == {w.encode(): c for w, c in expected.items()}
    assert not differences, f"{len(differences)} documents split differently, e.g. {differences[:3]!r}"
