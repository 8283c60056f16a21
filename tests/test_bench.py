"""The benchmark scripts keep working on CPU (their figures are in the README; timings are not asserted)."""
import json
import os

import pytest

from conftest import SHARED_DATA, run_script


def test_bench_tokenizer_times_several_of_our_engines_on_one_corpus(tmp_path):
    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared (make_corpus.py)")
    proc = run_script(["bench/bench_tokenizer.py", "--mb", "0.3", "--vocab", "400", "--ours", "native:cpu",
                       "python:cpu", "--skip-hf"], check=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ours ")]
    assert [line.split(":")[0] for line in lines] == ["ours native", "ours python"], proc.stdout
    assert proc.stdout.count("(400 tokens + <|endoftext|>") == 2


def test_bench_tokenizer_compares_with_huggingface_tokenizers(tmp_path):
    """The README's headline benchmark: ours and HuggingFace `tokenizers` (a requirement, for this test) on the
    same corpus; the printed ratio is ours / HF wall time."""
    import re

    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared (make_corpus.py)")
    proc = run_script(["bench/bench_tokenizer.py", "--mb", "0.3", "--vocab", "400", "--ours", "native:cpu"],
                      check=True)
    ours = float(re.search(r"^ours native:cpu: +([0-9.]+) s", proc.stdout, re.M).group(1))
    hf = re.search(r"^HF: +([0-9.]+) s  peak RSS +\d+ MiB   \(tokenizers (\S+)\)$", proc.stdout, re.M)
    assert hf, proc.stdout
    import tokenizers
    assert hf.group(2) == tokenizers.__version__
    ratio = float(re.search(r"^ratio ours native:cpu/HF: ([0-9.]+)$", proc.stdout, re.M).group(1))
    hf_s = float(hf.group(1))  # both times are printed to 0.01 s: the ratio lies within what that rounding allows
    assert (ours - 0.005) / (hf_s + 0.005) - 0.005 <= ratio <= (ours + 0.005) / (hf_s - 0.005) + 0.005


def test_make_large_corpus_collects_text_files_once_and_never_overwrites(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "one.py").write_text("def f():\n    return 1\n")
    (src / "a" / "copy.md").write_text("def f():\n    return 1\n")  # same bytes: taken once
    (src / "b.txt").write_text("héllo wörld\n" * 100)
    (src / "bin.txt").write_bytes(b"\xff\xfe not utf-8")  # not UTF-8: skipped
    (src / "image.png").write_bytes(b"\x89PNG")  # not a text extension
    out = tmp_path / "corpus.jsonl"
    proc = run_script(["bench/make_large_corpus.py", "--mb", "1", "--out", str(out), "--roots", str(src)],
                      check=True)
    docs = [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(docs) == sorted(["def f():\n    return 1\n", "héllo wörld\n" * 100])
    assert proc.stdout.startswith("2 files,") and "only" in proc.stderr  # asked for 1 MB, found less
    again = run_script(["bench/make_large_corpus.py", "--mb", "1", "--out", str(out), "--roots", str(src)])
    assert again.returncode != 0 and "exists" in again.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2


def test_bench_shards_runs_ours_against_raw_tiktoken(tmp_path):
    """bench/bench_shards.py end to end with its defaults' path: it builds a 3 MB corpus (its validation shard
    alone takes 1M tokens), trains its tokenizer, times both sides and prints the ratio (timings not asserted)."""
    import re

    if not os.path.isdir(SHARED_DATA):
        pytest.skip("needs ../shared (make_corpus.py)")
    proc = run_script(["bench/bench_shards.py", "--mb", "3", "--vocabsize", "300", "--workers", "1", "--reps", "1",
                       "--workdir", str(tmp_path)], check=True)
    with open(tmp_path / "corpus3.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f if line.strip()]
    mb = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) / 1e6
    assert f"{len(docs)} documents, {mb:.1f} MB; tokenizer {tmp_path / 'benchshards_v300_n1000000.pkl'}" in proc.stdout
    rep = re.search(r"rep 0: raw encode_ordinary_batch ([0-9.]+) MB/s .* download_fineweb ([0-9.]+) MB/s .*"
                    r"ratio ([0-9.]+)", proc.stdout)
    assert rep and float(rep.group(3)) == pytest.approx(float(rep.group(2)) / float(rep.group(1)), rel=0.01)
    assert "ratio download_fineweb / raw tiktoken:" in proc.stdout and "median of 1 pairs" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # its shards are gone
        "benchshards_v300_n1000000.merges.txt", "benchshards_v300_n1000000.pkl", "corpus3.jsonl"]
