"""gptlab.core.files.atomic_output_dir: a folder written whole or not at all, under names nobody can plant."""
import os

import pytest

from gptlab.core.errors import UserError
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
