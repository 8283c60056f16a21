"""The HellaSwag validation file as download_hellaswag.py's tests check it (tests/unit/test_download_hellaswag.py,
tests/e2e/test_download_hellaswag_e2e.py): its published checksum, rows and size, the bundled .gz, a tampered copy (a
fixture), and the files a folder holds."""
import os
import pathlib

import pytest

from conftest import HELLASWAG_VAL, REPO
from gptlab.dataset.hellaswag_file import SAMPLE_GZ

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
