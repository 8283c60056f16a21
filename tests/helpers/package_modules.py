"""The package's modules, as the layout tests walk them (tests/unit/test_layout.py, tests/e2e/test_layout_e2e.py)."""
import os

from conftest import REPO


def package_modules():
    for dirpath, _, files in os.walk(os.path.join(REPO, "gptlab")):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), REPO)[:-3].replace(os.sep, ".")
                yield rel.removesuffix(".__init__"), os.path.join(dirpath, name)
