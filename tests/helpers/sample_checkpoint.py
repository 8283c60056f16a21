"""The checkpoint sample.py's tests read, as a fixture (tests/unit/test_sample.py, tests/e2e/test_sample_e2e.py)."""
import pytest

from conftest import FINEWEB_150


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(checkpoint path, tokenizer path): a random 6-layer model whose final windows are 2 blocks (long) and 1
    block (short), and a tokenizer of 512 merges trained on the bundled documents."""
    from helpers.random_checkpoint import save_random_checkpoint
    from helpers.tiny_data import read_docs, save_tiny_tokenizer

    folder = tmp_path_factory.mktemp("sample")
    tok_path = save_tiny_tokenizer(str(folder / "tok_v768.pkl"), read_docs(FINEWEB_150)[:40], 512)
    ckpt_path = str(folder / "step_000010.pt")
    save_random_checkpoint(ckpt_path, tok_path, window_size=256)
    return ckpt_path, tok_path

