"""Where the repository's own files are: the one module that reaches above the package. The scripts, model.py, the
bundled sample and the judge's prompt set live beside gptlab/, not in it; every module that needs one of them asks
here (a run's own folders, experiments/ and tokenizers/, are relative to where the user runs a script); and the
checkout's git commit, which runs and tokenizers record."""
import os
import subprocess

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_path(*parts):
    """A path inside the repository, from its root."""
    return os.path.join(REPO_ROOT, *parts)


def git_commit(repo_root):
    """HEAD's commit (with '-dirty' when the tree has changes), or None outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        # --no-optional-locks: read only, never refresh the index of the checkout being recorded
        # experiments/ is left out: its reports (LEADERBOARD.md, plots) are regenerated, not code
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)experiments"],
                               cwd=repo_root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) if commit else None
