"""The tokenizer file: pickle round trip, tiktoken round trip, the restricted loader and the old gpt-lab format."""
import json
import os
import pickle
import re

import pytest

from conftest import FINEWEB_150

from gptlab.tokenizer.pretokenize import pretokenize
from gptlab.tokenizer.merges import train_merges_python
from gptlab.core.errors import UserError
from gptlab.tokenizer.format import (EOT, PATTERNS, encoding_from_dict, eot_id, load_tokenizer, merges_txt_path,
                              ranks_sha256, read_tokenizer_file, save_tokenizer, tokenizer_filename)

TEXTS = ["aaaa aaa !!!!!!!! \n\n\n\n      x", "héllo wörld 日本語のテキスト 🙂🙂 👨‍👩‍👧‍👦", "don't WE'LL 12345678 3.14",
         "a\r\nb\r\n\r\n\t\t", "literal " + EOT + " in text", "", " ", "\u0301\u0301"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    with open(FINEWEB_150) as f:
        docs = [json.loads(line)["text"] for _, line in zip(range(30), f)]
    table, chars, n_docs = pretokenize(docs + TEXTS, PATTERNS["gpt4"])
    result = train_merges_python(table, 500)
    path = tmp_path_factory.mktemp("tok") / tokenizer_filename("unit", 756, chars)
    save_tokenizer(str(path), pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=result.merges,
                   mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: 756},
                   metadata={"merge_counts": result.counts, "chars_used": chars}, script_content="# src")
    return path, result, docs


def test_pickle_round_trip(trained):
    path, result, _ = trained
    data = read_tokenizer_file(str(path))
    assert data["format"] == "gptlab-tokenizer" and data["vocabsize"] == 756
    assert [tuple(m) for m in data["merges"]] == result.merges
    assert data["mergeable_ranks"] == result.mergeable_ranks
    assert ranks_sha256(data["mergeable_ranks"]) == ranks_sha256(result.mergeable_ranks)
    assert eot_id(data) == 756 and data["metadata"]["merge_counts"] == result.counts
    lines = open(merges_txt_path(str(path))).read().splitlines()
    assert len(lines) == 501 and lines[1].startswith("256\t") and lines[1].endswith(f"\t{result.counts[0]}")


def test_tiktoken_round_trip(trained):
    path, _, docs = trained
    enc = load_tokenizer(str(path))
    assert enc.n_vocab == 757 and enc.eot_token == 756
    for text in TEXTS + docs:
        tokens = enc.encode_ordinary(text)
        assert enc.decode(tokens) == text
    assert enc.encode(EOT, allowed_special="all") == [756]
    assert 756 not in enc.encode_ordinary(EOT)  # literal text, never the special token


def test_tiktoken_applies_the_learned_merges(trained):
    """tiktoken's encoding of a training word equals replaying the merges in order (the trainer's view)."""
    path, result, _ = trained
    enc = load_tokenizer(str(path))
    vocab = [bytes([i]) for i in range(256)]
    for a, b in result.merges:
        vocab.append(vocab[a] + vocab[b])
    for word in [" the", " independence", "aaaa", "!!!!!!!!", " 123"]:
        ids = list(word.encode())
        for k, (a, b) in enumerate(result.merges):
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    out.append(256 + k)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        assert [vocab[t] for t in enc.encode_ordinary(word)] == [vocab[t] for t in ids]


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_loader_refuses_code_and_never_runs_it(tmp_path):
    marker = tmp_path / "pwned"
    evil = _Evil()
    evil.marker = marker
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"pat_str": "x", "mergeable_ranks": {}, "payload": evil}))
    with pytest.raises(UserError, match="not a safe tokenizer pickle.*refusing to load global"):
        load_tokenizer(str(path))
    assert not marker.exists()


def test_loader_refuses_non_tokenizers(tmp_path):
    listed = tmp_path / "list.pkl"
    listed.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(UserError, match="is a pickle but not a tokenizer"):
        load_tokenizer(str(listed))
    garbage = tmp_path / "garbage.pkl"
    garbage.write_bytes(b"this is not a pickle")
    with pytest.raises(UserError, match="is not a tokenizer: not a pickle file at all"):
        load_tokenizer(str(garbage))
    truncated = tmp_path / "truncated.pkl"
    truncated.write_bytes(pickle.dumps({"pat_str": "x", "mergeable_ranks": {b"a": 0}})[:20])
    with pytest.raises(UserError, match="is not a tokenizer pickle"):
        load_tokenizer(str(truncated))
    bad_ranks = tmp_path / "badranks.pkl"
    bad_ranks.write_bytes(pickle.dumps({"pat_str": "x", "mergeable_ranks": {"a": 1}}))
    with pytest.raises(UserError, match="must map bytes to int"):
        load_tokenizer(str(bad_ranks))
    with pytest.raises(UserError, match="not found"):
        load_tokenizer(str(tmp_path / "absent.pkl"))
    with pytest.raises(UserError, match="is a folder, not a tokenizer file; give the path of a .pkl file"):
        load_tokenizer(str(tmp_path))


def test_a_failed_save_leaves_neither_file(tmp_path, monkeypatch, trained):
    """The .merges.txt is written before the pickle is renamed into place: a write that fails on it (a full disk)
    leaves neither a tokenizer without its merges nor a temporary file."""
    import errno

    from gptlab.tokenizer import format as tokenizer

    real_atomic_write = tokenizer.atomic_write

    def failing_for_merges(path, *args, **kwargs):
        if path.endswith(".merges.txt"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_atomic_write(path, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "atomic_write", failing_for_merges)
    _, result, _ = trained
    with pytest.raises(OSError):
        save_tokenizer(str(tmp_path / "t.pkl"), pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=result.merges,
                       mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: 756}, metadata={},
                       script_content="")
    assert os.listdir(tmp_path) == []


def _byte_ranks():
    return {bytes([i]): i for i in range(256)}


@pytest.mark.parametrize("change, message", [
    ({"pat_str": b"\\w+"}, "pat_str is a bytes, not a regex string"),
    ({"pat_str": "(unclosed"}, "is not a valid regex"),
    ({"pat_str": "x*"}, "matches the empty string"),
    ({"pat_str": r"\X+"}, r"tiktoken cannot build an encoder from it \(ValueError"),  # `regex` accepts \X, tiktoken not
    ({"mergeable_ranks": {bytes([i]): i for i in range(1, 256)}}, "lacks 1 of the 256 single bytes"),
    ({"mergeable_ranks": {**_byte_ranks(), b"ab": 7}}, "gives the id 7 to more than one token"),
    ({"mergeable_ranks": {**_byte_ranks(), b"ab": -1}}, "holds the id -1"),
    ({"mergeable_ranks": {**_byte_ranks(), b"ab": 2**40}}, "holds the id 1099511627776"),
    ({"mergeable_ranks": {**_byte_ranks(), b"ab": True}}, "holds the id True"),
    ({"special_tokens": {EOT: 65}}, re.escape(f"special token {EOT} collides")),
    ({"special_tokens": {EOT: "256"}}, "special_tokens must map str to int"),
    ({"special_tokens": {EOT: -3}}, "special_tokens must map str to int"),
    ({"special_tokens": [EOT, 256]}, "special_tokens must map str to int"),
    ({"special_tokens": {EOT: 256, "<|pad|>": 256}}, "collides"),
])
def test_loader_names_a_damaged_file_and_never_crashes(tmp_path, change, message):
    """Every damage tiktoken would choke on (ValueError, a Rust panic, a silent mis-encoding) is one UserError."""
    path = tmp_path / "damaged.pkl"
    path.write_bytes(pickle.dumps({"pat_str": PATTERNS["gpt4"], "mergeable_ranks": _byte_ranks(),
                                   "special_tokens": {EOT: 256}, **change}))
    with pytest.raises(UserError, match=message) as err:
        load_tokenizer(str(path))
    assert str(path) in str(err.value) and "retrain it with train_tokenizer.py" in str(err.value)


def test_loader_accepts_what_it_checks_for(tmp_path):
    """The checks refuse only real damage: bytes-only vocabulary with gaps in the ids, several special tokens."""
    path = tmp_path / "ok.pkl"
    path.write_bytes(pickle.dumps({"pat_str": PATTERNS["gpt2"], "mergeable_ranks": {**_byte_ranks(), b"ab": 300},
                                   "special_tokens": {EOT: 256, "<|pad|>": 301}}))
    enc = load_tokenizer(str(path))
    assert enc.encode_ordinary("ab ab") == [300, 32, 300] and enc.eot_token == 256


def test_encoding_from_dict_turns_a_tiktoken_panic_into_a_user_error():
    """Bypassing the file checks (a dict built in code), tiktoken's Rust panic still becomes a UserError."""
    with pytest.raises(UserError, match=r"t.pkl: tiktoken cannot build an encoder.*PanicException"):
        encoding_from_dict({"pat_str": "\\w+", "mergeable_ranks": {**_byte_ranks(), b"ab": 7}, "special_tokens": {},
                            "path": "t.pkl"})


def test_old_gpt_lab_format_loads(tmp_path, trained):
    path, result, _ = trained
    old = {"pat_str": PATTERNS["gpt4"], "mergeable_ranks": result.mergeable_ranks, "script_content": "# old"}
    old_path = tmp_path / "old.pkl"
    old_path.write_bytes(pickle.dumps(old))
    data = read_tokenizer_file(str(old_path))
    assert eot_id(data) == len(result.mergeable_ranks) == 756
    enc = encoding_from_dict(data)
    assert enc.eot_token == 756 and enc.decode(enc.encode_ordinary(TEXTS[1])) == TEXTS[1]


def test_save_refuses_to_overwrite(trained):
    path, result, _ = trained
    with pytest.raises(UserError, match="already exists"):
        save_tokenizer(str(path), pat_str="x", pattern_name="x", merges=[], mergeable_ranks={}, special_tokens={},
                       metadata={}, script_content="")
    assert read_tokenizer_file(str(path))["vocabsize"] == 756


@pytest.mark.parametrize("protocol", [3, pickle.HIGHEST_PROTOCOL])
def test_loader_accepts_the_four_plain_containers(tmp_path, protocol):
    """set, frozenset, bytearray and OrderedDict are plain values: a tokenizer whose metadata holds them loads (with
    protocol 3 each is pickled as a global, so this reaches the allow-list; newer protocols have opcodes for some)."""
    from collections import OrderedDict

    metadata = {"a_set": {1, 2}, "a_frozenset": frozenset({b"x"}), "a_bytearray": bytearray(b"\x00\xff"),
                "an_ordered_dict": OrderedDict([("b", 1), ("a", 2)])}
    path = tmp_path / "containers.pkl"
    path.write_bytes(pickle.dumps({"pat_str": PATTERNS["gpt2"], "mergeable_ranks": _byte_ranks(),
                                   "special_tokens": {EOT: 256}, "metadata": metadata}, protocol=protocol))
    data = read_tokenizer_file(str(path))
    assert data["metadata"] == metadata
    assert type(data["metadata"]["an_ordered_dict"]) is OrderedDict
    assert type(data["metadata"]["a_bytearray"]) is bytearray
    assert load_tokenizer(str(path)).eot_token == 256
    # one more container, harmless as it is, is not on the list: refused
    from collections import Counter
    path.write_bytes(pickle.dumps({"pat_str": PATTERNS["gpt2"], "mergeable_ranks": _byte_ranks(),
                                   "metadata": Counter("aab")}, protocol=protocol))
    with pytest.raises(UserError, match="refusing to load global collections.Counter"):
        read_tokenizer_file(str(path))


def test_the_trainers_source_is_stored_once_beside_its_tokenizers_and_recorded_by_hash(tmp_path, trained):
    """Two tokenizers trained by the same code: neither pickle holds the code, one file beside them does (named by
    its sha256, computed here with hashlib), and each loads it back as its training script; the pickle records
    the hash and the commit. Without the stored file the script is one line naming both; an older pickle that
    carries its script whole still gives it."""
    import hashlib

    from gptlab.tokenizer.format import open_tokenizer

    _, result, _ = trained
    script = "# ===== train_tokenizer.py =====\n" + "x = 1\n" * 2000
    digest = hashlib.sha256(script.encode()).hexdigest()
    for name in ("a_v756_n1.pkl", "b_v756_n1.pkl"):
        save_tokenizer(str(tmp_path / name), pat_str=PATTERNS["gpt4"], pattern_name="gpt4", merges=result.merges,
                       mergeable_ranks=result.mergeable_ranks, special_tokens={EOT: 756}, metadata={},
                       script_content=script, script_commit="0123abcd")
        raw = (tmp_path / name).read_bytes()
        assert b"x = 1\nx = 1" not in raw and len(raw) < len(script)
        data = read_tokenizer_file(str(tmp_path / name))
        assert (data["script_sha256"], data["script_commit"]) == (digest, "0123abcd")
        assert open_tokenizer(str(tmp_path / name)).train_script == script
    assert os.listdir(tmp_path / ".code") == [f"{digest}.txt"]
    os.remove(tmp_path / ".code" / f"{digest}.txt")
    missing = open_tokenizer(str(tmp_path / "a_v756_n1.pkl")).train_script
    assert missing.startswith("#") and missing.count("\n") == 1 and digest in missing and "0123abcd" in missing
    old = {"pat_str": PATTERNS["gpt4"], "mergeable_ranks": result.mergeable_ranks, "script_content": "# old"}
    (tmp_path / "old.pkl").write_bytes(pickle.dumps(old))
    assert open_tokenizer(str(tmp_path / "old.pkl")).train_script == "# old"
