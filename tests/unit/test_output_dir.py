"""gptlab.core.files.atomic_output_dir: a folder written whole or not at all, under names nobody can plant."""
import os
import stat

import pytest

from gptlab.core.errors import UserError
from gptlab.core import files
from gptlab.core.files import atomic_output_dir


def fill(folder, text):
    with open(os.path.join(folder, "weights.txt"), "w") as f:
        f.write(text)


def test_a_link_planted_at_the_old_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    out = tmp_path / "out"
    os.symlink(victim, f"{out}.tmp.{os.getpid()}")  # the name the pid made predictable
    with atomic_output_dir(str(out)) as tmp:
        assert os.path.realpath(tmp) != os.path.realpath(victim) and os.listdir(tmp) == []
        fill(tmp, "new")
    assert (out / "weights.txt").read_text() == "new"
    assert os.listdir(victim) == ["precious.txt"] and (victim / "precious.txt").read_text() == "keep"


def test_overwrite_replaces_the_folder_and_leaves_no_temporary_or_old_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fill(out, "old")
    with atomic_output_dir(str(out), overwrite=True) as tmp:
        fill(tmp, "new")
    assert (out / "weights.txt").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_failure_leaves_the_old_folder_whole_and_nothing_beside_it(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fill(out, "old")
    with pytest.raises(RuntimeError):
        with atomic_output_dir(str(out), overwrite=True) as tmp:
            fill(tmp, "half")
            raise RuntimeError("disk full")
    assert (out / "weights.txt").read_text() == "old" and sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_symbolic_link_as_the_folder_is_refused_and_its_target_kept(tmp_path, overwrite):
    target = tmp_path / "real"
    target.mkdir()
    fill(target, "mine")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(UserError, match="symbolic link"):
        with atomic_output_dir(str(link), overwrite=overwrite):
            pass
    assert link.is_symlink() and (target / "weights.txt").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_missing_parent_folders_are_made_as_mkdir_p_would(tmp_path):
    """export_hf.py CKPT hf/RUN on a fresh clone: hf/ does not exist yet (it failed with 'No such file or
    directory' before)."""
    out = tmp_path / "hf" / "nested" / "run"
    with atomic_output_dir(str(out)) as tmp:
        fill(tmp, "w")
    assert (out / "weights.txt").read_text() == "w"
    assert sorted(os.listdir(out.parent)) == ["run"]  # no temporary folder left beside it


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failure_after_the_old_folder_is_moved_aside_brings_it_back(tmp_path, monkeypatch, failure):
    """Issue 37, item 10: the new folder cannot take the old one's name (or Ctrl-C comes just then): the old
    folder is back under its name, whole, and no NAME.old.* or NAME.tmp.* folder is left (docs/faults.md)."""
    out = tmp_path / "out"
    out.mkdir()
    fill(out, "old")
    real_replace = os.replace

    def replace(src, dst):
        if ".tmp." in os.path.basename(src):  # the second rename: the new folder into place
            raise failure
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)
    with pytest.raises(type(failure)):
        with atomic_output_dir(str(out), overwrite=True) as tmp:
            fill(tmp, "new")
    assert sorted(os.listdir(tmp_path)) == ["out"] and (out / "weights.txt").read_text() == "old"


def test_overwriting_the_current_folder_is_refused_and_leaves_it_whole(tmp_path, monkeypatch):
    """`export_hf.py CKPT . --overwrite` (issue 37, item 10) left an empty NAME.old.* folder; replacing the folder
    one stands in (or one holding it) would delete it under the user: refused before anything is made."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    fill(out, "old")
    for here, path in ((out, "."), (out / "sub", "..")):
        monkeypatch.chdir(here)
        with pytest.raises(UserError, match=r"is or holds the current folder; --overwrite would delete it"):
            with atomic_output_dir(path, overwrite=True):
                pass
    assert sorted(os.listdir(tmp_path)) == ["out"] and sorted(os.listdir(out)) == ["sub", "weights.txt"]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_the_folder_gets_the_permissions_mkdir_gives(tmp_path, mask):
    """Issue 37, item 10: the folder was mkdtemp's 0700 whatever the umask; it gets what `mkdir` gives."""
    old_mask = os.umask(mask)
    try:
        os.mkdir(tmp_path / "by_mkdir")
        with atomic_output_dir(str(tmp_path / "out")) as tmp:
            fill(tmp, "w")
    finally:
        os.umask(old_mask)
    mode = stat.S_IMODE(os.stat(tmp_path / "out").st_mode)
    assert mode == stat.S_IMODE(os.stat(tmp_path / "by_mkdir").st_mode) == 0o777 & ~mask
