"""tables/*.tex: booktabs tables of figures read from the run folders and statistics gptlab.compare computed
(the settings' summary of compare_experiments.py --summary, the leaderboard's cost and HellaSwag figures, judge.py's
win rates). Each returns (file name, LaTeX) or None when the runs recorded nothing for it."""
import math
import statistics

from gptlab.compare.runs import MISSING
from gptlab.compare.stats import RECORD_P, RECORD_POWER
from gptlab.compare.tables import _human, _mean_std, _p_cell, format_hours, format_usd
from gptlab.paper.latex import cell, mean_std, table
from gptlab.paper.study import group_runs


def _pct(x):
    return MISSING if x is None else f"{100 * x:.1f}%"


def win_rate_text(summary):
    """'55.0% [45.0%, 65.0%] (n=100)' from a judge.py summary.json."""
    ci = summary.get("ci95") or [None, None]
    if summary.get("win_rate") is None:
        return MISSING
    return f"{_pct(summary['win_rate'])} [{_pct(ci[0])}, {_pct(ci[1])}] (n={summary.get('n')})"


def _runs_needed(study, setting):
    if setting.diff is None:
        return MISSING
    n = study.runs_needed(setting)
    return "> 100,000" if n is None else f"{n:,}"


def results_table(study):
    judged = any(study.judging_against_baseline(s) for s in study.settings[1:])
    headers = ["Setting", "Seeds", "Val bpb mean ± std", "95% CI of the mean", "Δ vs baseline", "p", "Holm p",
               "Verdict", "Runs needed", "HellaSwag acc_norm"]
    rows = []
    for s in study.settings:
        row = [s.name, str(s.n), _mean_std(s.mean, s.std),
               MISSING if s.ci is None else f"[{s.ci[0]:.4f}, {s.ci[1]:.4f}]",
               MISSING if s.diff is None else f"{s.diff:+.4f}", _p_cell(s.p), _p_cell(s.p_holm), s.verdict,
               _runs_needed(study, s), mean_std([r.hs_acc_norm for r in s.runs])]
        if judged:
            found = study.judging_against_baseline(s)
            row.append(win_rate_text(found[0].summary) if found else MISSING)
        rows.append(row)
    if judged:
        headers.append("Judged win rate vs baseline")
    tested = sum(c.test is not None for c in study.board.family)
    noise = study.noise_std
    notes = [f"Val bpb: final validation bits per byte, mean ± std over each setting's seeds. p: Welch's t-test of "
             f"two seed groups, or a t-test with the measured run-to-run std for a single run; Holm's correction "
             f"over the {tested} test(s) against the baseline; verdict at Holm p < {study.board.alpha:g}. Runs needed: "
             f"runs per side for a two-sample t-test to tell the observed Δ apart at p < {RECORD_P:g} with "
             f"{RECORD_POWER:.0%} power, given the noise"
             + (f" (std {noise:.4f})." if noise is not None else " (unknown: no seed group).")
             + " HellaSwag acc_norm: mean ± std over the seeds."]
    if study.board.runs_needed:
        notes.append(study.board.runs_needed)
    if judged:
        notes.append("Judged win rate: judge.py's win rate of the setting's run over the baseline's (ties count "
                     "half; 50% is chance) with its 95% bootstrap interval over prompts (details in the judged "
                     "win rates' table).")
    return "results.tex", table("tab:results", "Final validation bits per byte of each setting against the baseline "
                                f"({study.settings[0].name}).", headers, rows, "lrllrrrlrl" + "l" * judged,
                                notes, wide=True)


def _flops(value):
    if value is None:
        return MISSING
    exponent = int(math.floor(math.log10(value)))
    return f"{value / 10 ** exponent:.2f}e{exponent}"


def _sum(values):
    return None if not values or None in values else sum(values)


def cost_table(study):
    headers = ["Setting", "Params", "Tokens", "Train FLOPs", "Device", "GPU-h per run", "GPU-h total", "Cost total"]
    rows = []
    for s in study.settings:
        first = s.runs[0]
        hours = [r.gpu_hours for r in s.runs]
        rows.append([s.name, _human(first.n_params), _human(first.tokens), _flops(first.train_flops),
                     first.gpu or MISSING,
                     MISSING if None in hours else format_hours(statistics.mean(hours)),
                     format_hours(_sum(hours)), format_usd(_sum([r.cost_usd for r in s.runs]))])
    notes = ["GPU-h: processes × wall time of each run (a CPU run: CPU process-hours); cost at the price the run "
             "recorded (--usd_per_gpu_hour), else gptlab's typical rental price by GPU name; -- where no price is "
             "known. Train FLOPs: as the run recorded them (results.json), else summed from metrics.csv, else 6ND."]
    return "cost.tex", table("tab:cost", "Size, data and compute of each setting (totals over its seeds).",
                             headers, rows, "lrrrlrrr", notes)


def _per_task(run, task, key):
    evals = (run.results or {}).get("evals")
    per_task = evals.get("per_task") if isinstance(evals, dict) else None
    figures = per_task.get(task) if isinstance(per_task, dict) else None
    value = figures.get(key) if isinstance(figures, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def evals_table(study):
    scored = [s for s in study.settings if any(r.evals_core is not None for r in s.runs)]
    if not scored:
        return None
    tasks = sorted({t for s in scored for r in s.runs for t in (r.evals_tasks or ())})
    headers = ["Task"] + [f"{s.name}: {what}" for s in scored for what in ("acc", "gold bpb")]
    rows = [["core / mean gold bpb"] + [v for s in scored for v in (mean_std([r.evals_core for r in s.runs]),
                                                                    mean_std([r.evals_gold_bpb for r in s.runs]))]]
    for task in tasks:
        rows.append([task] + [v for s in scored for v in (mean_std([_per_task(r, task, "acc") for r in s.runs]),
                                                          mean_std([_per_task(r, task, "gold_bpb") for r in s.runs]))])
    limits = sorted({r.evals_limit for s in scored for r in s.runs if r.evals_limit})
    notes = ["The eval suite (train_gpt.py --evals) at the end of training, mean ± std over the seeds: per task the "
             "accuracy and the bits per byte of the gold answer; core: the mean over the tasks of the accuracy "
             "centred on chance, (acc - chance) / (1 - chance)."]
    if limits:
        notes.append("Scored on the first " + ", ".join(f"{n:,}" for n in limits) + " examples of each task only "
                     "(--evals_limit).")
    return "evals.tex", table("tab:evals", "The eval suite, per task.", headers, rows, "l" + "r" * (len(headers) - 1),
                              notes, wide=len(scored) > 2)


def judge_table(study):
    if not study.judgings:
        return None
    headers = ["Experiment run", "Baseline run", "Judge", "Prompts", "Wins / losses / ties", "Win rate [95% CI]",
               "Sign test p", "Judge cost"]
    rows = []
    for j in study.judgings:
        s = j.summary
        left_out = sum(s.get(k) or 0 for k in ("refusals", "unparseable", "pending"))
        rows.append([j.run.name, j.baseline_name, str(s.get("judge_model") or MISSING),
                     f"{s.get('n')} of {s.get('prompts')}" if left_out else str(s.get("n")),
                     f"{s.get('wins')} / {s.get('losses')} / {s.get('ties')}", win_rate_text(s),
                     _p_cell(s.get("sign_test_p")),
                     MISSING if s.get("cost_usd") is None else format_usd(s["cost_usd"])])
    notes = ["judge.py: both runs continue the same prompts; the judge compares every pair in both orders "
             "(verdicts that disagree count as a tie); win rate with a 95% bootstrap interval over prompts, and a "
             "two-sided sign test of wins against losses. Prompts refused, unparseable or not judged yet are left "
             "out (n of all)."]
    return "judge.tex", table("tab:judge", "Judged win rates of an experiment's continuations over its baseline's.",
                              headers, rows, "llllrlrr", notes, wide=True)


def runs_table(study):
    headers = ["Run", "Setting", "Seed", "Status", "Val bpb", "HellaSwag acc_norm", "Tokens", "GPU-h", "Git commit"]
    rows = []
    for s in study.settings:
        for r in group_runs(study, s):
            commit = r.config.get("git_commit")
            rows.append([r.name, s.name, str(r.seed), r.status, cell(r.val_bpb), cell(r.hs_acc_norm),
                         _human(r.tokens), format_hours(r.gpu_hours), commit[:12] if isinstance(commit, str)
                         else MISSING])
    counted = {id(r) for s in study.settings for r in group_runs(study, s)}
    for r in study.runs:
        if id(r) not in counted:
            rows.append([r.name, MISSING, str(r.seed), r.status, cell(r.val_bpb), cell(r.hs_acc_norm),
                         _human(r.tokens), format_hours(r.gpu_hours), MISSING])
    notes = ["Every run folder the paper was made from, with its figures as results.json records them "
             "(a run that has not finished: its last measured figures, not counted in the tables)."]
    return "runs.tex", table("tab:runs", "The runs.", headers, rows, "llllrrrrl", notes, wide=True)


def all_tables(study):
    """{file name: LaTeX} of every table the runs have figures for."""
    made = [results_table(study), cost_table(study), evals_table(study), judge_table(study), runs_table(study)]
    return dict(t for t in made if t is not None)
