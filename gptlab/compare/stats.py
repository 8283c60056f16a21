"""Statistics over runs: seed groups (runs differing only by seed), their run-to-run noise, whether a run's val
bpb / HellaSwag differ significantly from the reference run's (p-values), and how many runs a comparison needs.

The distributions are scipy.stats's: Student's t (Welch's test, p-values), the normal (HellaSwag), the noncentral t
(power, runs needed)."""
import json
import math
import os
import statistics
import warnings
from dataclasses import dataclass

from gptlab.compare.runs import MISSING

# A difference with a two-sided p-value below this is "better" / "worse", else "not distinguishable".
SIGNIFICANCE_LEVEL = 0.05
# "runs needed": the number of runs per side for modded-nanogpt's record standard (p < 0.01) with 80% power
RECORD_P = 0.01
RECORD_POWER = 0.8
# Config keys that differ between repeats of the same experiment (or only describe where/when it ran): ignored
# when forming seed groups.
VOLATILE_CONFIG_KEYS = {"seed", "command", "argv", "cmdline", "start_time", "started_at", "start_time_utc",
                        "timestamp", "date", "run_name", "run_id", "run_dir", "out_dir", "output_dir",
                        "experiments_dir", "experiment_dir", "folder", "hostname", "host", "pid", "master_port",
                        "git_commit", "versions", "cpu_model", "resume", "resumed_from", "resume_step",
                        "tokenizer_path", "preset", "dry_run", "allow_new_data",  # names, switches: not settings
                        "usd_per_gpu_hour", "usd_per_gpu_hour_source",  # the price does not change the experiment
                        "tensorboard", "wandb",  # where the scalars also go
                        "log_every",  # how often the console and log hear of it
                        "trust_model_code",  # permission to run a checkpoint's code, not a setting
                        "save_model", "checkpoint_every",  # keeping weights on disk does not change the figures
                        "shard_params",  # where the training state lives (FSDP2): the same steps, as world sizes are
                        "tp", "pp", "pp_microbatches",  # the parallel layout (--tp, --pp): the same steps too
                        "cpu_threads", "cpu_threads_source", "cpu_cores", "load_avg_start"}  # how fast, not what


# Settings runs recorded only from train_gpt.py's --arch on, at what every earlier run trained (model.py, Muon): at
# that value a key counts as absent, so a default run still joins the seed group of runs recorded before the flag
IMPLIED_BEFORE_RECORDED = {"arch": "modded", "optimizer": "muon"}

# Config keys naming files: compared as paths inside the project the run was started from, so a resumed run (whose
# checkpoint recorded them absolute) and a fresh one (relative) are one setting.
PATH_CONFIG_KEYS = ("train_files", "val_files", "train_shards", "val_shards", "tokenizer", "hellaswag_path",
                    "from_checkpoint")
# Names of the tokenizer: left out when its ranks' hash is recorded (one tokenizer at two paths is one setting).
TOKENIZER_NAME_KEYS = ("tokenizer", "tokenizer_name")


def _project_path(value, root):
    """A recorded path as the same path relative to `root` (the folder the run was started in) when inside it."""
    if not isinstance(value, str) or not value:
        return value
    if root and not os.path.isabs(value):
        value = os.path.join(root, value)
    value = os.path.normpath(value)
    if root and os.path.isabs(value):
        rel = os.path.relpath(value, root)
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return rel.replace(os.sep, "/")
    return value.replace(os.sep, "/")


def run_root(run_path, config):
    """The folder the run was started in: its folder's parent less a relative --experiments_dir, else (an absolute
    one, as a resumed run records) the parent of the experiments folder. None when the run's path is unknown."""
    if not run_path:
        return None
    parent = os.path.dirname(os.path.abspath(os.path.normpath(run_path)))
    exp = config.get("experiments_dir") if isinstance(config, dict) else None
    if isinstance(exp, str) and exp and not os.path.isabs(exp):
        exp = os.path.normpath(exp)
        if exp != os.curdir and (parent == exp or parent.endswith(os.sep + exp)):
            return parent[: len(parent) - len(exp)].rstrip(os.sep) or os.sep
        if exp == os.curdir:
            return parent
    return os.path.dirname(parent)


def seed_group_key(config, research_code=None, root=None):
    """Runs with equal keys share every setting except the seed (and timestamps / command line), and the research
    code (research_code: {file: sha256} of the run's code backup). A key that is unset (None, empty) counts as
    absent, so a run recorded before the trainer wrote that key still matches. Paths are compared relative to
    `root` (run_root), a tokenizer by its ranks' hash when recorded."""
    if not config:
        return None
    settings = {k: v for k, v in config.items() if k not in VOLATILE_CONFIG_KEYS and v not in (None, [], {}, "")
                and IMPLIED_BEFORE_RECORDED.get(k, ()) != v}
    if not settings.get("evals"):  # the --evals suite's settings mean nothing while it is off (older runs lack them)
        for key in [k for k in settings if k.startswith("evals_")]:
            settings.pop(key)
    if settings.get("tokenizer_ranks_sha256"):
        for key in TOKENIZER_NAME_KEYS:
            settings.pop(key, None)
    for key in PATH_CONFIG_KEYS:
        if isinstance(settings.get(key), list):
            settings[key] = [_project_path(v, root) for v in settings[key]]
        elif key in settings:
            settings[key] = _project_path(settings[key], root)
    if research_code:
        settings["research code"] = research_code  # a space: no config key has one
    return json.dumps(settings, sort_keys=True, default=str)


def run_group_key(run):
    """seed_group_key of a loaded run: its config, its code backup's research files, paths from where it ran."""
    config = run.config
    if not config:
        return None
    return seed_group_key(config, getattr(run, "research_code", None), run_root(run.path, config))


def format_p(p):
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}"


# ---------------------------------------------------------------------------------------------- tests
@dataclass
class TTest:
    """A two-sample t-test: a's mean minus b's, its t, degrees of freedom and two-sided p."""
    diff: float
    t: float
    df: float
    p: float
    how: str


def welch_t_test(a, b):
    """Welch's unequal-variance t-test of two samples (each of 2 or more values)."""
    from scipy import stats  # heavy (~0.7 s): only for p-values and power

    diff = statistics.mean(a) - statistics.mean(b)
    if statistics.variance(a) == statistics.variance(b) == 0.0:  # scipy's t would be nan or inf
        return TTest(diff, math.copysign(math.inf, diff) if diff else 0.0, float(len(a) + len(b) - 2),
                     0.0 if diff else 1.0, "Welch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nearly equal values: scipy's precision-loss note
        result = stats.ttest_ind(a, b, equal_var=False)
    return TTest(diff, float(result.statistic), float(result.df), float(result.pvalue), "Welch")


def t_test_with_noise(a, b, noise):
    """Two means of a and b (any sizes, single runs too) when the run-to-run std is known from seed groups:
    t = diff / (std sqrt(1/n_a + 1/n_b)) with the noise estimate's degrees of freedom."""
    from scipy import stats  # heavy (~0.7 s): only for p-values and power

    diff = statistics.mean(a) - statistics.mean(b)
    se = noise.std * math.sqrt(1.0 / len(a) + 1.0 / len(b))
    if se == 0.0:
        return TTest(diff, math.copysign(math.inf, diff) if diff else 0.0, noise.df, 0.0 if diff else 1.0, "noise")
    t = diff / se
    return TTest(diff, t, noise.df, float(2.0 * stats.t.sf(abs(t), noise.df)), "noise")


@dataclass
class ProportionTest:
    diff: float
    z: float
    p: float


def two_proportion_test(k_a, n_a, k_b, n_b):
    """Pooled two-proportion z-test of k_a/n_a against k_b/n_b (the same p as Pearson's chi-square on the 2x2
    table without continuity correction)."""
    from scipy import stats  # heavy (~0.7 s): only for p-values and power

    p_a, p_b = k_a / n_a, k_b / n_b
    pooled = (k_a + k_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_a + 1.0 / n_b))
    if se == 0.0:
        return ProportionTest(p_a - p_b, 0.0, 1.0)
    z = (p_a - p_b) / se
    return ProportionTest(p_a - p_b, z, float(2.0 * stats.norm.sf(abs(z))))


def t_test_power(diff, std, n, alpha=RECORD_P):
    """Power of a two-sided two-sample t-test (n runs per side, equal std) to find a true difference `diff`."""
    from scipy import stats  # heavy (~0.7 s): only for p-values and power

    df = 2 * n - 2
    critical = stats.t.ppf(1.0 - alpha / 2.0, df)
    shift = abs(diff) / (std * math.sqrt(2.0 / n))
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def runs_needed(diff, std, alpha=RECORD_P, power=RECORD_POWER, most=100_000):
    """The fewest runs per side for which a two-sided two-sample t-test at `alpha` finds a true difference `diff`
    with probability `power`, given the run-to-run std; None when more than `most` would be needed."""
    from scipy import stats  # heavy (~0.7 s): only for p-values and power

    if std <= 0.0:
        return 2
    if not (math.isfinite(diff) and math.isfinite(std)) or diff == 0:
        return None  # no difference (or none to compute with) is ever told apart
    try:
        z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))  # a Python float: ** raises, not warns
        guess = 2.0 * (z * std / abs(diff)) ** 2
    except OverflowError:  # a tiny difference against the noise
        return None
    if not guess <= most:
        return None
    n = max(2, math.ceil(guess))  # the normal approximation; the t-test needs a little more
    while n > 2 and t_test_power(diff, std, n - 1, alpha) >= power:
        n -= 1
    while t_test_power(diff, std, n, alpha) < power:
        n += 1
    return n


# ---------------------------------------------------------------------------------------------- seed groups
@dataclass
class SeedGroup:
    runs: list

    @property
    def finished(self):
        return [r for r in self.runs if r.final and r.val_bpb is not None]

    def values(self, attr):
        """One value of `attr` per distinct seed: a rerun of the same seed reproduces a run rather than sampling
        the noise again, so only the first finished run of each seed counts."""
        by_seed = {}
        for run in self.runs:
            if run.final and getattr(run, attr) is not None:
                by_seed.setdefault(str(run.seed), getattr(run, attr))
        return list(by_seed.values())

    def counted_runs(self, attr):
        """The runs values(attr) takes its values from."""
        by_seed = {}
        for run in self.runs:
            if run.final and getattr(run, attr) is not None:
                by_seed.setdefault(str(run.seed), run)
        return list(by_seed.values())

    def stats(self, attr):
        """(mean, std, n) over distinct seeds, or None with fewer than 2."""
        values = self.values(attr)
        if len(values) < 2:
            return None
        return statistics.mean(values), statistics.stdev(values), len(values)


def seed_groups(runs):
    """Groups of >= 2 runs that differ only by seed (the same settings and research code: run_group_key), in the
    order their first run appears."""
    groups = {}
    for run in runs:
        key = run_group_key(run)
        if key is not None:
            groups.setdefault(key, []).append(run)
    return [SeedGroup(members) for members in groups.values() if len(members) >= 2]


def group_of(run, groups):
    return next((g for g in groups if any(r is run for r in g.runs)), None)


@dataclass
class Noise:
    std: float
    source: str
    df: int  # degrees of freedom of the std estimate


def bpb_noise(reference, groups):
    """Seed-to-seed std of final val bpb: the reference's own seed group, else pooled over all seed groups."""
    for group in groups:
        if reference in group.runs:
            stats = group.stats("val_bpb")
            if stats:
                return Noise(stats[1], f"std over the {stats[2]} seeds of {reference.model_name}", stats[2] - 1)
    measured = [(g, g.stats("val_bpb")) for g in groups if g.stats("val_bpb")]
    if not measured:
        return None
    if len(measured) == 1:
        group, (_, std, n) = measured[0]
        return Noise(std, f"std over the {n} seeds of {group.runs[0].model_name}, the only seed group", n - 1)
    variances = [(std ** 2, n) for _, (_, std, n) in measured]
    dof = sum(n - 1 for _, n in variances)
    pooled = math.sqrt(sum(v * (n - 1) for v, n in variances) / dof)
    return Noise(pooled, f"std pooled over {len(variances)} seed group(s)", dof)


def _sample(run, groups, attr):
    """The values a test compares for `run`: its seed group's (one per seed) when that has 2 or more, else its own."""
    group = group_of(run, groups)
    values = group.values(attr) if group else []
    return values if len(values) >= 2 else [getattr(run, attr)]


def bpb_test(run, reference, groups, noise):
    """run vs reference on final val bpb: Welch's t-test of their seed groups when both have 2+ seeds, else a
    t-test of their means (a run without a group counts as one value) with the measured noise; None when no noise
    is known."""
    a, b = _sample(run, groups, "val_bpb"), _sample(reference, groups, "val_bpb")
    if len(a) >= 2 and len(b) >= 2:
        return welch_t_test(a, b)
    return t_test_with_noise(a, b, noise) if noise is not None else None


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
    if not reference.final:  # a --baseline still running (or crashed): its figures are not its final ones
        return f"{value - ref_value:+.4f} (reference not final)"
    return None


def _verdict(diff, p, alpha, lower_is_better):
    if p >= alpha:
        return f"not distinguishable, {format_p(p)}"
    better = diff < 0 if lower_is_better else diff > 0
    return f"{'better' if better else 'worse'}, {format_p(p)}"


def compare_bpb(run, reference, noise, groups=(), alpha=SIGNIFICANCE_LEVEL):
    cell = _unjudged(run, reference, "val_bpb")
    if cell is not None:
        return cell
    diff = run.val_bpb - reference.val_bpb
    group = group_of(run, groups)
    if group is not None and group is group_of(reference, groups):
        return f"{diff:+.4f} same config (seed noise)"
    test = bpb_test(run, reference, groups, noise)
    if test is None:
        verdict = "lower" if diff < 0 else "higher" if diff > 0 else "equal"
        return f"{diff:+.4f} ({verdict}; noise unknown)"
    return f"{diff:+.4f} {_verdict(test.diff, test.p, alpha, lower_is_better=True)}"


def hellaswag_counts(run):
    """(correct, n) of a run's final HellaSwag acc_norm, or None when n is unknown."""
    if run.hs_acc_norm is None or not run.hs_n or int(run.hs_n) < 1:
        return None
    return round(run.hs_acc_norm * run.hs_n), int(run.hs_n)


def compare_hellaswag(run, reference, alpha=SIGNIFICANCE_LEVEL):
    """The two-proportion test of the two runs' acc_norm (each over its n examples)."""
    cell = _unjudged(run, reference, "hs_acc_norm")
    if cell is not None:
        return cell
    diff = run.hs_acc_norm - reference.hs_acc_norm
    counts, ref_counts = hellaswag_counts(run), hellaswag_counts(reference)
    if counts is None or ref_counts is None:
        return f"{diff:+.4f} (n unknown)"
    if counts[1] != ref_counts[1]:  # scored on other examples (e.g. the first 1000 against all 10042)
        return f"{diff:+.4f} not compared (n = {counts[1]} vs {ref_counts[1]}: other examples)"
    test = two_proportion_test(*counts, *ref_counts)
    return f"{diff:+.4f} {_verdict(diff, test.p, alpha, lower_is_better=False)}"


@dataclass
class GroupComparison:
    """Two seed groups: Welch's t-test on final val bpb, a two-proportion test on HellaSwag acc_norm (answers pooled
    over the seeds), and their summaries (mean, std, n)."""
    group: SeedGroup
    reference: SeedGroup
    bpb: TTest
    bpb_stats: tuple
    ref_bpb_stats: tuple
    hellaswag: ProportionTest = None
    hs_answers: tuple = None  # (n, reference n)


def pooled_hellaswag(runs, other_runs):
    """(two-proportion test, (answers, other's answers), None) of two settings' HellaSwag acc_norm, the answers
    pooled over each one's runs (one per seed); (None, None, why) when there is no test to make: a run's n
    unknown, or answers to other examples (the first 1000 do not compare with all 10042)."""
    counts = [[hellaswag_counts(r) for r in side] for side in (runs, other_runs)]
    if not all(counts):
        return None, None, None
    if any(None in c for c in counts):
        return None, None, "(n unknown)"
    ns = [sorted({n for _, n in c}) for c in counts]
    if len(set(ns[0] + ns[1])) > 1:
        shown = [" / ".join(map(str, side)) for side in ns]
        return None, None, f"not compared (n = {shown[0]} vs {shown[1]}: other examples)"
    (k_a, n_a), (k_b, n_b) = ([sum(x) for x in zip(*c)] for c in counts)
    return two_proportion_test(k_a, n_a, k_b, n_b), (n_a, n_b), None


def compare_groups(group, reference):
    bpb, ref_bpb = group.stats("val_bpb"), reference.stats("val_bpb")
    if bpb is None or ref_bpb is None:
        return None
    result = GroupComparison(group, reference, welch_t_test(group.values("val_bpb"), reference.values("val_bpb")),
                             bpb, ref_bpb)
    result.hellaswag, result.hs_answers, _ = pooled_hellaswag(group.counted_runs("hs_acc_norm"),
                                                              reference.counted_runs("hs_acc_norm"))
    return result


# --match: what two settings must share for their final val bpb to be compared (see docs/comparing.md, Statistics)
MATCH_MODES = ("all", "tokens", "params", "flops", "none")
BASELINE_NAMES = ("base", "baseline")  # the docs' baseline sweep: `sweep.py --name Base --seeds 0,1,2`


def _is_baseline_name(name):
    name = (name or "").lower()
    return any(name == b or name.startswith(b + "_") for b in BASELINE_NAMES)


def _seed_count(run, groups):
    group = group_of(run, groups)
    return len(group.values("val_bpb")) if group else 1


def pick_reference(runs, baseline=None, groups=()):
    """(the run everything is compared against, how it was chosen): --baseline, else a run of the baseline group
    the docs recommend, chosen before looking at any result (never the luckiest run, whose luck would bias every
    comparison): a group named Base / Baseline (EXPERIMENTING.md's baseline sweep), else the group with the most
    finished seeds (the best-measured), ties to the one started first; its first-started finished run."""
    if baseline is not None:
        return baseline, f"--baseline {baseline.name}"
    finished = [r for r in runs if r.final and r.val_bpb is not None]
    if not finished:
        return None, None
    named = [r for r in finished if _is_baseline_name(r.model_name)]
    pool = named or finished
    best = min(pool, key=lambda r: (-_seed_count(r, groups), r.started or "", r.name))
    group = group_of(best, groups)
    members = [r for r in (group.runs if group else [best]) if r.final and r.val_bpb is not None]
    reference = min(members, key=lambda r: (r.started or "", r.name))
    why = "named like the docs' baseline sweep (Base / Baseline)" if named else \
        "the setting with the most finished seeds, the first started of a tie"
    return reference, f"the baseline group {reference.model_name} ({why}; --baseline RUN picks another)"


# ---------------------------------------------------------------------------------------------- families
def holm(pvalues):
    """Holm's step-down adjusted p-values (Holm 1979), in the order given: sorted ascending, the i-th (from 0) of m
    becomes max over j <= i of min(1, (m - j) p_(j))."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def _human_count(value):
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:g}"


def scale_differences(run, reference):
    """{'length': '40 vs 120 steps', 'size': '1.47M vs 1.7M params'} for what differs between two runs' training
    steps, tokens and parameters (unknown figures do not differ)."""
    out = {}
    steps = (run.config.get("train_steps"), reference.config.get("train_steps"))
    if None not in steps and steps[0] != steps[1]:
        out["length"] = f"{steps[0]} vs {steps[1]} steps"
    elif None not in (run.tokens, reference.tokens) and run.tokens != reference.tokens:
        out["length"] = f"{_human_count(run.tokens)} vs {_human_count(reference.tokens)} tokens"
    if None not in (run.n_params, reference.n_params) and run.n_params != reference.n_params:
        out["size"] = f"{_human_count(run.n_params)} vs {_human_count(reference.n_params)} params"
    return out


def _whole(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _validation_set(run):
    """(rows, tokens a row, {"val_shards"/"val_files": project paths}) that the run's val bpb was measured on (the
    first val_steps x (val_batch_size // val_seq_len) windows of the val shards), each None or absent when not
    recorded."""
    config = run.config or {}
    steps, batch, seq = (_whole(config.get(k)) for k in ("val_steps", "val_batch_size", "val_seq_len"))
    rows = steps * (batch // seq) if None not in (steps, batch, seq) else None
    files, root = {}, run_root(run.path, config)
    for key in ("val_shards", "val_files"):  # the shards it read, else the patterns it was given (older runs)
        value = config.get(key)
        value = [value] if isinstance(value, str) else value
        if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
            files[key] = [_project_path(x, root) for x in value]
    return rows, seq, files


def _shards_difference(a, b):
    only_a, only_b = [x for x in a if x not in b], [x for x in b if x not in a]
    if only_a and only_b:
        return " vs ".join(", ".join(x[:2]) + (f" (+{len(x) - 2} more)" if len(x) > 2 else "")
                           for x in (only_a, only_b))
    return f"{len(a)} vs {len(b)} val shards" if len(a) != len(b) else "the val shards in another order"


def validation_difference(run, other):
    """'128 vs 64 rows of 256 tokens' (or the val shards of each) when the two runs' val bpb were measured on other
    text, else None. Runs of other tokenizers read other shards of (it is assumed) the same text, so bpb, which is
    per byte, is compared across them: only runs of one tokenizer are checked."""
    if run.tokenizer_id != other.tokenizer_id:
        return None
    (rows, seq, files), (o_rows, o_seq, o_files) = _validation_set(run), _validation_set(other)
    key = next((k for k in ("val_shards", "val_files") if k in files and k in o_files), None)
    if key and files[key] != o_files[key]:
        return _shards_difference(files[key], o_files[key])
    if None not in (rows, o_rows) and (rows, seq) != (o_rows, o_seq):
        return f"{rows} vs {o_rows} rows of {seq} tokens" if seq == o_seq else \
            f"{rows} rows of {seq} vs {o_rows} rows of {o_seq} tokens"
    return None


def bpb_at_flops(run, flops):
    """The run's val bpb after `flops` training FLOPs, read off its curve (metrics.csv's val rows, FLOPs in
    proportion to tokens), linear in log FLOPs between evaluations; its final val bpb when it ended within 0.1% of
    `flops`; None when its curve does not reach them."""
    if not run.train_flops or not run.tokens:
        return None
    if abs(run.train_flops - flops) <= 1e-3 * flops:
        return run.val_bpb
    xs, ys = run.metrics.series("tokens", "val_bpb") if run.metrics is not None else ([], [])
    points = [(run.train_flops * t / run.tokens, y) for t, y in zip(xs, ys) if t and t > 0]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= flops <= x1 and x1 > x0:
            w = math.log(flops / x0) / math.log(x1 / x0)
            return y0 + w * (y1 - y0)
    return None


@dataclass
class SettingComparison:
    """One setting (a seed group, or a run alone) against another on final val bpb (or at matched FLOPs): the
    test, its raw and Holm-corrected p, and what differs in scale; `refused` says why no test was made."""
    run: object  # a run of the setting
    other: object  # a run of the setting compared against (the reference's, vs the baseline)
    diff: float = None
    test: TTest = None
    p_holm: float = None
    refused: str = None
    differs: dict = None
    n: tuple = None  # (values, values of other)
    summaries: tuple = None  # ((mean, std, n), (mean, std, n)) of the values tested, when both have 2 or more
    m: int = 0  # tests in the family Holm corrects over
    # HellaSwag acc_norm, a family of its own (pooled_hellaswag): the test, its answers, Holm's p over the
    # HellaSwag tests made and their number; hs_refused says why none was made
    hs_test: ProportionTest = None
    hs_answers: tuple = None
    hs_p_holm: float = None
    hs_m: int = 0
    hs_refused: str = None


def _values(run, groups, attr):
    group = group_of(run, groups)
    values = [v for v in (group.values(attr) if group else []) if v is not None]
    own = getattr(run, attr, None)
    return values if len(values) >= 2 else ([own] if own is not None else [])


def setting_key(run):
    return run_group_key(run) or run.path


def compare_settings(runs, reference, groups, noise, match="all", pairs=False):
    """The family of comparisons: every finished setting against the reference's (or every pair with `pairs`), on
    final val bpb (`match` "flops": at the reference's training FLOPs), Holm-corrected over the tests made."""
    if not reference.final:  # its figures are not final: nothing is judged against it (the cells say so)
        return []
    finished = [r for r in runs if r.final and r.val_bpb is not None]
    settings = {}
    for run in finished:
        settings.setdefault(setting_key(run), run)
    ref_key = setting_key(reference)
    settings.pop(ref_key, None)
    heads = [reference] + list(settings.values())
    couples = [(a, b) for i, b in enumerate(heads) for a in heads[i + 1:]] if pairs else \
        [(a, reference) for a in heads[1:]]
    attr, flops = "val_bpb", None
    if match == "flops":
        flops = statistics.median([r.train_flops for r in (group_of(reference, groups) or SeedGroup([reference])).runs
                                   if r.final and r.train_flops] or [0]) or None
        for run in finished + [r for g in groups for r in g.runs]:  # the seed groups' runs not shown too
            run.matched_bpb = bpb_at_flops(run, flops) if flops and run.final else None
        attr = "matched_bpb"
    family, scale_clashes = [], []
    for a, b in couples:
        c = SettingComparison(a, b, differs=scale_differences(a, b))
        val = validation_difference(a, b)
        if val:  # val bpb of other text: held whatever the budget match, compared only under --match none
            c.differs["validation set"] = val
        held = {"all": ("length", "size"), "tokens": ("length",), "params": ("size",)}.get(match, ()) + \
            (("validation set",) if match != "none" else ())
        clash = [f"other {k} ({v})" for k, v in c.differs.items() if k in held]
        scale_clash = [f"other {k} ({v})" for k, v in c.differs.items() if k in held and k in ("length", "size")]
        x, y = _values(a, groups, attr), _values(b, groups, attr)
        if clash:
            c.refused = "not compared: " + ", ".join(clash)
        elif not x or not y:
            c.refused = ("not compared: the baseline records no training FLOPs" if flops is None else
                         f"not compared: did not reach the baseline's training FLOPs ({flops:.3g})") \
                if match == "flops" else "not compared: no final val bpb"
        else:
            c.diff, c.n = statistics.mean(x) - statistics.mean(y), (len(x), len(y))
            if len(x) >= 2 and len(y) >= 2:
                c.test = welch_t_test(x, y)
                c.summaries = tuple((statistics.mean(v), statistics.stdev(v), len(v)) for v in (x, y))
            elif noise is not None:
                c.test = t_test_with_noise(x, y, noise)
        family.append(c)
        scale_clashes.append(scale_clash)
    tested = [c for c in family if c.test is not None]
    for c, p in zip(tested, holm([c.test.p for c in tested])):
        c.p_holm, c.m = p, len(tested)
    for c, scale_clash in zip(family, scale_clashes):  # the same settings on HellaSwag, unless of another length
        if scale_clash:  # or size (a longer or larger run is expected to score higher too)
            c.hs_refused = "not compared: " + ", ".join(scale_clash)
        else:
            c.hs_test, c.hs_answers, c.hs_refused = pooled_hellaswag(_hellaswag_runs(c.run, groups),
                                                                     _hellaswag_runs(c.other, groups))
    tested = [c for c in family if c.hs_test is not None]
    for c, p in zip(tested, holm([c.hs_test.p for c in tested])):
        c.hs_p_holm, c.hs_m = p, len(tested)
    return family


def _hellaswag_runs(run, groups):
    """The runs whose HellaSwag answers stand for run's setting: its seed group's (one per seed), else its own."""
    group = group_of(run, groups)
    counted = group.counted_runs("hs_acc_norm") if group else []
    return counted or ([run] if run.final and run.hs_acc_norm is not None else [])


def holm_verdict(c, alpha, lower_is_better=True):
    """'better, p = 0.012' (one test) or 'better, Holm p = 0.036' (a family: the corrected p, which decides; the
    raw p is in the lines under the table and in --summary)."""
    if c.p_holm is None:
        return None
    return _holm_words(c.test.diff, c.test.p, c.p_holm, c.m, alpha, lower_is_better)


def hellaswag_holm_verdict(c, alpha):
    """holm_verdict of the HellaSwag family (higher acc_norm is better)."""
    if c.hs_p_holm is None:
        return None
    return _holm_words(c.hs_test.diff, c.hs_test.p, c.hs_p_holm, c.hs_m, alpha, lower_is_better=False)


def _holm_words(diff, p, p_holm, m, alpha, lower_is_better):
    word = _verdict(diff, p_holm, alpha, lower_is_better).split(",")[0]
    if m <= 1:  # a family of one: Holm's p is the p
        return f"{word}, {format_p(p)}"
    return f"{word}, Holm {format_p(p_holm)}"
