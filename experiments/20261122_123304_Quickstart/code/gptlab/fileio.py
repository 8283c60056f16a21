"""Atomic, non-destructive file writing: write to a temporary name beside the target, then rename."""
import contextlib
import os

from gptlab.errors import UserError


def check_writable(path, overwrite=False):
    """Refuse to replace an existing file unless overwrite is set (call before doing expensive work)."""
    if os.path.exists(path) and not overwrite:
        raise UserError(f"{path} already exists; pass --overwrite to replace it, or choose another name")


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
