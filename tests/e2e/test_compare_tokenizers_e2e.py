"""compare_tokenizers.py end to end, as a subprocess, on tokenizers whose merges are written out by hand; and GPT-2's
released vocabulary: its compression on FineWeb-Edu is the published figure, and a tokenizer our trainer makes with
--pattern gpt2 compresses like GPT-2 at the same vocabulary size. gptlab.compare.tokenizers in process:
tests/unit/test_compare_tokenizers.py."""
import json
import os
import pickle

import pytest

from conftest import FINEWEB_150, SHARED_DATA, run_script
from helpers.report_tokenizers import gpt2, hand  # noqa: F401 (a fixture)
from gptlab.compare import tokenizers as tr
from gptlab.tokenizer.format import EOT


def test_cli_writes_the_png_and_refuses_to_overwrite(hand, tmp_path):
    a, b, web, code = hand
    png = str(tmp_path / "tok.png")
    proc = run_script(["compare_tokenizers.py", a, b, "--text", web, code, "--plot", png])
    assert proc.returncode == 0, proc.stderr
    assert "Merges in common" in proc.stdout and "Encode MB/s" in proc.stdout
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    for args, message in [(["--plot", png], "already exists; pass --overwrite"),
                          (["--plot", str(tmp_path / "x.jpg")], "ending in .png"),
                          (["--text", str(tmp_path / "missing.txt")], "missing.txt"),
                          ([], None)]:
        proc = run_script(["compare_tokenizers.py", a, *args] if message else
                          ["compare_tokenizers.py", str(tmp_path / "nope.pkl")])
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
        assert message is None or message in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------------ GPT-2
@pytest.mark.skipif(not os.path.isdir(SHARED_DATA), reason="needs ../shared/data beside the checkout")
def test_gpt2_compression_and_a_gpt2_pattern_tokenizer_trained_here(gpt2, tmp_path):
    """GPT-2 on the 150 FineWeb-Edu documents: 4.55-4.75 bytes/token, around the published 4.67 (nanochat's
    tok_eval, GPT-2 on a FineWeb-Edu training sample; 4.61-4.66 on its validation samples). Then our trainer with
    --pattern gpt2 on FineWeb-Edu text outside those documents (the 1 MB stream head less them, 589 KB) at vocabulary
    2048: compression within 2% of GPT-2 cut to its first 2048 tokens, and most of its first 100 merges are
    GPT-2's (83% when this test was written)."""
    with open(FINEWEB_150) as f:
        held_out = [json.loads(line)["text"] for line in f]
    with open(os.path.join(SHARED_DATA, "fineweb_edu_stream_head1M.txt")) as f:
        train_text = f.read()
    for doc in held_out:
        train_text = train_text.replace(doc, "")
    (tmp_path / "train.txt").write_text(train_text)
    proc = run_script(["train_tokenizer.py", "--input", str(tmp_path / "train.txt"), "--samples", "2000000",
                       "--vocabsize", "2048", "--pattern", "gpt2", "--name", "ours", "--out", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    with open(gpt2, "rb") as f:
        data = pickle.load(f)
    data["mergeable_ranks"] = {t: r for t, r in data["mergeable_ranks"].items() if r < 2048}
    data["special_tokens"] = {EOT: 2048}
    with open(tmp_path / "gpt2_v2048.pkl", "wb") as f:
        pickle.dump(data, f)
    report = tr.tokenizer_report([gpt2, str(tmp_path / "gpt2_v2048.pkl"), str(tmp_path / "ours_v2048_n2000000.pkl")],
                                 [FINEWEB_150], progress=False)
    full, cut, ours = (r.overall.bytes_per_token for r in report.results)
    assert 4.55 <= full <= 4.75, full
    assert abs(ours / cut - 1) < 0.02, (ours, cut)
    ours_vs_cut = next(o for o in report.overlaps if o.a == "gpt2_v2048" and o.b == "ours_v2048_n2000000")
    assert dict(ours_vs_cut.shares)[100] >= 0.75, ours_vs_cut.shares
