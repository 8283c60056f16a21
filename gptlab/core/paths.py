"""Where the repository's own files are: the one module that reaches above the package. The scripts, model.py, the
bundled sample and the judge's prompt set live beside gptlab/, not in it; every module that needs one of them asks
here (a run's own folders, experiments/ and tokenizers/, are relative to where the user runs a script)."""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_path(*parts):
    """A path inside the repository, from its root."""
    return os.path.join(REPO_ROOT, *parts)
