"""gptlab.core.files.read_json_file, the bounded JSON reader of run folders (records.read_run_json) and sweep
records: only a regular file is opened, at most max_bytes are read."""
import json
import os

import pytest

from gptlab.core.files import read_json_file
from gptlab.train import records


def test_a_regular_file_within_the_bound_is_read(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"a": [1, 2]}))
    assert read_json_file(str(path), max_bytes=13) == ({"a": [1, 2]}, None)  # 13 bytes: the bound is inclusive


def test_a_file_over_the_bound_is_refused_by_its_size(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"a": [1, 2]}))  # 13 bytes
    assert read_json_file(str(path), max_bytes=12) == (None, "is too large (13 bytes; at most 12 are read)")


@pytest.mark.parametrize("kind", ["folder", "device", "missing"])
def test_what_is_not_a_regular_file_is_never_opened(tmp_path, kind):
    path = {"folder": str(tmp_path), "device": "/dev/zero", "missing": str(tmp_path / "nope.json")}[kind]
    assert read_json_file(path, max_bytes=1 << 20) == (None, "is not a regular file")


def test_a_run_folder_whose_config_is_a_device_is_noted_not_read(tmp_path):
    os.symlink("/dev/zero", tmp_path / records.CONFIG_FILE)
    notes = []
    assert records.read_run_json(str(tmp_path), records.CONFIG_FILE, notes) is None
    assert notes == ["config.json is not a regular file; ignored it"]
