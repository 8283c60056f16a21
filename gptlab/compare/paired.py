"""Two evaluations (evaluate.py output folders) on the same examples, compared example by example.

Per task, with B - A as the difference:
    acc       McNemar's exact test: of the discordant examples (right in one, wrong in the other), how many went
              A's way, against Binomial(discordant, 1/2), two-sided (min(1, 2 P[X <= min(b, c)]))
    gold bpb  paired t-test on the per-example differences of the gold answer's bits per byte (n - 1 df)
Each column's p-values are Holm-corrected over the tasks compared (one family per column). Over the tasks:
    core      mean centred accuracy; its difference is mean over tasks of delta acc_t / (1 - baseline_t)
    gold bpb  mean of the tasks' mean gold bpb
each tested with a paired z-test whose standard error combines the tasks' paired standard errors (tasks are
independent examples). Examples must be the same on both sides (index, gold, each choice's length in characters
and bytes, and the same --fewshot): anything else is refused, as a paired test of different examples means nothing.
"""
import json
import math
import os
import re
from dataclasses import dataclass, field

from gptlab.compare.stats import holm
from gptlab.core.errors import UserError
from gptlab.core.files import read_json_file

SUMMARY_FILE = "summary.json"
MAX_SUMMARY_BYTES = 16 * 1024 * 1024
TASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a task file's name: never a path
RECORD_FIELDS = ("index", "gold", "correct", "gold_bpb", "baseline", "chars", "bytes")


# ---------------------------------------------------------------------------------------------- tests
def mcnemar_exact(b, c):
    """Two-sided exact McNemar p for b discordant pairs one way and c the other (integer arithmetic: exact for any
    count, where 0.5 ** n would underflow)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2 ** n)


@dataclass
class PairedT:
    diff: float  # mean of b - a
    se: float
    t: float
    df: int
    p: float


def paired_t(a, b):
    """Paired t-test of b against a (equal lengths, 2 or more): t = mean(d) / (sd(d) / sqrt(n)), d = b - a."""
    from scipy import stats  # heavy (~0.7 s): only for p-values

    d = [y - x for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)
    if se == 0.0:  # identical differences: scipy's t would be nan or inf
        return PairedT(mean, 0.0, math.copysign(math.inf, mean) if mean else 0.0, n - 1, 0.0 if mean else 1.0)
    t = mean / se
    return PairedT(mean, se, t, n - 1, float(2.0 * stats.t.sf(abs(t), n - 1)))


def z_test(diff, se):
    """Two-sided normal p of diff with standard error se (se 0: p 0 for a difference, 1 for none)."""
    from scipy import stats

    if se == 0.0:
        return 0.0 if diff else 1.0
    return float(2.0 * stats.norm.sf(abs(diff / se)))


# ---------------------------------------------------------------------------------------------- reading
def resolve_eval_dir(path):
    """An evaluate.py output folder (holding summary.json), or a run folder whose evals/ holds exactly one."""
    if os.path.isfile(os.path.join(path, SUMMARY_FILE)):
        return path
    if not os.path.isdir(path):
        raise UserError(f"{path} is not a folder; name an evaluate.py output folder (it holds {SUMMARY_FILE}) or a "
                        "run folder whose evals/ holds one")
    evals = os.path.join(path, "evals")
    found = sorted(d for d in (os.listdir(evals) if os.path.isdir(evals) else ())
                   if os.path.isfile(os.path.join(evals, d, SUMMARY_FILE)))
    if len(found) == 1:
        return os.path.join(evals, found[0])
    if found:
        raise UserError(f"{path}/evals holds {len(found)} evaluations ({', '.join(found)}); name one of them, e.g. "
                        f"{os.path.join(evals, found[-1])}")
    raise UserError(f"{path} holds no {SUMMARY_FILE} and no evals/<name>/{SUMMARY_FILE}; run evaluate.py on it "
                    "first (python evaluate.py RUN --tasks core)")


@dataclass
class Evaluation:
    path: str
    fewshot: object
    dtype: str  # evaluate.py --dtype as resolved (summaries written before it: float32)
    shots: dict  # task → where its few-shot examples came from (summary.json "fewshot_source"; {} before it)
    records: dict = field(default_factory=dict)  # task name → [record]


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _valid(rec):
    return (isinstance(rec["correct"], bool) and _number(rec["gold_bpb"]) and _number(rec["baseline"])
            and 0 <= rec["baseline"] < 1)


def _read_records(path, task):
    file = os.path.join(path, f"{task}.jsonl")
    records = []
    if not os.path.isfile(file):  # missing, a folder, a FIFO (which would block the read): not evaluate.py's
        raise UserError(f"{file} is not a regular file; {SUMMARY_FILE} lists {task}, so the folder is incomplete: "
                        "re-run evaluate.py with --overwrite")
    try:
        with open(file, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except ValueError:
                    raise UserError(f"{file} line {number} is not JSON; re-run evaluate.py with --overwrite") from None
                if not isinstance(rec, dict) or any(k not in rec for k in RECORD_FIELDS):
                    raise UserError(f"{file} line {number} lacks one of {', '.join(RECORD_FIELDS)}; it was not "
                                    "written by evaluate.py (re-run it with --overwrite)")
                if not _valid(rec):
                    raise UserError(f"{file} line {number} has a malformed figure (correct must be true/false, "
                                    "gold_bpb a finite number, baseline a number in [0, 1)); re-run evaluate.py "
                                    "with --overwrite")
                records.append(rec)
    except OSError as err:
        raise UserError(f"cannot read {file} ({err.strerror or err}); {SUMMARY_FILE} lists {task}, so the folder "
                        "is incomplete: re-run evaluate.py with --overwrite") from None
    except UnicodeDecodeError:
        raise UserError(f"{file} is not UTF-8 text; re-run evaluate.py with --overwrite") from None
    if not records:
        raise UserError(f"{file} holds no examples; re-run evaluate.py with --overwrite")
    return records


def load_evaluation(path):
    folder = resolve_eval_dir(path)
    summary, why = read_json_file(os.path.join(folder, SUMMARY_FILE), MAX_SUMMARY_BYTES)
    if why:
        raise UserError(f"{os.path.join(folder, SUMMARY_FILE)} {why}; re-run evaluate.py with --overwrite")
    tasks = summary.get("per_task") if isinstance(summary, dict) else None
    if not isinstance(tasks, dict) or not tasks:
        raise UserError(f"{os.path.join(folder, SUMMARY_FILE)} has no per_task figures; it was not written by "
                        "evaluate.py (re-run it)")
    bad = [t for t in tasks if not TASK_NAME.fullmatch(str(t))]
    if bad:
        raise UserError(f"{os.path.join(folder, SUMMARY_FILE)} names a task {bad[0]!r} that is no task file's name; "
                        "re-run evaluate.py")
    shots = summary.get("fewshot_source")
    return Evaluation(folder, summary.get("fewshot"), str(summary.get("dtype", "float32")),
                      shots if isinstance(shots, dict) else {}, {t: _read_records(folder, t) for t in sorted(tasks)})


def _check_same_examples(task, a, b, name_a, name_b):
    if len(a) != len(b):
        raise UserError(f"{task}: {name_a} scored {len(a)} examples and {name_b} {len(b)}; a paired comparison "
                        "needs the same examples (evaluate both with the same --limit)")
    for ra, rb in zip(a, b):
        for key in ("index", "gold", "chars", "bytes"):
            if ra[key] != rb[key]:
                raise UserError(f"{task}: example {ra['index']} differs between {name_a} and {name_b} ({key} "
                                f"{ra[key]} vs {rb[key]}); a paired comparison needs the same examples (the same "
                                "task files, --limit and --fewshot)")


# ---------------------------------------------------------------------------------------------- comparing
@dataclass
class TaskComparison:
    task: str
    n: int
    acc_a: float
    acc_b: float
    a_only: int  # right in A, wrong in B
    b_only: int
    acc_p: float
    bpb_a: float
    bpb_b: float
    bpb: PairedT
    baseline: float
    acc_p_holm: float = None
    bpb_p_holm: float = None

    @property
    def acc_diff(self):
        return self.acc_b - self.acc_a

    @property
    def acc_diff_se(self):
        """Standard error of the mean of d_i = correct_B - correct_A (d in -1, 0, 1)."""
        n, m = self.n, (self.b_only - self.a_only) / self.n
        if n < 2:
            return 0.0
        ss = self.b_only * (1 - m) ** 2 + self.a_only * (-1 - m) ** 2 + (n - self.a_only - self.b_only) * m ** 2
        return math.sqrt(ss / (n - 1) / n)


@dataclass
class Aggregate:
    what: str
    a: float
    b: float
    se: float
    p: float

    @property
    def diff(self):
        return self.b - self.a


def compare_task(task, a, b):
    n = len(a)
    a_only = sum(1 for x, y in zip(a, b) if x["correct"] and not y["correct"])
    b_only = sum(1 for x, y in zip(a, b) if y["correct"] and not x["correct"])
    bpb_a, bpb_b = [r["gold_bpb"] for r in a], [r["gold_bpb"] for r in b]
    test = paired_t(bpb_a, bpb_b) if n >= 2 else PairedT(sum(bpb_b) - sum(bpb_a), 0.0, 0.0, 0, 1.0)
    return TaskComparison(task, n, sum(r["correct"] for r in a) / n, sum(r["correct"] for r in b) / n, a_only,
                          b_only, mcnemar_exact(a_only, b_only), sum(bpb_a) / n, sum(bpb_b) / n, test,
                          sum(r["baseline"] for r in a) / n)


def compare_evaluations(path_a, path_b):
    """(per-task comparisons, [core, gold bpb aggregates], tasks only in A, tasks only in B)."""
    ea, eb = load_evaluation(path_a), load_evaluation(path_b)
    if ea.fewshot != eb.fewshot:
        raise UserError(f"{ea.path} was scored {ea.fewshot}-shot and {eb.path} {eb.fewshot}-shot; a paired "
                        "comparison needs the same contexts (evaluate both with the same --fewshot)")
    if ea.dtype != eb.dtype:  # bfloat16 moves log-probabilities by ~1e-3: a difference the test would credit
        raise UserError(f"{ea.path} was scored in {ea.dtype} and {eb.path} in {eb.dtype}; a paired comparison "
                        "needs the same arithmetic (evaluate both with the same --dtype)")
    common = sorted(set(ea.records) & set(eb.records))
    if not common:
        raise UserError(f"{ea.path} and {eb.path} share no task ({', '.join(sorted(ea.records))} vs "
                        f"{', '.join(sorted(eb.records))}); evaluate both with the same --tasks")
    for task in common:  # the same K from other pools (another download) shows other contexts
        a, b = ea.shots.get(task), eb.shots.get(task)
        if isinstance(a, dict) and isinstance(b, dict) and a.get("sha256") != b.get("sha256"):
            raise UserError(f"{task}: {ea.path} drew its few-shot examples from {a.get('file')} (sha256 "
                            f"{str(a.get('sha256'))[:12]}) and {eb.path} from {b.get('file')} (sha256 "
                            f"{str(b.get('sha256'))[:12]}); a paired comparison needs the same contexts (evaluate "
                            "both from the same data/evals download)")
    rows = []
    for task in common:
        _check_same_examples(task, ea.records[task], eb.records[task], ea.path, eb.path)
        rows.append(compare_task(task, ea.records[task], eb.records[task]))
    for attr, key in (("acc_p", "acc_p_holm"), ("bpb", "bpb_p_holm")):
        ps = [r.acc_p if attr == "acc_p" else r.bpb.p for r in rows]
        for r, p in zip(rows, holm(ps)):
            setattr(r, key, p)
    k = len(rows)
    core_a = sum((r.acc_a - r.baseline) / (1 - r.baseline) for r in rows) / k
    core_b = sum((r.acc_b - r.baseline) / (1 - r.baseline) for r in rows) / k
    core_se = math.sqrt(sum((r.acc_diff_se / (1 - r.baseline)) ** 2 for r in rows)) / k
    bpb_a, bpb_b = sum(r.bpb_a for r in rows) / k, sum(r.bpb_b for r in rows) / k
    bpb_se = math.sqrt(sum(r.bpb.se ** 2 for r in rows)) / k
    aggregates = [Aggregate("core", core_a, core_b, core_se, z_test(core_b - core_a, core_se)),
                  Aggregate("gold_bpb", bpb_a, bpb_b, bpb_se, z_test(bpb_b - bpb_a, bpb_se))]
    only_a = sorted(set(ea.records) - set(eb.records))
    only_b = sorted(set(eb.records) - set(ea.records))
    return rows, aggregates, (ea.path, eb.path), only_a, only_b


# ---------------------------------------------------------------------------------------------- text
def _p(p):
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def _p_words(p):
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.4f}"


def _mark(p, alpha):
    return "*" if p < alpha else " "


def render_paired(result, alpha):
    rows, aggregates, (path_a, path_b), only_a, only_b = result
    head = ("task", "n", "acc A", "acc B", "Δ acc", "McNemar p", "Holm p", "bpb A", "bpb B", "Δ bpb", "paired-t p",
            "Holm p")
    body = []
    for r in rows:
        body.append((r.task, str(r.n), f"{r.acc_a:.4f}", f"{r.acc_b:.4f}", f"{r.acc_diff:+.4f}", _p(r.acc_p),
                     _p(r.acc_p_holm) + _mark(r.acc_p_holm, alpha), f"{r.bpb_a:.4f}", f"{r.bpb_b:.4f}",
                     f"{r.bpb.diff:+.4f}", _p(r.bpb.p), _p(r.bpb_p_holm) + _mark(r.bpb_p_holm, alpha)))
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = [f"A = {path_a}", f"B = {path_b}", "Δ = B - A, on the same examples"]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(x, widths)))
              for x in [head] + body]
    core, bpb = aggregates
    lines.append(f"core (mean centred accuracy over {len(rows)} tasks): A {core.a:.4f}, B {core.b:.4f}, "
                 f"Δ {core.diff:+.4f} ± {1.96 * core.se:.4f}, {_p_words(core.p)}{_mark(core.p, alpha).strip()}")
    lines.append(f"mean gold-answer bpb: A {bpb.a:.4f}, B {bpb.b:.4f}, Δ {bpb.diff:+.4f} ± {1.96 * bpb.se:.4f}, "
                 f"{_p_words(bpb.p)}{_mark(bpb.p, alpha).strip()}")
    for side, only in (("A", only_a), ("B", only_b)):
        if only:
            lines.append(f"only in {side} (not compared): {', '.join(only)}")
    lines.append(f"acc: McNemar's exact test on the examples one side got right and the other wrong; bpb: paired "
                 f"t-test of the gold answer's bits per byte; Holm p: corrected over the {len(rows)} tasks, per "
                 f"column; * below --alpha {alpha:g}; core and mean bpb: paired z-test (± is the 95% interval)")
    return "\n".join(lines) + "\n"
