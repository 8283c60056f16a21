"""The runs a paper is made from: loaded, grouped and compared by gptlab.compare (the leaderboard's seed groups,
baseline, Welch / measured-noise tests with Holm's correction, runs needed), plus the judged win rates that
judge.py saved in their folders. Nothing here computes a statistic of its own."""
import os
from dataclasses import dataclass, field

from gptlab.compare import judged
from gptlab.compare.runs import BadRunFolder, load_run, resolve_run, resolve_runs
from gptlab.compare.stats import SIGNIFICANCE_LEVEL, group_of, runs_needed
from gptlab.compare.tables import BPB_STEP, Leaderboard, build_leaderboard, summary_rows
from gptlab.core.errors import UserError
from gptlab.train.records import EXPERIMENTS_DIR


@dataclass
class Study:
    runs: list
    board: Leaderboard
    settings: list  # gptlab.compare.tables.SettingSummary, the baseline's first; .runs: the runs it counts
    judgings: list = field(default_factory=list)
    detect_bpb: float = BPB_STEP

    @property
    def noise_std(self):
        return self.board.noise.std if self.board.noise is not None else None

    def runs_needed(self, setting):
        """Runs per side to tell this setting's val bpb difference from the baseline's at p < 0.01 with 80% power,
        given the measured noise (gptlab.compare.stats.runs_needed); None where no difference or no noise."""
        if setting.diff is None or not setting.diff or self.noise_std is None:
            return None
        return runs_needed(abs(setting.diff), self.noise_std)

    def judging_against_baseline(self, setting):
        """The judgings of a run of `setting` against a run of the baseline setting (their summary dicts)."""
        if not self.settings:
            return []
        baseline_names = {r.name for r in self.settings[0].runs}
        names = {r.name for r in setting.runs}
        return [j for j in self.judgings if j.run.name in names and j.baseline_name in baseline_names]


def _pick_baseline(spec, runs, experiments_dir):
    """--baseline: a model name of the selected runs (its seed group), else a run folder (joins the runs)."""
    named = [r for r in runs if r.model_name == spec]
    if named:
        return min(named, key=lambda r: (r.started or "", r.name)), runs
    path = os.path.realpath(resolve_run(spec, experiments_dir))
    for run in runs:
        if os.path.realpath(run.path) == path:
            return run, runs
    try:
        run = load_run(path)
    except BadRunFolder as err:
        raise UserError(f"--baseline {spec}: cannot compare against it: {err}") from None
    return run, runs + [run]


def find_judgings(run):
    """judge.py's summaries in the run's judge/ folder (a damaged one is named, not guessed at)."""
    found, damaged = judged.find_judgings(run, run.path)
    for path, why in damaged:
        raise UserError(f"{path} {why}; judge again (python judge.py ... --overwrite) or move the folder away")
    return found


def load_study(specs, baseline=None, experiments_dir=EXPERIMENTS_DIR, alpha=SIGNIFICANCE_LEVEL,
               detect_bpb=BPB_STEP):
    """The named runs (paths, names in experiments_dir, globs) compared as the leaderboard compares them, the noise
    from these runs only (a paper's figures come from the runs it names)."""
    paths = resolve_runs(specs, experiments_dir)  # a glob matching nothing, a folder that is no run: one error
    runs = [load_run(p) for p in paths]  # a damaged run folder (BadRunFolder) is an error, never left out quietly
    baseline_run = None
    if baseline:
        baseline_run, runs = _pick_baseline(baseline, runs, experiments_dir)
    board = build_leaderboard(runs, baseline=baseline_run, alpha=alpha, detect_bpb=detect_bpb)
    if board.reference is None:
        raise UserError("none of the runs has finished with a val bpb (results.json), so there is nothing to "
                        "report; name finished runs")
    settings = summary_rows(board)
    judgings = [j for run in board.runs for j in find_judgings(run)]
    return Study(board.runs, board, settings, judgings, detect_bpb)


def setting_of(study, run):
    """The SettingSummary whose runs hold `run` (None for a run not counted, e.g. unfinished)."""
    return next((s for s in study.settings if any(r is run for r in s.runs)), None)


def group_runs(study, setting):
    """Every run of the setting's seed group (counted or not)."""
    group = group_of(setting.runs[0], study.board.groups)
    return group.runs if group else list(setting.runs)
