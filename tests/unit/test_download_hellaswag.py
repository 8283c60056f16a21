"""gptlab.dataset.hellaswag_file's fetch in process: the published checksum, .gz and file:// sources, refusing a tampered or
truncated file, never destroying one. download_hellaswag.py's command line: tests/e2e/test_download_hellaswag_e2e.py."""
import pathlib

import pytest

from conftest import HELLASWAG_VAL
from helpers.hellaswag_file import BUNDLED_GZ, PUBLISHED_ROWS, PUBLISHED_SHA256, files_in
from helpers.hellaswag_file import tampered  # noqa: F401 (a fixture)
from gptlab.core.errors import UserError
from gptlab.dataset.hellaswag_file import HELLASWAG_ROWS, HELLASWAG_SHA256, fetch_hellaswag, sha256_file


def test_the_checksum_and_row_count_are_the_published_ones():
    assert (HELLASWAG_SHA256, HELLASWAG_ROWS) == (PUBLISHED_SHA256, PUBLISHED_ROWS)


def test_bundled_gz_and_file_url(tmp_path):
    from_gz, from_url = tmp_path / "gz.jsonl", tmp_path / "url.jsonl"
    assert fetch_hellaswag(BUNDLED_GZ, str(from_gz), progress=False) == (str(from_gz), "written", BUNDLED_GZ)
    assert sha256_file(from_gz) == PUBLISHED_SHA256  # the checksum is of the uncompressed bytes
    url = pathlib.Path(HELLASWAG_VAL).resolve().as_uri()  # file://..., through the urllib download path
    assert fetch_hellaswag(url, str(from_url), progress=False) == (str(from_url), "written", url)
    assert sha256_file(from_url) == PUBLISHED_SHA256


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


def test_truncated_gz_is_refused(tmp_path):
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(pathlib.Path(BUNDLED_GZ).read_bytes()[:100_000])
    with pytest.raises(UserError, match="gzip"):
        fetch_hellaswag(str(broken), str(tmp_path / "o.jsonl"), progress=False)
    assert files_in(tmp_path) == ["broken.jsonl.gz"]
