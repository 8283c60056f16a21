"""Statistics over runs: seed groups (runs differing only by seed), their run-to-run noise, and whether a run's
val bpb / HellaSwag differ significantly from the reference run's."""
import json
import math
import statistics
from dataclasses import dataclass

from gptlab.compare.runs import MISSING

# Two final val bpb values closer than this many seed-to-seed standard deviations are "not distinguishable".
NOISE_SIGMAS = 2.0
# Config keys that differ between repeats of the same experiment (or only describe where/when it ran): ignored
# when forming seed groups.
VOLATILE_CONFIG_KEYS = {"seed", "command", "argv", "cmdline", "start_time", "started_at", "start_time_utc",
                        "timestamp", "date", "run_name", "run_id", "run_dir", "out_dir", "output_dir",
                        "experiments_dir", "experiment_dir", "folder", "hostname", "host", "pid", "master_port",
                        "git_commit", "versions", "cpu_model", "resume", "resumed_from", "resume_step",
                        "tokenizer_path", "preset", "dry_run",  # a preset only names where the values came from
                        "tensorboard", "wandb"}  # where the scalars also go


def seed_group_key(config):
    """Runs with equal keys share every setting except the seed (and timestamps / command line). A key that is
    unset (None, empty) counts as absent, so a run recorded before the trainer wrote that key still matches."""
    if not config:
        return None
    settings = {k: v for k, v in config.items() if k not in VOLATILE_CONFIG_KEYS and v not in (None, [], {}, "")}
    return json.dumps(settings, sort_keys=True, default=str)


@dataclass
class SeedGroup:
    runs: list

    @property
    def finished(self):
        return [r for r in self.runs if r.final and r.val_bpb is not None]

    def stats(self, attr):
        """(mean, std, n) over distinct seeds: a rerun of the same seed reproduces a run rather than sampling the
        noise again, so only the first finished run of each seed counts."""
        by_seed = {}
        for run in self.runs:
            if run.final and getattr(run, attr) is not None:
                by_seed.setdefault(str(run.seed), getattr(run, attr))
        values = list(by_seed.values())
        if len(values) < 2:
            return None
        return statistics.mean(values), statistics.stdev(values), len(values)


def seed_groups(runs):
    """Groups of >= 2 runs that differ only by seed, in the order their first run appears."""
    groups = {}
    for run in runs:
        key = seed_group_key(run.config)
        if key is not None:
            groups.setdefault(key, []).append(run)
    return [SeedGroup(members) for members in groups.values() if len(members) >= 2]


@dataclass
class Noise:
    std: float
    source: str


def bpb_noise(reference, groups):
    """Seed-to-seed std of final val bpb: the reference's own seed group, else pooled over all seed groups."""
    for group in groups:
        if reference in group.runs:
            stats = group.stats("val_bpb")
            if stats:
                return Noise(stats[1], f"std over the {stats[2]} seeds of {reference.model_name}")
    measured = [(g, g.stats("val_bpb")) for g in groups if g.stats("val_bpb")]
    if not measured:
        return None
    if len(measured) == 1:
        group, (_, std, n) = measured[0]
        return Noise(std, f"std over the {n} seeds of {group.runs[0].model_name}, the only seed group")
    variances = [(std ** 2, n) for _, (_, std, n) in measured]
    pooled = math.sqrt(sum(v * (n - 1) for v, n in variances) / sum(n - 1 for _, n in variances))
    return Noise(pooled, f"std pooled over {len(variances)} seed group(s)")


def _unjudged(run, reference, attr):
    """The cell for `attr` when run vs reference needs no significance test (same run, a value missing, the run
    not finished), else None."""
    if run is reference:
        return "reference"
    value, ref_value = getattr(run, attr), getattr(reference, attr)
    if value is None or ref_value is None:
        return MISSING
    if not run.final:
        return f"{value - ref_value:+.4f} (not final)"
    return None


def compare_bpb(run, reference, noise):
    cell = _unjudged(run, reference, "val_bpb")
    if cell is not None:
        return cell
    diff = run.val_bpb - reference.val_bpb
    if noise is None:
        verdict = "lower" if diff < 0 else "higher" if diff > 0 else "equal"
        return f"{diff:+.4f} ({verdict}; noise unknown)"
    if abs(diff) < NOISE_SIGMAS * noise.std:
        return f"{diff:+.4f} not distinguishable"
    return f"{diff:+.4f} {'better' if diff < 0 else 'worse'}"


def compare_hellaswag(run, reference):
    cell = _unjudged(run, reference, "hs_acc_norm")
    if cell is not None:
        return cell
    diff = run.hs_acc_norm - reference.hs_acc_norm
    if run.hs_ci is None or reference.hs_ci is None:
        return f"{diff:+.4f} (no CI)"
    overlap = run.hs_ci[0] <= reference.hs_ci[1] and reference.hs_ci[0] <= run.hs_ci[1]
    if overlap:
        return f"{diff:+.4f} not distinguishable"
    return f"{diff:+.4f} {'better' if diff > 0 else 'worse'}"


def pick_reference(runs, baseline=None):
    """The run everything is compared against: --baseline, else the finished run with the lowest val bpb."""
    if baseline is not None:
        return baseline
    finished = [r for r in runs if r.final and r.val_bpb is not None]
    return min(finished, key=lambda r: r.val_bpb) if finished else None
