"""download_hellaswag.py: checksum, skip-when-present, refusing a tampered file, .gz sources, offline errors."""
import gzip
import os
import pathlib
import time

import pytest

from conftest import HELLASWAG_VAL, REPO, run_script, unreadable_file
from gptlab.core.errors import UserError
from gptlab.data.hellaswag import HELLASWAG_ROWS, HELLASWAG_SHA256, SAMPLE_GZ, fetch_hellaswag, sha256_file

SCRIPT = os.path.join(REPO, "download_hellaswag.py")
# Published facts about rowanz/hellaswag's data/hellaswag_val.jsonl (../shared/data/SOURCES.md: git blob
# 0f5ee25d..., the id upstream's tree lists), written out here rather than read from the code under test.
PUBLISHED_SHA256 = "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588"
PUBLISHED_ROWS = 10042
PUBLISHED_BYTES = 12246618
BUNDLED_GZ = os.path.join(REPO, SAMPLE_GZ)


def files_in(folder):
    """Every file in the folder (so a leftover temporary file fails the test)."""
    return sorted(p.name for p in pathlib.Path(folder).iterdir())


@pytest.fixture(scope="module")
def tampered(tmp_path_factory):
    """The real file with one character of one ending changed: same size, still valid JSON, wrong checksum."""
    data = pathlib.Path(HELLASWAG_VAL).read_bytes()
    at = data.index(b"is holding a rubik's cube.")
    path = tmp_path_factory.mktemp("tampered") / "hellaswag_val.jsonl"
    path.write_bytes(data[:at] + b"Is" + data[at + 2:])
    return path


def test_local_copy_is_verified_and_written(tmp_path):
    out = tmp_path / "hs" / "hellaswag_val.jsonl"
    proc = run_script([SCRIPT, "--source", HELLASWAG_VAL, "--out", str(out), "--quiet"], check=True)
    assert "wrote" in proc.stdout and "verified" in proc.stdout
    assert sha256_file(out) == PUBLISHED_SHA256
    assert sum(1 for _ in open(out, "rb")) == PUBLISHED_ROWS and os.path.getsize(out) == PUBLISHED_BYTES
    assert files_in(out.parent) == ["hellaswag_val.jsonl"]


def test_the_checksum_and_row_count_are_the_published_ones():
    assert (HELLASWAG_SHA256, HELLASWAG_ROWS) == (PUBLISHED_SHA256, PUBLISHED_ROWS)


def test_skips_when_the_verified_file_is_there(tmp_path):
    out = tmp_path / "hellaswag_val.jsonl"
    run_script([SCRIPT, "--source", BUNDLED_GZ, "--out", str(out), "--quiet"], check=True)
    before = os.stat(out).st_mtime_ns
    time.sleep(0.01)
    # an unreachable source proves the second run reads nothing
    proc = run_script([SCRIPT, "--source", "http://127.0.0.1:9/hellaswag_val.jsonl", "--out", str(out)], check=True)
    assert "nothing to do" in proc.stdout
    assert os.stat(out).st_mtime_ns == before


def test_bundled_gz_and_file_url(tmp_path):
    from_gz, from_url = tmp_path / "gz.jsonl", tmp_path / "url.jsonl"
    assert fetch_hellaswag(BUNDLED_GZ, str(from_gz), progress=False) == (str(from_gz), "written")
    assert sha256_file(from_gz) == PUBLISHED_SHA256  # the checksum is of the uncompressed bytes
    url = pathlib.Path(HELLASWAG_VAL).resolve().as_uri()  # file://..., through the urllib download path
    assert fetch_hellaswag(url, str(from_url), progress=False) == (str(from_url), "written")
    assert sha256_file(from_url) == PUBLISHED_SHA256


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


def test_existing_files_are_never_destroyed(tmp_path, tampered):
    out = tmp_path / "hellaswag_val.jsonl"
    out.write_bytes(b'{"not": "hellaswag"}\n')
    with pytest.raises(UserError, match="--overwrite"):
        fetch_hellaswag(BUNDLED_GZ, str(out), progress=False)
    with pytest.raises(UserError, match="sha256"):  # replacing it with a bad file fails, and keeps it
        fetch_hellaswag(str(tampered), str(out), overwrite=True, progress=False)
    assert out.read_bytes() == b'{"not": "hellaswag"}\n'
    assert fetch_hellaswag(BUNDLED_GZ, str(out), overwrite=True, progress=False)[1] == "written"
    assert sha256_file(out) == PUBLISHED_SHA256
    # a verified file stays, whatever the source
    assert fetch_hellaswag(str(tampered), str(out), overwrite=True, progress=False)[1] == "present"
    assert sha256_file(out) == PUBLISHED_SHA256
    assert files_in(tmp_path) == ["hellaswag_val.jsonl"]


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


def test_truncated_gz_is_refused(tmp_path):
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(pathlib.Path(BUNDLED_GZ).read_bytes()[:100_000])
    with pytest.raises(UserError, match="gzip"):
        fetch_hellaswag(str(broken), str(tmp_path / "o.jsonl"), progress=False)
    assert files_in(tmp_path) == ["broken.jsonl.gz"]


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
