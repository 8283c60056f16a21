"""The package builds: a wheel of gptlab (pip, as a subprocess) holds every package module and merge_loop.c, and
nothing else. The import layout: tests/unit/test_layout.py."""
import os

import pytest

from conftest import REPO
from helpers.package_modules import package_modules


def test_the_package_builds_with_every_module_and_its_c_source(tmp_path):
    """pyproject.toml: a wheel of gptlab holds every package module and merge_loop.c (compiled on first use), and
    neither model.py nor a script (they run from the repository root)."""
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("setuptools")
    import shutil

    src = tmp_path / "src"  # a copy: setuptools builds in the source tree
    shutil.copytree(os.path.join(REPO, "gptlab"), src / "gptlab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(os.path.join(REPO, name), src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path), str(src)], capture_output=True, text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("gptlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {os.path.relpath(path, REPO) for _, path in package_modules()}
    assert modules <= names and "gptlab/tokenizer/merge_loop.c" in names
    assert not {n for n in names if not n.startswith(("gptlab/", "gptlab-"))}
