"""compare_tokenizers.py's report on hostile input (audit): a merge list that disagrees with the ranks, validation
shards it cannot decode (ids beyond the vocabulary, no <|endoftext|>, empty, another tokenizer's manifest), a file
named twice, two tokenizers with one file name; and bytes per token of non-ASCII text worked out by hand."""
import json
import os
import pickle

import pytest

from gptlab.compare import tokenizers as tr
from gptlab.core.errors import UserError
from gptlab.dataset import shards
from helpers.report_tokenizers import MERGES_A, MERGES_B, hand_tokenizer
from helpers.report_tokenizers import hand  # noqa: F401 (a fixture)


def rewrite(path, **changes):
    with open(path, "rb") as f:
        data = pickle.load(f)
    data.update(changes)
    with open(path, "wb") as f:
        pickle.dump(data, f)
    return str(path)


def test_non_ascii_text_bytes_per_token_by_hand(tmp_path):
    a = hand_tokenizer(tmp_path / "a.pkl", MERGES_A)
    text = tmp_path / "fr.jsonl"  # two documents; é is 2 UTF-8 bytes, no merge touches it
    text.write_text(json.dumps({"text": "éé ab"}) + "\n" + json.dumps({"text": "€"}) + "\n")
    (result,) = tr.tokenizer_report([a], [str(text)], progress=False).results
    # "éé" (4 bytes, 4 byte tokens) + " " + "ab" = 6 tokens, 7 bytes; "€" = 3 byte tokens, 3 bytes
    assert (result.domains["fr"].bytes, result.domains["fr"].tokens, result.domains["fr"].documents) == (10, 9, 2)
    assert result.used_ids == 7  # c3 a9 ' ' ab e2 82 ac


@pytest.mark.parametrize("merges", [[[97, 98], [999, 5], [101, 102], [256, 256]],  # an id no token has yet
                                    [[97, 98], [99, 100]],  # shorter than the ranks
                                    [[99, 100], [97, 98], [101, 102], [257, 257]]])  # another order than the ranks
def test_a_merge_list_that_disagrees_with_the_ranks_is_one_error(tmp_path, merges):
    path = rewrite(hand_tokenizer(tmp_path / "a.pkl", MERGES_A), merges=merges)
    with pytest.raises(UserError, match="is damaged: its merge list does not match its mergeable_ranks"):
        tr.load_report_tokenizer(path)


def shard_folder(tmp_path, name, tokens):
    folder = tmp_path / "data" / f"local_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    shards.write_shard(str(folder / "val_000000.bin"), tokens)
    return folder


def test_validation_shards_the_report_cannot_decode_are_one_error(tmp_path):
    data_dir = str(tmp_path / "data")
    a = hand_tokenizer(tmp_path / "a.pkl", MERGES_A)  # ids 0..259, <|endoftext|> 260
    shard_folder(tmp_path, "a", [260, 97, 5000])
    with pytest.raises(UserError, match="holds token id 5000 but the tokenizer has only 261 ids"):
        tr.tokenizer_report([a], data_dir=data_dir, progress=False)
    shard_folder(tmp_path, "b", [])
    b = hand_tokenizer(tmp_path / "b.pkl", MERGES_B)
    with pytest.raises(UserError, match=r"local_b/val_\*\.bin holds no documents"):
        tr.tokenizer_report([b], data_dir=data_dir, progress=False)
    shard_folder(tmp_path, "c", [97, 98])
    c = rewrite(hand_tokenizer(tmp_path / "c.pkl", MERGES_A), special_tokens={})
    with pytest.raises(UserError, match="has no <|endoftext|> token"):
        tr.tokenizer_report([c], data_dir=data_dir, progress=False)


def test_validation_shards_of_another_tokenizer_with_the_same_name_are_refused(tmp_path):
    """x/tok.pkl wrote data/local_tok/ (its manifest says so); y/tok.pkl, another tokenizer of the same name and
    size, must not be measured on it (its ids decode to other text)."""
    from gptlab.tokenizer.format import ranks_sha256, read_tokenizer_file

    x = hand_tokenizer(tmp_path / "x.pkl", MERGES_A)
    os.makedirs(tmp_path / "y")
    y = hand_tokenizer(tmp_path / "y" / "x.pkl", MERGES_B)
    folder = shard_folder(tmp_path, "x", [260, 259, 32, 257])  # "abab cd" in x's ids
    shards.write_manifest(str(folder), {
        "format": shards.MANIFEST_FORMAT, "format_version": 1, "dataset": "hand", "source": {"kind": "local"},
        "seed": 0, "shuffle_buffer": 0, "shard_version": 1, "dtype": "uint16", "shard_size": None, "val_tokens": 4,
        "rank": 0, "world_size": 1, "complete": True,
        "tokenizer": {"name": "x", "n_vocab": 261, "eot_id": 260,
                      "ranks_sha256": ranks_sha256(read_tokenizer_file(x)["mergeable_ranks"])},
        "shards": [{"name": "val_000000.bin", "split": "val", "tokens": 4, "bytes": 0}]})
    (ok,) = tr.tokenizer_report([x], data_dir=str(tmp_path / "data"), progress=False).results
    assert (ok.domains["validation"].bytes, ok.domains["validation"].tokens) == (7, 3)
    with pytest.raises(UserError, match="were made with tokenizer 'x'"):
        tr.tokenizer_report([y], data_dir=str(tmp_path / "data"), progress=False)


def test_a_file_named_twice_is_one_error_and_same_names_are_told_apart(hand, tmp_path):
    a, b, web, code = hand
    with pytest.raises(UserError, match="is named twice"):
        tr.tokenizer_report([a], [web, code, os.path.join(os.path.dirname(web), ".", "web.txt")], progress=False)
    with pytest.raises(UserError, match="is named twice"):
        tr.tokenizer_report([a, b, a], [web], progress=False)
    os.makedirs(tmp_path / "x")
    os.makedirs(tmp_path / "y")
    x = hand_tokenizer(tmp_path / "x" / "tok.pkl", MERGES_A)
    y = hand_tokenizer(tmp_path / "y" / "tok.pkl", MERGES_B)
    text = tr.render_report(tr.tokenizer_report([x, y], [web], progress=False))
    rows = [line.split("  ")[0] for line in text.splitlines()[2:4]]
    assert rows == [f"tok ({x})", f"tok ({y})"], text
    assert f"tok ({x}) vs tok ({y}): identical first 2 merges; first 4: 50.0%" in text


def test_a_tokenizer_without_merges_shows_no_empty_share_list(hand, tmp_path):
    a, _, web, _ = hand
    bytes_only = hand_tokenizer(tmp_path / "bytes.pkl", [])
    text = tr.render_report(tr.tokenizer_report([bytes_only, a], [web], progress=False))
    assert "  bytes vs hand_a: identical first 0 merges\n" in text
