"""judge.py's results in a run folder, as the comparison tools read them: RUN/judge/<baseline>__<judge>/summary.json
(gptlab.judge writes them there, with these names; gptlab.paper and the leaderboard read them)."""
import glob
import os
from dataclasses import dataclass

from gptlab.core.files import read_json_file
from gptlab.train.records import CHECKPOINT_DIR

JUDGE_DIR = "judge"  # in the experiment's run folder
SUMMARY_FILE = "summary.json"
MAX_SUMMARY_BYTES = 1 << 20


@dataclass
class Judging:
    """One judge.py summary.json found in a run folder (run: the experiment's Run, or its folder)."""
    run: object
    path: str
    summary: dict

    @property
    def baseline_name(self):
        """The baseline's run folder name (judge.py records its checkpoint: RUN/checkpoints/step_N.pt)."""
        path = os.path.normpath(str(self.summary.get("baseline") or "?"))
        folder, name = os.path.split(path)
        if name.endswith(".pt") or os.path.basename(folder) == CHECKPOINT_DIR:
            path = os.path.dirname(folder) if os.path.basename(folder) == CHECKPOINT_DIR else folder
        return os.path.basename(path) or "?"

    @property
    def win_rate(self):
        value = self.summary.get("win_rate")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def ci95(self):
        ci = self.summary.get("ci95")
        ok = isinstance(ci, list) and len(ci) == 2 and all(isinstance(v, (int, float)) for v in ci)
        return tuple(float(v) for v in ci) if ok else None


def find_judgings(run, folder):
    """([Judging], [(path, why)] of the summaries that could not be read) in folder/judge/*/summary.json."""
    found, damaged = [], []
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), JUDGE_DIR, "*", SUMMARY_FILE))):
        summary, why = read_json_file(path, MAX_SUMMARY_BYTES)
        if isinstance(summary, dict):
            found.append(Judging(run, path, summary))
        else:
            damaged.append((path, why or "is not a JSON object"))
    return found, damaged


def format_judged(judgings):
    """The leaderboard's cell: each judged win rate with its 95% interval and the baseline it was judged against."""
    cells = []
    for j in judgings:
        if j.win_rate is None:
            cells.append(f"n/a vs {j.baseline_name}")
        else:
            ci = f" [{100 * j.ci95[0]:.1f}, {100 * j.ci95[1]:.1f}]" if j.ci95 else ""
            cells.append(f"{100 * j.win_rate:.1f}%{ci} vs {j.baseline_name}")  # as judge.py prints it
    return "; ".join(cells)
