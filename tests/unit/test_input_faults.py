"""Bad input to the readers and the tokenizer loader (issue 24, items 7, 9, 10, 13): bounded memory, one clear error."""
import json
import os
import pickle
import subprocess
import sys

import pytest

from conftest import REPO

from gptlab.core.errors import UserError
from gptlab.text import sources
from gptlab.text.sources import ReadStats, iter_local_documents
from gptlab.tokenizer import pretokenize as pretok
from gptlab.tokenizer.format import PATTERNS, read_tokenizer_file, resolve_pattern, safe_unpickle, save_tokenizer
from gptlab.tokenizer.job import limit_chars

SLOW_PATTERN = r"(\w|\w\w)+$|\s|."  # exponential backtracking on 'aaaa…a!'


# ---------------------------------------------------------------- item 7: endless documents, devices
def test_max_chars_stops_inside_a_document_with_no_separator(tmp_path):
    """A 1 GiB (sparse) .txt of NUL bytes: --samples characters are read, not the whole file."""
    path = tmp_path / "zeros.txt"
    with open(path, "wb") as f:
        f.truncate(2**30)
    stats = ReadStats()
    docs = list(iter_local_documents([str(path)], stats, max_chars=5000))
    assert docs == ["\0" * 5000]
    assert stats.bytes_read <= sources.TXT_CHUNK_BYTES


def test_a_document_with_no_line_break_longer_than_the_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_DOC_BYTES", 1000)
    path = tmp_path / "one_line.txt"
    path.write_text("word " * 2000)
    with pytest.raises(UserError, match="longer than .* no line break"):
        list(sources._read_txt(str(path), ReadStats(), chunk_bytes=100))
    # with line breaks the same text is yielded in pieces cut at them, losing nothing
    path.write_text("word word\n" * 1000)
    pieces = list(sources._read_txt(str(path), ReadStats(), chunk_bytes=100))
    assert "".join(pieces) == "word word\n" * 1000 and max(map(len, pieces)) <= 1000


def test_max_chars_gives_the_text_limit_chars_gave(tmp_path):
    """Exactness: the reader's own cut equals cutting the full stream, at every budget, over several files."""
    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_text("héllo wörld<|endoftext|>日本語 " * 50 + "tail without separator 🙂 " * 40)
    b.write_text("".join(json.dumps({"text": f"doc {i} ünïcode"}) + "\n" for i in range(30)))
    full = list(iter_local_documents([str(a), str(b)]))
    for budget in (1, 7, 100, 523, 2000, 2480, 10**6):
        expected = list(limit_chars(iter(full), budget, []))
        assert list(iter_local_documents([str(a), str(b)], max_chars=budget)) == expected, budget


def test_jsonl_line_longer_than_the_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_DOC_BYTES", 1000)
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"text": "x" * 5000}) + "\n")
    with pytest.raises(UserError, match=r"big.jsonl:1 is longer than"):
        list(iter_local_documents([str(path)]))


def test_a_character_device_is_refused(tmp_path):
    link = tmp_path / "zero.txt"
    os.symlink("/dev/zero", link)
    with pytest.raises(UserError, match="character device"):
        list(iter_local_documents([str(link)], max_chars=10))


# ---------------------------------------------------------------- issue 37 item 8: odd JSON Lines
ODD_LINES = {"deep": '{"text": "x", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}",
             "huge int": '{"text": "x", "id": ' + "7" * 5000 + "}"}


@pytest.mark.parametrize("odd", list(ODD_LINES))
def test_an_odd_jsonl_line_is_one_error_naming_the_file_and_line(tmp_path, odd):
    """100,000 nested arrays (RecursionError) or a 5,000-digit integer (ValueError: Python reads at most 4300
    digits) in a field other than text: a UserError naming file:line, never the exception itself."""
    path = tmp_path / "odd.jsonl"
    path.write_text('{"text": "fine"}\n' + ODD_LINES[odd] + "\n")
    docs = iter_local_documents([str(path)])
    assert next(docs) == "fine"
    with pytest.raises(UserError, match=f"^{path}:2 (nests JSON arrays|holds a JSON value)"):
        next(docs)


# ---------------------------------------------------------------- item 13: parquet column types, surrogates
@pytest.mark.parametrize("values", [[1, 2], [b"ab", b"cd"], [["a"], ["b"]]])
def test_parquet_text_column_that_is_not_strings_is_one_error(tmp_path, values):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": values}), str(path))
    with pytest.raises(UserError, match=r"bad.parquet: column 'text' holds .* values, not strings"):
        list(iter_local_documents([str(path)]))


def test_parquet_dictionary_encoded_strings_are_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "dict.parquet"
    pq.write_table(pa.table({"text": pa.array(["a b", "c"]).dictionary_encode()}), str(path))
    assert list(iter_local_documents([str(path)])) == ["a b", "c"]


def test_jsonl_lone_surrogates_become_replacement_characters(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "ab\\ud800cd"}\n{"text": "fine \\u00e9"}\n')
    stats = ReadStats()
    docs = list(iter_local_documents([str(path)], stats))
    assert docs == ["ab\ufffdcd", "fine é"] and stats.replaced_docs == 1
    for doc in docs:
        doc.encode("utf-8")


# ---------------------------------------------------------------- item 9: a tiny pickle that allocates gigabytes
BOMBS = {
    # bytearray(4 GiB): GLOBAL builtins.bytearray, LONG1 2**32, TUPLE1, REDUCE
    "bytearray_size": b"\x80\x04\x8c\x08builtins\x8c\tbytearray\x93\x8a\x05\x00\x00\x00\x00\x01\x85R.",
    "set_size": b"\x80\x04\x8c\x08builtins\x8c\x03set\x93\x8a\x05\x00\x00\x00\x00\x01\x85R.",
    "ordereddict_size": b"\x80\x04\x8c\x0bcollections\x8c\x0bOrderedDict\x93\x8a\x05\x00\x00\x00\x00\x01\x85R.",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_pickle_that_asks_for_gigabytes_is_refused_in_bounded_memory(tmp_path, name):
    """In a child limited to 1 GiB of address space: refused with a UserError that names the constructor."""
    path = tmp_path / "bomb.pkl"
    path.write_bytes(BOMBS[name])
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from gptlab.core.errors import UserError\n"
            "from gptlab.tokenizer.format import read_tokenizer_file\n"
            f"try:\n    read_tokenizer_file({str(path)!r})\nexcept UserError as err:\n    print('refused:', err)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "refused:" in proc.stdout and "not a safe tokenizer pickle" in proc.stdout, (
        proc.stdout + proc.stderr)


def test_containers_built_from_items_still_load():
    from collections import OrderedDict

    value = {"s": {1, 2}, "f": frozenset({b"x"}), "b": bytearray(b"\x00\xff"), "o": OrderedDict([("b", 1)])}
    for protocol in (3, 4, 5):
        loaded = safe_unpickle(pickle.dumps(value, protocol=protocol))
        assert loaded == value and all(type(loaded[k]) is type(value[k]) for k in value)


def test_a_huge_file_is_refused_unread(tmp_path, monkeypatch):
    from gptlab.tokenizer import format as fmt

    monkeypatch.setattr(fmt, "MAX_TOKENIZER_BYTES", 100)
    path = tmp_path / "big.pkl"
    path.write_bytes(pickle.dumps({"x": "y" * 1000}, protocol=4))
    with pytest.raises(UserError, match="larger than"):
        read_tokenizer_file(str(path))


# ---------------------------------------------------------------- item 10: catastrophic backtracking
def test_a_backtracking_pattern_is_refused_by_the_check():
    with pytest.raises(UserError, match="backtracks catastrophically"):
        resolve_pattern(SLOW_PATTERN)
    for name in PATTERNS:
        assert resolve_pattern(name)[1] == PATTERNS[name]


def test_a_stored_backtracking_pattern_is_refused_at_load(tmp_path):
    path = tmp_path / "slow.pkl"
    save_tokenizer(str(path), pat_str=SLOW_PATTERN, pattern_name="custom", merges=[],
                   mergeable_ranks={bytes([i]): i for i in range(256)}, special_tokens={"<|endoftext|>": 256},
                   metadata={}, script_content="")
    with pytest.raises(UserError, match="backtracks catastrophically"):
        read_tokenizer_file(str(path))


@pytest.mark.parametrize("workers", [1, 2])
def test_pretokenize_times_out_on_a_pattern_the_probe_missed(monkeypatch, workers):
    """The per-document limit behind the static check: a document that takes too long is a UserError
    naming the pattern (in the parent, also from a worker), never a hang."""
    monkeypatch.setattr(pretok, "SPLIT_TIMEOUT_S", 0.2)
    monkeypatch.setattr(pretok, "SPLIT_S_PER_CHAR", 0.0)
    docs = ["fine text"] * 10 + ["a" * 60 + "!"]
    with pytest.raises(UserError, match=r"pattern .* took over .* to split one document"):
        pretok.pretokenize(iter(docs), SLOW_PATTERN, workers=workers, chunk_chars=20)


def test_builtin_patterns_split_without_a_timeout():
    assert pretok.pattern_timeout(PATTERNS["gpt4"]) is None and pretok.pattern_timeout(PATTERNS["gpt2"]) is None
    assert pretok.pattern_timeout(r"\w+|\s+|.") == pretok.SPLIT_TIMEOUT_S
