"""The trainer never writes a tokenizer its own loader refuses as too large (issue 37, item 9)."""
import os
import pickle

import pytest

from gptlab.core.errors import UserError
from gptlab.tokenizer import format as fmt
from gptlab.tokenizer.format import read_tokenizer_file, save_tokenizer
from gptlab.tokenizer.job import check_settings


def test_a_vocabsize_whose_file_cannot_fit_is_refused_before_training():
    """256 MiB / 17 bytes (the least a merge adds to the file) = 15,790,320 merges: --vocabsize 15,790,576."""
    largest = 256 + (256 * 2**20) // 17
    assert largest == 15_790_576
    check_settings(samples=10**9, vocabsize=largest, workers=1, pattern="gpt2")
    with pytest.raises(UserError, match="--vocabsize 15,790,577 is too large.*the largest --vocabsize is 15,790,576"):
        check_settings(samples=10**9, vocabsize=largest + 1, workers=1, pattern="gpt2")
    with pytest.raises(UserError, match="the largest --vocabsize is 15,790,576"):
        check_settings(samples=10**10, vocabsize=2**31 - 2, workers=1, pattern="gpt2")


def test_seventeen_bytes_a_merge_is_a_lower_bound_of_the_trainers_files():
    """The smallest file a trainer can write for N merges (2-byte tokens, small ids and counts) takes over 17 bytes
    a merge, as pickle itself counts them."""
    n = 3000
    tokens = [bytes([i % 256, i // 256]) for i in range(n)]
    small = {"mergeable_ranks": {t: 1 for t in tokens}, "merges": [[1, 1] for _ in range(n)],
             "metadata": {"merge_counts": [1] * n}}
    empty = {"mergeable_ranks": {}, "merges": [], "metadata": {"merge_counts": []}}
    assert len(pickle.dumps(small, protocol=4)) - len(pickle.dumps(empty, protocol=4)) >= 17 * n


def _save(path, merges):
    ranks = {bytes([i]): i for i in range(256)}
    vocab = list(ranks)
    for k, (a, b) in enumerate(merges):
        vocab.append(vocab[a] + vocab[b])
        ranks[vocab[-1]] = 256 + k
    save_tokenizer(str(path), pat_str=r"\S+|\s+", pattern_name="custom", merges=merges, mergeable_ranks=ranks,
                   special_tokens={"<|endoftext|>": len(ranks)}, metadata={"merge_counts": [2] * len(merges)},
                   script_content="")


def test_a_tokenizer_over_the_loaders_bound_is_not_written(tmp_path, monkeypatch):
    """Long tokens (each merge doubles the last one) make a file over the bound: refused before anything is
    written, naming a vocabsize that fits; one that fits is written and loads."""
    monkeypatch.setattr(fmt, "MAX_TOKENIZER_BYTES", 64 * 2**10)
    doubling = [(97, 97)] + [(256 + k, 256 + k) for k in range(16)]  # tokens of 2, 4, ..., 2**17 bytes
    with pytest.raises(UserError, match=r"would be [\d.]+ MiB, over the 0.0625 MiB that loading .*at most about \d+\)"):
        _save(tmp_path / "big.pkl", doubling)
    assert os.listdir(tmp_path) == []
    _save(tmp_path / "fits.pkl", doubling[:8])
    assert os.path.getsize(tmp_path / "fits.pkl") <= 64 * 2**10
    assert len(read_tokenizer_file(str(tmp_path / "fits.pkl"))["mergeable_ranks"]) == 256 + 8
