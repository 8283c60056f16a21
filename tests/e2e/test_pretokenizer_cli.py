"""train_tokenizer.py --pretokenizer: the native scanner and regex give byte-identical tokenizers, the choice is
recorded, a custom pattern cannot be forced onto the scanner, and without a C compiler auto falls back to regex."""
from conftest import FINEWEB_150, TINY_SHAKESPEARE, run_script

from gptlab.tokenizer.format import read_tokenizer_file


def train(tmp_path, *extra, env=None, check=True):
    args = ["train_tokenizer.py", "--name", "t", "--vocabsize", "700", "--samples", "300000", "--out",
            str(tmp_path), "--workers", "2", "--input", FINEWEB_150, TINY_SHAKESPEARE, *extra]
    proc = run_script(args, check=check, env_extra=env)
    return proc, tmp_path / "t_v700_n300000.pkl"


def test_native_and_regex_pretokenizers_give_identical_tokenizers(tmp_path):
    results = {}
    for kind in ("native", "regex", "auto"):
        _, path = train(tmp_path / kind, "--pretokenizer", kind)
        results[kind] = read_tokenizer_file(str(path))
    assert results["native"]["metadata"]["pretokenizer"] == "native"
    assert results["regex"]["metadata"]["pretokenizer"] == "regex"
    assert results["auto"]["metadata"]["pretokenizer"] == "native"
    for kind in ("native", "auto"):
        assert results[kind]["merges"] == results["regex"]["merges"]
        assert results[kind]["metadata"]["merge_counts"] == results["regex"]["metadata"]["merge_counts"]


def test_native_with_a_custom_pattern_is_one_error_line(tmp_path):
    proc, path = train(tmp_path, "--pretokenizer", "native", "--pattern", r"\w+|\s+|.", check=False)
    assert proc.returncode != 0 and not path.exists()
    assert proc.stderr.strip().splitlines() == [
        "error: --pretokenizer native splits only the built-in patterns (--pattern gpt4 or gpt2); use "
        "--pretokenizer regex (or auto) for a custom --pattern"]


def test_without_a_compiler_auto_uses_regex_with_a_note(tmp_path):
    env = {"CC": str(tmp_path / "no-such-cc"), "GPTLAB_CACHE": str(tmp_path / "cache")}
    proc, path = train(tmp_path, env=env)
    assert "note: the native pre-tokenizer is unavailable" in proc.stderr
    assert read_tokenizer_file(str(path))["metadata"]["pretokenizer"] == "regex"
    proc, _ = train(tmp_path, "--pretokenizer", "native", "--overwrite", env=env, check=False)
    assert proc.returncode != 0
    assert "error: --pretokenizer native is unavailable" in proc.stderr
