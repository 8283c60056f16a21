"""Plants the tests' faults (tests/helpers/faults.py) in a product subprocess: with this folder on PYTHONPATH,
Python imports this module at start-up (the `site` module's sitecustomize hook), before the script runs. Nothing
happens unless a GPTLAB_FAULT_* variable is set; faults.env(...) sets both."""
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# faults.py by its path, under a name of its own: the product's sys.path gets nothing from tests/helpers
_load("_gptlab_test_faults", os.path.join(os.path.dirname(_HERE), "faults.py")).install_from_environment()

# this module hides any sitecustomize further down sys.path (a Python distribution's own): run that one too
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE])
if _shadowed is not None and _shadowed.origin:
    _load("_shadowed_sitecustomize", _shadowed.origin)
