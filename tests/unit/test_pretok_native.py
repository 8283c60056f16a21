"""The native pre-tokenizer (gptlab/tokenizer/pretok_scan.c) against `regex.findall`, the reference: split lists
compared exactly on random text from every Unicode category and on real data, tables and merges compared with the
regex path, and the choice between the two.

GPTLAB_PRETOK_SOAK=N multiplies the random strings (a longer soak than the unit run's few seconds)."""
import json
import os
import random
import unicodedata

import pytest
import regex

from conftest import FINEWEB_150, HELLASWAG_VAL, REPO, TINY_SHAKESPEARE

from gptlab.core.errors import UserError
from gptlab.tokenizer import native
from gptlab.tokenizer import pretokenize as pretok
from gptlab.tokenizer.format import PATTERNS
from gptlab.tokenizer.native import native_split, train_merges_native

SOAK = int(os.environ.get("GPTLAB_PRETOK_SOAK", "1"))

# White_Space in Unicode's PropList.txt (unchanged since Unicode 6.3): what regex's \s matches
WHITE_SPACE = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
               0x202F, 0x205F, 0x3000}
# space-like characters that are not White_Space (str.isspace() takes U+001C..U+001F)
NOT_WHITE_SPACE = [0x1C, 0x1D, 0x1E, 0x1F, 0x180E, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF]
APOSTROPHES = ["'", "\u2019", "\u02bc", "\uff07"]  # only U+0027 starts a contraction
# what (?i:s), (?i:k) ... can match: long s, Kelvin sign, sharp s and its capital, ligatures, dotted/dotless i
CASE_TRAPS = "sSdDmMtTlLvVeErR\u017f\u212a\u00df\u1e9e\ufb05\ufb06\u0130\u0131\u01c4\u01c5\u01c6\u1efa\u1efb"
DIGITS = "0123456789\u0660\u0669\u06f0\u06f9\u0966\u096f\u09e6\u0e50\u0e59\uff10\uff19\U0001d7ce\u00b2\u00b9" \
         "\u00bd\u2153\u2160\u216b\u3007\u2460\u2469\U00010107"
MARKS = "\u0300\u0301\u0308\u0327\u064b\u0903\u093f\u20dd\u20e3\ufe0f\ufe0e\u200d\U000e0061"
EMOJI = ["\U0001f642", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466", "\U0001f44d\U0001f3fd",
         "\U0001f1eb\U0001f1f7", "\u2764\ufe0f", "1\ufe0f\u20e3", "\U0001f3f4\U000e0067\U000e0062\U000e0065"
         "\U000e006e\U000e0067\U000e007f", "\U0001f9d1\u200d\U0001f4bb"]
PIECES = ["'s", "'S", "'\u017fx", "'ll", "'LL", "'lL", "'ve", "'VE", "'re", "'Re", "'d", "'D", "'m", "'t", "'T",
          "\u2019s", "\u2019ll", "'", "''", "' s", "'\u212a", "don't", "WE'LL", " ", "  ", "\t", "\n", "\r\n",
          "\r", " \n", "\n\n", " \r\n ", "\u3000", "\u00a0", "\u2028", "\x0b\x0c", "\x85", "abc", "Über",
          "日本語", "한국어", "العربية", "עברית", "ไทย", "हिन्दी", "é", "e\u0301", "ǅ", " 123", "12345", "1,234.5",
          "٣٤٥", "１２３", "...", " !!", "?!\n", "(", "\"quoted\"", "#", "\U0001d400\U0001d401", "\ud800",
          "\udfff", "x\ud83d", "\ufffd", "\x00", "\x7f"]
# letters and digits regex knows and Python 3.11's unicodedata (Unicode 14.0) calls unassigned (later additions)
NEWER_LETTERS = "\U0001e030\u1c89\U00010d4a\U00016ea0\U00010ec2\U0001ccf0"


def _by_category():
    cats = {}
    for cp in range(0x110000):
        cats.setdefault(unicodedata.category(chr(cp)), []).append(chr(cp))
    return cats


BY_CATEGORY = _by_category()
CATEGORY_POOLS = [BY_CATEGORY[c] for c in sorted(BY_CATEGORY)]
SPECIAL_CHARS = ([chr(c) for c in sorted(WHITE_SPACE)] + [chr(c) for c in NOT_WHITE_SPACE] + APOSTROPHES
                 + list(CASE_TRAPS) + list(DIGITS) + list(MARKS) + list(NEWER_LETTERS) + list("\r\n!.,-_(){}<>\"#"))


def random_text(rng):
    """A short string mixing characters of every category, whitespace kinds, apostrophes, case-fold traps,
    digits of many scripts, marks, emoji sequences and lone surrogates."""
    out = []
    for _ in range(rng.randint(0, 24)):
        r = rng.random()
        if r < 0.3:
            out.append(rng.choice(SPECIAL_CHARS))
        elif r < 0.55:
            out.append(rng.choice(PIECES))
        elif r < 0.8:
            out.append(rng.choice(rng.choice(CATEGORY_POOLS)))
        elif r < 0.85:
            out.append(rng.choice(EMOJI))
        elif r < 0.9:
            out.append(chr(rng.randrange(0x110000)))
        else:
            out.append(rng.choice(SPECIAL_CHARS) * rng.randint(2, 6))
    return "".join(out)


def unicode_heavy_documents(seed=0, n_docs=200):
    """Text in many scripts: words of letters from every letter category, digit runs of every Nd script, emoji
    ZWJ sequences, combining marks, CJK, fullwidth forms, mixed whitespace and punctuation."""
    rng = random.Random(seed)
    letters = [BY_CATEGORY[c] for c in ("Lu", "Ll", "Lt", "Lm", "Lo")]
    scripts = ["日本語のテキスト", "中文文本", "한국어", "Ελληνικά", "Кириллица", "العربية", "עברית", "ไทย", "हिन्दी",
               "ＦＵＬＬＷＩＤＴＨ", "Ｈｅｌｌｏ"]
    docs = []
    for _ in range(n_docs):
        words = []
        for _ in range(rng.randint(20, 120)):
            r = rng.random()
            if r < 0.35:
                words.append(rng.choice(scripts))
            elif r < 0.55:
                pool = rng.choice(letters)
                words.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
            elif r < 0.65:
                zero = ord(rng.choice(BY_CATEGORY["Nd"])) & ~0xF  # most Nd scripts start at ...0
                words.append("".join(chr(zero + rng.randrange(10)) for _ in range(rng.randint(1, 7))))
            elif r < 0.75:
                words.append(rng.choice(EMOJI) * rng.randint(1, 3))
            elif r < 0.85:
                words.append("a" + rng.choice(MARKS) + rng.choice(MARKS))
            else:
                words.append(rng.choice(PIECES))
            words.append(rng.choice([" ", " ", " ", "\n", "\u3000", ", ", "\r\n", "  ", "\t"]))
        docs.append("".join(words))
    return docs


def real_documents():
    with open(FINEWEB_150, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    with open(TINY_SHAKESPEARE, encoding="utf-8") as f:
        docs.append(f.read())
    with open(HELLASWAG_VAL, encoding="utf-8") as f:
        docs.append(f.read(2_000_000))  # the raw JSON lines: quotes, escapes, brackets
    return docs


def test_the_native_pretokenizer_builds():
    assert native.scanner_available(), (
        f"the native pre-tokenizer (gptlab/tokenizer/pretok_scan.c, the default splitter) could not be built: "
        f"{native.scanner_unavailable_reason()}. Install a C compiler (apt-get install gcc) so that its tests run")


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_scanner_splits_random_text_as_regex_does(pattern_name):
    compiled = regex.compile(PATTERNS[pattern_name])
    rng = random.Random(1234 + len(pattern_name))
    differences = []
    for _ in range(100_000 * SOAK):
        text = pretok.clean_document(random_text(rng))
        expected = compiled.findall(text)
        if native_split(text, pattern_name) != expected:
            differences.append(text)
    assert not differences, f"{len(differences)} strings split differently, e.g. {differences[:3]!r}"


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_scanner_splits_real_and_unicode_heavy_text_as_regex_does(pattern_name):
    compiled = regex.compile(PATTERNS[pattern_name])
    for doc in real_documents() + unicode_heavy_documents():
        doc = pretok.clean_document(doc)
        assert native_split(doc, pattern_name) == compiled.findall(doc), doc[:200]


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_every_character_alone_and_in_context_splits_as_regex_does(pattern_name):
    """Each code point (surrogates excepted) after an apostrophe, a space and a letter, and before a letter, a
    digit, a space and a newline: every class boundary of the table, in every alternative of the pattern."""
    compiled = regex.compile(PATTERNS[pattern_name])
    chars = [chr(cp) for cp in range(0, 0x110000, 1 if SOAK > 1 else 7) if not 0xD800 <= cp < 0xE000]
    for c in chars + SPECIAL_CHARS:
        cp = ord(c)
        text = f"'{c} {c}a{c}'{c}{c}x{c}1{c} \n{c}"
        assert native_split(text, pattern_name) == compiled.findall(text), hex(cp)


def test_character_classes_agree_with_the_unicode_standard():
    """The generated classes against an independent source: unicodedata's general categories where it knows the
    character (it may be older than regex's tables), and White_Space from Unicode's PropList."""
    from gptlab.tokenizer.unicode_classes import L_BIT, N_BIT, W_BIT, class_bytes

    classes, folds = class_bytes()
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cn":
            continue
        assert bool(classes[cp] & L_BIT) == cat.startswith("L"), hex(cp)
        assert bool(classes[cp] & N_BIT) == cat.startswith("N"), hex(cp)
        assert bool(classes[cp] & W_BIT) == (cp in WHITE_SPACE), hex(cp)
    assert {chr(cp) for cp in folds} == set("sSdDmMtTlLvVeErR\u017f")


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_native_table_equals_regex_table(pattern_name, workers):
    docs = real_documents()[:40] + unicode_heavy_documents(n_docs=40) + ["a\ud800b 's", "", "\udfff", " "]
    table, chars, n_docs = pretok.pretokenize(iter(docs), PATTERNS[pattern_name], workers=workers,
                                              chunk_chars=20_000, pretokenizer="native")
    expected, chars2, n_docs2 = pretok.pretokenize(iter(docs), PATTERNS[pattern_name], pretokenizer="regex")
    assert table == expected and (chars, n_docs) == (chars2, n_docs2)
    assert "\ufffd".encode() in table  # the lone surrogates, replaced as the regex path does
    assert all(type(count) is int for count in table.values())


@pytest.mark.parametrize("corpus", ["real", "unicode"])
def test_merges_are_identical_with_either_pretokenizer(corpus):
    docs = real_documents() if corpus == "real" else unicode_heavy_documents(seed=7, n_docs=400)
    merges = {}
    for kind in ("native", "regex"):
        table, _, _ = pretok.pretokenize(iter(docs), PATTERNS["gpt4"], pretokenizer=kind)
        merges[kind] = train_merges_native(table, 1500).merges
    assert merges["native"] == merges["regex"]


def test_auto_uses_native_for_builtin_patterns_and_regex_for_custom_ones():
    assert pretok.resolve_pretokenizer(PATTERNS["gpt4"]) == "native"
    assert pretok.resolve_pretokenizer(PATTERNS["gpt2"]) == "native"
    assert pretok.resolve_pretokenizer(PATTERNS["gpt4"], "regex") == "regex"
    assert pretok.resolve_pretokenizer(r"\w+|\s+|.") == "regex"
    with pytest.raises(UserError, match="--pretokenizer native splits only the built-in patterns"):
        pretok.resolve_pretokenizer(r"\w+|\s+|.", "native")


def test_without_the_scanner_auto_falls_back_and_native_is_refused(monkeypatch):
    monkeypatch.setattr(native, "_scan_lib", None)
    monkeypatch.setattr(native, "_scan_error", "no C compiler (cc, gcc or clang) found")
    assert pretok.resolve_pretokenizer(PATTERNS["gpt4"]) == "regex"
    with pytest.raises(UserError, match=r"--pretokenizer native is unavailable \(no C compiler"):
        pretok.resolve_pretokenizer(PATTERNS["gpt4"], "native")
    table, _, _ = pretok.pretokenize(["don't stop"], PATTERNS["gpt4"])
    assert table == {b"don": 1, b"'t": 1, b" stop": 1}



def test_train_tokenizer_hands_the_choice_to_pretokenize(monkeypatch):
    from gptlab.tokenizer import job

    seen = []
    real = job.pretokenize
    monkeypatch.setattr(job, "pretokenize", lambda *a, **kw: seen.append(kw["pretokenizer"]) or real(*a, **kw))
    for choice in ("regex", "auto"):
        trained = job.train_tokenizer(inputs=[FINEWEB_150], samples=20_000, vocabsize=300, workers=1,
                                      pretokenizer=choice, progress=False)
        assert trained.metadata["pretokenizer"] == seen[-1]
    assert seen == ["regex", "native"]


INVALID_UTF8_CHILD = """
import random, sys
from gptlab.tokenizer import native
rng = random.Random(5)
docs = [b"\\xf0", b"a\\xe2", b"'\\xc5", b" \\xf4\\x8f", b"\\xe3\\x81", b"\\xfe\\xbf\\xbf\\xbf "]
docs += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
counter = native.NativeCounter(sys.argv[1])
counter.scan(docs)
table = counter.into_dict()
print(sum(len(key) * count for key, count in table.items()), sum(map(len, docs)), table[b"\\xf0"])
"""


@pytest.mark.parametrize("pattern_name", ["gpt4", "gpt2"])
def test_scan_stays_inside_each_document_even_on_invalid_utf8(pattern_name):
    """The scanner is fed str.encode() output, but bytes cut inside a character or past U+10FFFF must neither make
    it read past a document nor stall it: every byte lands in exactly one pre-token of its own document. (In a
    child process, so that a scanner stuck in a loop fails the test instead of hanging it.)"""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", INVALID_UTF8_CHILD, pattern_name], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr
    covered, total, lone_lead = map(int, proc.stdout.split())
    assert covered == total and lone_lead >= 1


def test_the_wheel_ships_every_c_source():
    """native.py compiles the C files on first use, so an installed gptlab needs them: pyproject.toml's
    package-data must list each one (tests/e2e/test_layout_e2e.py builds the wheel for merge_loop.c)."""
    import glob
    import tomllib

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        shipped = tomllib.load(f)["tool"]["setuptools"]["package-data"]["gptlab.tokenizer"]
    sources = {os.path.basename(p) for p in glob.glob(os.path.join(REPO, "gptlab", "tokenizer", "*.c"))}
    assert sources == {"merge_loop.c", "pretok_scan.c"} and sources <= set(shipped)
