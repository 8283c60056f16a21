"""gptlab.compare.paired: two evaluate.py folders compared example by example. Expectations from scipy (binomtest,
ttest_rel, norm) run here on the same numbers, and from cases worked by hand."""
import json
import math
import os
import statistics

import pytest
from scipy import stats

from gptlab.compare import paired
from gptlab.compare.stats import holm
from gptlab.core.errors import UserError
from helpers.eval_folders import write_eval


def test_mcnemar_exact_by_hand_and_against_scipy_binomtest():
    # b = 1, c = 5: n = 6, P[X <= 1] = (1 + 6) / 64, two-sided 14 / 64
    assert paired.mcnemar_exact(1, 5) == pytest.approx(14 / 64, rel=1e-12)
    assert paired.mcnemar_exact(0, 0) == 1.0
    assert paired.mcnemar_exact(3, 3) == 1.0
    for b, c in ((0, 7), (12, 30), (250, 310), (1500, 1620), (9, 2)):
        assert paired.mcnemar_exact(b, c) == pytest.approx(stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


def test_paired_t_against_scipy_ttest_rel():
    a = [3.1, 2.7, 4.0, 3.3, 2.9, 3.8, 3.05]
    b = [3.0, 2.75, 3.7, 3.1, 2.95, 3.5, 2.9]
    got, ref = paired.paired_t(a, b), stats.ttest_rel(b, a)
    assert got.t == pytest.approx(ref.statistic, rel=1e-9)
    assert got.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert got.df == 6 and got.diff == pytest.approx(statistics.mean(b) - statistics.mean(a))
    # every difference equal: no spread, a sure difference (scipy gives nan here)
    assert paired.paired_t([1.0, 2.0], [1.5, 2.5]).p == 0.0
    assert paired.paired_t([1.0, 2.0], [1.0, 2.0]).p == 1.0


def test_two_folders_per_task_holm_and_aggregates(tmp_path):
    t1_a = (0.5, [1, 1, 0, 0, 1, 0], [1, 2, 3, 4, 5, 6])
    t1_b = (0.5, [1, 0, 1, 1, 1, 1], [0.9, 1.8, 2.9, 3.7, 4.9, 5.8])
    t2_a = (0.25, [0, 0, 0, 0, 1], [2.0, 2.5, 3.0, 2.2, 2.8])
    t2_b = (0.25, [1, 1, 0, 1, 0], [2.1, 2.4, 3.3, 2.0, 2.9])
    a = write_eval(tmp_path / "a", {"t1": t1_a, "t2": t2_a})
    b = write_eval(tmp_path / "b", {"t1": t1_b, "t2": t2_b})
    rows, (core, bpb), _, only_a, only_b = paired.compare_evaluations(a, b)
    r1, r2 = rows
    assert (r1.task, r1.a_only, r1.b_only) == ("t1", 1, 3)
    assert r1.acc_p == pytest.approx(10 / 16)  # n = 4 discordant, 2 (1 + 4) / 16
    assert (r2.a_only, r2.b_only) == (1, 3)
    assert r1.acc_diff == pytest.approx(5 / 6 - 3 / 6) and r2.acc_diff == pytest.approx(3 / 5 - 1 / 5)
    for r, (_, _, x), (_, _, y) in ((r1, t1_a, t1_b), (r2, t2_a, t2_b)):
        assert r.bpb.p == pytest.approx(stats.ttest_rel(y, x).pvalue, rel=1e-9)
    p1, p2 = r1.bpb.p, r2.bpb.p
    lo, hi = sorted((p1, p2))
    holm_by_hand = {lo: min(1, 2 * lo), hi: max(min(1, 2 * lo), hi)}
    assert (r1.bpb_p_holm, r2.bpb_p_holm) == (pytest.approx(holm_by_hand[p1]), pytest.approx(holm_by_hand[p2]))
    assert r1.acc_p_holm == pytest.approx(min(1, 2 * min(r1.acc_p, r2.acc_p)) if r1.acc_p <= r2.acc_p else
                                          max(min(1, 2 * r2.acc_p), r1.acc_p))
    # core: mean over tasks of (acc - baseline) / (1 - baseline); its se from each task's per-example differences
    assert core.a == pytest.approx(((3 / 6 - 0.5) / 0.5 + (1 / 5 - 0.25) / 0.75) / 2)
    assert core.diff == pytest.approx(((2 / 6) / 0.5 + (2 / 5) / 0.75) / 2)
    d1 = [y - x for x, y in zip(t1_a[1], t1_b[1])]
    d2 = [y - x for x, y in zip(t2_a[1], t2_b[1])]
    se = math.sqrt((statistics.stdev(d1) / math.sqrt(6) / 0.5) ** 2 + (statistics.stdev(d2) / math.sqrt(5) / 0.75)
                   ** 2) / 2
    assert core.se == pytest.approx(se) and core.p == pytest.approx(2 * stats.norm.sf(core.diff / se))
    e1 = [y - x for x, y in zip(t1_a[2], t1_b[2])]
    e2 = [y - x for x, y in zip(t2_a[2], t2_b[2])]
    assert bpb.diff == pytest.approx((statistics.mean(e1) + statistics.mean(e2)) / 2)
    se = math.sqrt(statistics.stdev(e1) ** 2 / 6 + statistics.stdev(e2) ** 2 / 5) / 2
    assert bpb.se == pytest.approx(se) and bpb.p == pytest.approx(2 * stats.norm.sf(abs(bpb.diff) / se))
    assert only_a == only_b == []
    text = paired.render_paired(paired.compare_evaluations(a, b), 0.05)
    assert "McNemar" in text and "0.6250" in text


def test_holm_is_the_shared_one():
    assert paired.holm is holm


def test_tasks_on_one_side_only_are_named_not_compared(tmp_path):
    t = (0.5, [1, 0, 1], [1.0, 2.0, 3.0])
    a = write_eval(tmp_path / "a", {"t1": t, "t2": t})
    b = write_eval(tmp_path / "b", {"t1": t, "t3": t})
    rows, _, _, only_a, only_b = paired.compare_evaluations(a, b)
    assert [r.task for r in rows] == ["t1"] and only_a == ["t2"] and only_b == ["t3"]


@pytest.mark.parametrize("change, words", [
    (lambda recs: recs[:-1], "scored 3 examples"),                       # another --limit
    (lambda recs: [dict(r, gold=1 - r["gold"]) for r in recs], "gold"),  # other rows
    (lambda recs: [dict(r, bytes=[9, 9]) for r in recs], "bytes"),        # other continuations
    # malformed figures, each named by its line
    *[(lambda recs, f=f, v=v: [dict(r, **{f: v}) if r["index"] == 1 else r for r in recs],
       "line 2 has a malformed figure")
      for f, v in (("correct", 1), ("gold_bpb", "2.0"), ("gold_bpb", None), ("gold_bpb", float("nan")),
                   ("baseline", 1.0))],
])
def test_different_examples_and_malformed_figures_are_refused(tmp_path, change, words):
    t = (0.5, [1, 0, 1], [1.0, 2.0, 3.0])
    a = write_eval(tmp_path / "a", {"t1": t})
    b = write_eval(tmp_path / "b", {"t1": t})
    path = os.path.join(b, "t1.jsonl")
    recs = [json.loads(line) for line in open(path)]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in change(recs))
    with pytest.raises(UserError, match=words):
        paired.compare_evaluations(a, b)


def test_other_fewshot_no_common_task_and_broken_files_are_refused(tmp_path):
    t = (0.5, [1, 0, 1], [1.0, 2.0, 3.0])
    a = write_eval(tmp_path / "a", {"t1": t})
    with pytest.raises(UserError, match="-shot"):
        paired.compare_evaluations(a, write_eval(tmp_path / "b", {"t1": t}, fewshot=5))
    with pytest.raises(UserError, match="share no task"):
        paired.compare_evaluations(a, write_eval(tmp_path / "c", {"t9": t}))
    bf16 = write_eval(tmp_path / "bf16", {"t1": t})  # evaluate.py --dtype bfloat16 (its default on CUDA)
    with open(os.path.join(bf16, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(bf16, "summary.json"), "w") as f:
        json.dump({**summary, "dtype": "bfloat16"}, f)
    with pytest.raises(UserError, match="scored in float32 and .* in bfloat16; .* same --dtype"):
        paired.compare_evaluations(a, bf16)  # a: written before --dtype, float32
    pools = {}
    for name, digest in (("p1", "aa" * 32), ("p2", "bb" * 32), ("p3", "aa" * 32)):
        pools[name] = write_eval(tmp_path / name, {"t1": t}, fewshot=2)
        with open(os.path.join(pools[name], "summary.json")) as f:
            summary = json.load(f)
        summary["fewshot_source"] = {"t1": {"split": "train", "file": "t1.fewshot.jsonl", "sha256": digest}}
        with open(os.path.join(pools[name], "summary.json"), "w") as f:
            json.dump(summary, f)
    with pytest.raises(UserError, match=r"t1: .*\(sha256 aaaaaaaaaaaa\) and .*\(sha256 bbbbbbbbbbbb\).* same contexts"):
        paired.compare_evaluations(pools["p1"], pools["p2"])
    assert paired.compare_evaluations(pools["p1"], pools["p3"])[0]  # the same pool: paired
    d = write_eval(tmp_path / "d", {"t1": t})
    os.remove(os.path.join(d, "t1.jsonl"))
    with pytest.raises(UserError, match="incomplete"):
        paired.compare_evaluations(a, d)
    os.mkfifo(os.path.join(d, "t1.jsonl"))  # reading it would wait for a writer forever
    with pytest.raises(UserError, match="not a regular file"):
        paired.compare_evaluations(a, d)
    e = write_eval(tmp_path / "e", {"t1": t})
    with open(os.path.join(e, "t1.jsonl"), "a") as f:
        f.write('{"index": 3}\n')
    with pytest.raises(UserError, match="line 4 lacks"):
        paired.compare_evaluations(a, e)
    with pytest.raises(UserError, match="not a folder"):
        paired.compare_evaluations(a, str(tmp_path / "nowhere"))


def test_a_run_folder_stands_for_its_one_evaluation(tmp_path):
    t = (0.5, [1, 0, 1], [1.0, 2.0, 3.0])
    run = tmp_path / "run"
    write_eval(run / "evals" / "step_000120", {"t1": t})
    assert paired.resolve_eval_dir(str(run)) == str(run / "evals" / "step_000120")
    write_eval(run / "evals" / "step_000240", {"t1": t})
    with pytest.raises(UserError, match="holds 2 evaluations"):
        paired.resolve_eval_dir(str(run))
    with pytest.raises(UserError, match="run evaluate.py on it"):
        paired.resolve_eval_dir(str(tmp_path))


def test_a_task_name_that_is_a_path_is_refused(tmp_path):
    t = (0.5, [1, 0, 1], [1.0, 2.0, 3.0])
    a = write_eval(tmp_path / "a", {"t1": t})
    b = write_eval(tmp_path / "b", {"t1": t})
    with open(os.path.join(b, "summary.json"), "w") as f:
        json.dump({"fewshot": 0, "per_task": {"../a/t1": {}}}, f)
    with pytest.raises(UserError, match="no task file's name"):
        paired.compare_evaluations(a, b)


def test_reads_what_evaluate_py_writes(tmp_path):
    """Folders written by gptlab.evals.suite.write_results from metrics.example_record, as evaluate.py writes them."""
    from gptlab.evals import metrics, suite

    def folder(name, lls):
        req = {"choices": ["yes", "no"], "gold": 0}
        recs = [metrics.example_record(i, req, [(ll, False), (-2.0, False)], [1, 1], [4, 3], "mc", 0.5)
                for i, ll in enumerate(lls)]
        summaries = {"boolq": metrics.task_summary(recs, "mc")}
        out = str(tmp_path / name)
        suite.write_results(out, {"boolq": recs}, summaries, {**metrics.suite_summary(summaries), "fewshot": 0},
                            {"checkpoint": "x"})
        return out

    # A right on 0, 1; B right on 0, 1, 2, 3 (log-prob of the gold above -2.0)
    rows, *_ = paired.compare_evaluations(folder("a", [-1.0, -1.5, -3.0, -2.5]), folder("b", [-1.2, -1.0, -1.9, -1.1]))
    (r,) = rows
    assert (r.a_only, r.b_only) == (0, 2) and r.acc_p == pytest.approx(0.5)  # 2 (1/4)
    bits = [ll / math.log(2) / 4 for ll in (-1.0, -1.5, -3.0, -2.5)], [ll / math.log(2) / 4 for ll in
                                                                        (-1.2, -1.0, -1.9, -1.1)]
    assert r.bpb.diff == pytest.approx(statistics.mean(-x for x in bits[1]) - statistics.mean(-x for x in bits[0]))
