"""Atomic, non-destructive file writing: write to a temporary name beside the target, then rename."""
import contextlib
import os

from gptlab.errors import UserError


def check_writable(path, overwrite=False):
    """Refuse to replace an existing file unless overwrite is set, and a path whose folder cannot be made (call
    before doing expensive work)."""
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder; give the path of a file to write")
    if os.path.exists(path) and not overwrite:
        raise UserError(f"{path} already exists; pass --overwrite to replace it, or choose another name")
    check_folder_creatable(os.path.dirname(os.path.abspath(path)))


def check_folder_creatable(folder):
    """The folder exists or can be made: no part of the path is a file, and it (or the nearest part that exists)
    is writable. Call before expensive work so a bad output path fails at once."""
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"cannot use folder {folder}: {existing} is a file, not a folder; choose another output path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot write in {existing} (permission denied); choose another output path")


@contextlib.contextmanager
def atomic_write(path, mode="wb", overwrite=False):
    """Yield a file object for `path.tmp.<pid>`; on success rename it to `path`, on any error remove it.

    A reader never sees a half-written file under the final name, and an existing file is only replaced when
    overwrite=True.
    """
    check_writable(path, overwrite)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp_path = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp_path, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp_path)
        raise


def atomic_write_text(path, text, overwrite=False):
    with atomic_write(path, "w", overwrite=overwrite) as f:
        f.write(text)


def check_output_dir(path, overwrite=False):
    """A folder to write: refuse an existing one unless overwrite, a file, or a place it cannot be made (call
    before expensive work)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{path} is a file; give the path of a folder to write")
    if os.path.exists(path) and not overwrite:
        raise UserError(f"{path} already exists; pass --overwrite to replace it, or choose another folder")
    check_folder_creatable(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def atomic_output_dir(path, overwrite=False):
    """Yield an empty folder `path.tmp.<pid>` to fill; on success it becomes `path` (an existing `path` is only
    replaced when overwrite=True), on any error it is removed. A reader never sees a half-written folder."""
    import shutil

    check_output_dir(path, overwrite)
    tmp_path = f"{os.path.abspath(path)}.tmp.{os.getpid()}"
    shutil.rmtree(tmp_path, ignore_errors=True)
    os.makedirs(tmp_path)
    try:
        yield tmp_path
        if os.path.exists(path):  # overwrite: the old folder goes only once the new one is complete
            old_path = f"{os.path.abspath(path)}.old.{os.getpid()}"
            os.replace(path, old_path)
            os.replace(tmp_path, path)
            shutil.rmtree(old_path)
        else:
            os.replace(tmp_path, path)
    except BaseException:
        shutil.rmtree(tmp_path, ignore_errors=True)
        raise
