"""download_hellaswag.py end to end, as a subprocess: checksum, skip-when-present, refusing a tampered file, offline
errors, Ctrl-C. The fetch in process: tests/unit/test_download_hellaswag.py."""
import gzip
import os
import time

import pytest

from conftest import HELLASWAG_VAL, REPO, run_script, unreadable_file
from helpers.hellaswag_file import BUNDLED_GZ, PUBLISHED_BYTES, PUBLISHED_ROWS, PUBLISHED_SHA256, files_in
from helpers.hellaswag_file import tampered  # noqa: F401 (a fixture)
from gptlab.core.errors import UserError
from gptlab.dataset.hellaswag_file import SAMPLE_GZ, fetch_hellaswag, sha256_file

SCRIPT = os.path.join(REPO, "download_hellaswag.py")


def test_local_copy_is_verified_and_written(tmp_path):
    out = tmp_path / "hs" / "hellaswag_val.jsonl"
    proc = run_script([SCRIPT, "--source", HELLASWAG_VAL, "--out", str(out), "--quiet"], check=True)
    assert "wrote" in proc.stdout and "verified" in proc.stdout
    assert sha256_file(out) == PUBLISHED_SHA256
    assert sum(1 for _ in open(out, "rb")) == PUBLISHED_ROWS and os.path.getsize(out) == PUBLISHED_BYTES
    assert files_in(out.parent) == ["hellaswag_val.jsonl"]


def test_skips_when_the_verified_file_is_there(tmp_path):
    out = tmp_path / "hellaswag_val.jsonl"
    run_script([SCRIPT, "--source", BUNDLED_GZ, "--out", str(out), "--quiet"], check=True)
    before = os.stat(out).st_mtime_ns
    time.sleep(0.01)
    # an unreachable source proves the second run reads nothing
    proc = run_script([SCRIPT, "--source", "http://127.0.0.1:9/hellaswag_val.jsonl", "--out", str(out)], check=True)
    assert "nothing to do" in proc.stdout
    assert os.stat(out).st_mtime_ns == before


def test_tampered_file_is_refused_and_nothing_written(tmp_path, tampered):
    out = tmp_path / "hellaswag_val.jsonl"
    proc = run_script([SCRIPT, "--source", str(tampered), "--out", str(out), "--quiet"])
    assert proc.returncode == 2
    assert "sha256" in proc.stderr and "nothing was written" in proc.stderr and "Traceback" not in proc.stderr
    assert files_in(tmp_path) == []
    # gzipped tampered copy: same refusal
    tampered_gz = tmp_path / "t.jsonl.gz"
    tampered_gz.write_bytes(gzip.compress(tampered.read_bytes()))
    with pytest.raises(UserError, match="sha256"):
        fetch_hellaswag(str(tampered_gz), str(out), progress=False)
    assert files_in(tmp_path) == ["t.jsonl.gz"]


def test_missing_source(tmp_path):
    proc = run_script([SCRIPT, "--source", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o.jsonl")])
    assert proc.returncode == 2
    assert "--source" in proc.stderr and "nope.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    assert files_in(tmp_path) == []


def test_unreadable_source(tmp_path):
    locked = unreadable_file(tmp_path / "locked.jsonl")
    proc = run_script([SCRIPT, "--source", str(locked), "--out", str(tmp_path / "o.jsonl")])
    assert proc.returncode == 2 and "not readable" in proc.stderr and str(locked) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and files_in(tmp_path) == ["locked.jsonl"]


def test_offline_url_fails_fast_naming_source(tmp_path):
    started = time.monotonic()
    proc = run_script([SCRIPT, "--source", "http://127.0.0.1:9/hellaswag_val.jsonl", "--out",
                       str(tmp_path / "o.jsonl"), "--timeout", "3"])
    assert proc.returncode == 2
    assert "--source" in proc.stderr and SAMPLE_GZ in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("error:") == 1
    assert time.monotonic() - started < 30
    assert files_in(tmp_path) == []


def test_ctrl_c_mid_download_exits_130_and_writes_nothing(tmp_path):
    """Interrupted while the source is still arriving (a file:// URL to a named pipe fed half a line): status 130,
    one 'interrupted' line, no traceback, and neither the file nor a temporary one is left."""
    from conftest import interrupt_while_reading

    fifo = tmp_path / "slow_source.jsonl"
    out = tmp_path / "out" / "hellaswag_val.jsonl"
    with open(HELLASWAG_VAL, "rb") as f:
        head = f.read(3000)
    code, _, err = interrupt_while_reading([SCRIPT, "--source", fifo.as_uri(), "--out", out], fifo, head)
    assert code == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted" and "Traceback" not in err, err[-2000:]
    assert not out.parent.exists() or files_in(out.parent) == []
