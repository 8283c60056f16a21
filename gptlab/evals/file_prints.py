"""Evaluation files cannot change under a run: fingerprint them when it starts, check them before each evaluation
(as gptlab.dataset.selection does for shards), so a file replaced, modified or removed mid-run stops the run with one
error instead of scoring other examples under the same label.

    prints = FilePrints([hellaswag_path, *suite_files])   # at start; files missing then are left out
    prints.check(path)                                    # before an evaluation reads path: a UserError if changed
"""
import os

from gptlab.core.errors import UserError
from gptlab.dataset.hellaswag_file import sha256_file as file_sha256


class FilePrints:
    """Each existing file's real path (symlinks resolved), size and sha256 when the run started."""

    def __init__(self, paths):
        self.prints = {}
        for path in paths:
            if path is not None and os.path.isfile(path) and path not in self.prints:
                real = os.path.realpath(path)
                self.prints[path] = (real, os.path.getsize(real), file_sha256(real))

    def __contains__(self, path):
        return path in self.prints

    def check(self, path):
        """Refuse `path` unless it is the file it was at start (a path never fingerprinted passes)."""
        if path not in self.prints:
            return
        real, size, sha256 = self.prints[path]
        try:
            now_size = os.path.getsize(real)
            now = file_sha256(real) if now_size == size else None
        except FileNotFoundError:
            now_size = now = None
        except OSError as err:
            raise UserError(f"cannot read evaluation file {path} ({err.strerror or err}); check the disk") from None
        if os.path.realpath(path) != real:
            what = f"it now leads to {os.path.realpath(path)}, {real} at start"
        elif now_size is None:
            what = "it is gone"
        elif now_size != size:
            what = f"{now_size} bytes, {size} at start"
        elif now != sha256:
            what = f"sha256 {now[:16]}..., {sha256[:16]}... at start"
        else:
            return
        raise UserError(f"evaluation file {path} changed since the run started ({what}); an evaluation file must "
                        "not be replaced or modified while a run uses it (its scores would mix two files under one "
                        "label): put the original back and --resume the run from its last checkpoint, or start it "
                        "again")
