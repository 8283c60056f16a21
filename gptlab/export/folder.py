"""The output folder of an export, checked before anything is loaded (no torch here: export_hf.py answers a bad
OUT_DIR at once)."""
import os

from gptlab.core.errors import UserError
from gptlab.core.files import check_output_dir


def check_export_dir(out_dir, overwrite=False):
    """OUT_DIR can be written: a new path, or (with overwrite) a folder. A symbolic link is refused whatever it
    points at: replacing it would either replace the link (and leave the folder it named) or follow it out of the
    place named, and the atomic swap cannot rename over it."""
    if os.path.islink(out_dir):
        raise UserError(f"{out_dir} is a symbolic link (to {os.readlink(out_dir)}); give the folder itself, or a "
                        "new path")
    check_output_dir(out_dir, overwrite)
