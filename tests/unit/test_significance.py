"""gptlab.compare.stats: the tests and sample sizes it computes (scipy.stats underneath), checked against values known
without scipy (closed forms, printed tables, published worked examples), and how the leaderboard reports two seed
groups."""
import math
import os
import statistics
from fractions import Fraction

import numpy as np
import pytest

from gptlab import compare as cmp
from gptlab.compare import scaling
from gptlab.compare import stats as st
from helpers.run_folders import cells_by_run, finished_results, make_run, metrics_rows, t_p, variant


def _t_test_at(t, df):
    """t_test_with_noise set up so that its t is `t` with `df` degrees of freedom (one value a side, se = 1)."""
    return st.t_test_with_noise([t], [0.0], st.Noise(math.sqrt(0.5), "hand", df))


def _welch_by_hand(a, b):
    """(t, df) of Welch's test in exact rational arithmetic (Welch-Satterthwaite degrees of freedom)."""
    a, b = [Fraction(x) for x in a], [Fraction(x) for x in b]
    v_a, v_b = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    t = float(statistics.mean(a) - statistics.mean(b)) / math.sqrt(v_a + v_b)
    return t, float((v_a + v_b) ** 2 / (v_a ** 2 / (len(a) - 1) + v_b ** 2 / (len(b) - 1)))


@pytest.mark.parametrize("t, df, rel", [(0.0, 3, 1e-12), (1.0, 1, 1e-12), (-2.3, 4, 1e-12), (2.776, 4, 1e-12),
                                        (10.8, 2, 1e-12), (-45.0, 7, 1e-6), (1.96, 1000, 1e-11), (0.3, 1, 1e-12),
                                        (0.548, 300, 1e-12), (3.0, 5, 1e-12)])
def test_student_t_p_values_match_the_closed_forms(t, df, rel):
    # the closed forms (t_p) lose ~7 digits to cancellation at p ~ 1e-9 (t = 45), hence rel there
    assert _t_test_at(t, df).p == pytest.approx(t_p(t, df), rel=rel, abs=1e-15)


def test_student_t_exact_values():
    # t = 0 gives p = 1; Cauchy (df 1): P(|T| >= 1) = 1/2; df 2: P(|T| >= t) = 1 - t / sqrt(2 + t²)
    assert _t_test_at(0.0, 3).p == 1.0 and _t_test_at(1.0, 1).p == pytest.approx(0.5, rel=1e-12)
    assert _t_test_at(10.8, 2).p == pytest.approx(1 - 10.8 / math.sqrt(2 + 10.8 ** 2), rel=1e-12)
    assert _t_test_at(-10.8, 2).p == _t_test_at(10.8, 2).p


@pytest.mark.parametrize("t, df", [(-2.3, 4.5), (-45.0, 7.3), (0.3, 1.8), (2.0, 17.776)])
def test_student_t_p_values_of_fractional_df_lie_between_the_whole_ones(t, df):
    """p falls as df grows at fixed t: a fractional df's p lies between the closed forms of its neighbours."""
    assert t_p(t, math.floor(df)) > _t_test_at(t, df).p > t_p(t, math.ceil(df))


def test_t_critical_values_are_the_printed_tables():
    """The two-sided 95% and 99% critical values every t table prints: the 95% band of a fit with 1 parameter of
    variance 1 (gradient 1) is t(0.975, dof) wide, and the two-sided p at the critical values is 0.05 and 0.01."""
    for dof, printed, printed_99 in ((1, 12.706, 63.657), (2, 4.303, 9.925), (3, 3.182, 5.841), (5, 2.571, 4.032),
                                     (10, 2.228, 3.169), (30, 2.042, 2.750)):
        fit = scaling.Fit("line", ["m"], np.array([1.0]), np.array([[1.0]]), float(dof), dof, lambda th, x: th[0] * x,
                          None, None)
        value, band, single = fit.predict(np.array([1.0]))
        assert (value[0], round(band[0], 3)) == (1.0, printed), (dof, band)
        assert single[0] == pytest.approx(band[0] * math.sqrt(2.0), rel=1e-7)  # + s² = rss / dof = 1
        assert round(_t_test_at(printed, dof).p, 3) == 0.05 and round(_t_test_at(printed_99, dof).p, 4) == 0.01


def test_t_test_power_matches_published_figures():
    # G*Power reference manual, "t-Test on Means", two groups, equal sizes: d = 0.5, two-tailed alpha .05, 172
    # subjects (86 a group) give actual power 0.9032
    assert round(st.t_test_power(0.5, 1.0, 86, alpha=0.05), 4) == 0.9032
    # R's power.t.test(n = 20, delta = 1) prints power = 0.8689528 (one rejection region; the other adds < 1e-6)
    assert st.t_test_power(1.0, 1.0, 20, alpha=0.05) == pytest.approx(0.8689528, abs=1e-6)
    assert st.t_test_power(-1.0, 1.0, 20, alpha=0.05) == st.t_test_power(1.0, 1.0, 20, alpha=0.05)
    # no true difference: the test rejects with probability alpha, by the definition of its critical value
    for n in (2, 5, 40):
        for alpha in (0.05, 0.01):
            assert st.t_test_power(0.0, 1.0, n, alpha) == pytest.approx(alpha, rel=1e-6)


def test_welch_t_test_matches_published_and_hand_worked_examples():
    # R's t.test(extra ~ group, data = sleep) (Student's sleep data): t = -1.8608, df = 17.776, p-value = 0.07939
    sleep = st.welch_t_test([0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0],
                            [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4])
    assert (round(sleep.t, 4), round(sleep.df, 3), round(sleep.p, 5)) == (-1.8608, 17.776, 0.07939)
    assert sleep.diff == pytest.approx(-1.58) and sleep.how == "Welch"
    # R's t.test of 10 and 10 scores (a stats.stackexchange answer): t = -1.8325, df = 17.9, p-value = 0.08356
    other = st.welch_t_test([11, 9, 10, 11, 10, 12, 9, 11, 12, 9], [11, 13, 10, 13, 12, 9, 11, 12, 12, 11])
    assert (round(other.t, 4), round(other.df, 1), round(other.p, 5)) == (-1.8325, 17.9, 0.08356)
    # by hand: variances 3 and 5/2 over 3 and 5 values, se² = 1 + 1/2, t = 2/sqrt(3/2); Welch's df = (3/2)² / (1²/2 +
    # (1/2)²/4) = 4 exactly (Student's pooled test would have 6), so p is the closed form's at df 4
    exact = st.welch_t_test([0.0, 3.0, 3.0], [-2.0, -1.0, 0.0, 1.0, 2.0])
    assert exact.t == pytest.approx(2 / math.sqrt(1.5), rel=1e-12) and exact.df == pytest.approx(4.0, rel=1e-12)
    assert exact.p == pytest.approx(t_p(2 / math.sqrt(1.5), 4), rel=1e-10) and exact.diff == 2.0
    # the seed groups of the quickstart runs: t and df by hand in exact arithmetic, p between the closed forms
    a, b = [2.6649, 2.7005, 2.7122], [2.61, 2.655, 2.6, 2.64]
    ours = st.welch_t_test(a, b)
    t, df = _welch_by_hand(a, b)
    assert ours.t == pytest.approx(t, rel=1e-12) and ours.df == pytest.approx(df, rel=1e-12) and 4 < df < 5
    assert t_p(t, 4) > ours.p > t_p(t, 5) and ours.diff == pytest.approx(sum(a) / 3 - sum(b) / 4)


def test_welch_t_test_of_identical_values():
    assert st.welch_t_test([1.0, 1.0], [1.0, 1.0, 1.0]).p == 1.0
    same = st.welch_t_test([1.0, 1.0], [0.5, 0.5])
    assert (same.t, same.p, same.df) == (math.inf, 0.0, 2.0)


def test_t_test_with_known_noise_is_the_classic_pooled_t():
    """Two groups with equal spread: the pooled std and its degrees of freedom make it the classic Student test,
    worked by hand: variances 0.01 each, pooled std 0.1 with 4 df, t = -0.3 / (0.1 sqrt(2/3)) = -3.6742."""
    a, b = [1.0, 1.2, 1.1], [1.3, 1.5, 1.4]
    pooled = math.sqrt((statistics.variance(a) * 2 + statistics.variance(b) * 2) / 4)
    assert pooled == pytest.approx(0.1, rel=1e-12)
    ours = st.t_test_with_noise(a, b, st.Noise(pooled, "hand", 4))
    t = -0.3 / (0.1 * math.sqrt(2 / 3))
    assert ours.t == pytest.approx(t, rel=1e-12) and ours.p == pytest.approx(t_p(t, 4), rel=1e-10)
    assert round(ours.t, 4) == -3.6742 and ours.df == 4 and ours.how == "noise"


@pytest.mark.parametrize("k_a, n_a, k_b, n_b", [(3300, 10000, 3000, 10000), (272, 1000, 263, 1000),
                                                (26, 100, 25, 100), (500, 1200, 430, 900)])
def test_two_proportion_test_matches_pearson_chi_square(k_a, n_a, k_b, n_b):
    """The pooled z-test squared is Pearson's chi-square without continuity correction on the 2x2 table, by hand
    N (ad - bc)² / (row and column totals); with 1 degree of freedom chi-square is Z², so p = erfc(sqrt(chi²/2))."""
    a, b, c, d = k_a, n_a - k_a, k_b, n_b - k_b
    chi2 = (a + b + c + d) * (a * d - b * c) ** 2 / ((a + b) * (c + d) * (a + c) * (b + d))
    ours = st.two_proportion_test(k_a, n_a, k_b, n_b)
    assert ours.z ** 2 == pytest.approx(chi2, rel=1e-10) and ours.p == pytest.approx(math.erfc(math.sqrt(chi2 / 2)),
                                                                                     rel=1e-9)
    assert ours.diff == pytest.approx(k_a / n_a - k_b / n_b) and math.copysign(1, ours.z) == math.copysign(1, ours.diff)


def test_runs_needed_textbook_values():
    # Cohen (1988), table 2.4.1, two-sided alpha 0.05, power 0.80: n = 64 per group for d = 0.5, 26 for d = 0.8
    assert st.runs_needed(0.5, 1.0, alpha=0.05, power=0.8) == 64
    assert st.runs_needed(0.8, 1.0, alpha=0.05, power=0.8) == 26
    # G*Power reference manual: d = 0.5, two-tailed alpha .05, power .9: total sample size 172 (86 a group)
    assert st.runs_needed(0.5, 1.0, alpha=0.05, power=0.9) == 86
    # R's power.t.test(power = .90, delta = 1): n = 22.02110; power.t.test(power = 0.80, delta = 1): n = 16.71477
    assert st.runs_needed(1.0, 1.0, alpha=0.05, power=0.9) == 23
    assert st.runs_needed(1.0, 1.0, alpha=0.05, power=0.8) == 17


@pytest.mark.parametrize("diff, std", [(0.01, 0.0247), (0.5, 1.0), (0.02, 0.01), (0.03, 0.01), (1.0, 1.0)])
def test_runs_needed_is_the_smallest_n_with_80_percent_power_at_p_001(diff, std):
    n = st.runs_needed(diff, std)
    # t_test_power is checked against published figures above
    assert st.t_test_power(diff, std, n, 0.01) >= 0.8
    assert n == 2 or st.t_test_power(diff, std, n - 1, 0.01) < 0.8
    # Guenther (1981, The American Statistician 35:243), n ~ 2 (z_.995 + z_.80)² / d² + z_.995² / 4 with the normal
    # table's z_.995 = 2.575829, z_.80 = 0.841621: within 1 of the t-test's exact n
    approx = 2 * (2.575829 + 0.841621) ** 2 / (diff / std) ** 2 + 2.575829 ** 2 / 4
    assert n - 1 < approx <= n, (n, approx)


def _group(root, name, seed_values, hellaswag, **changes):
    for i, (seed, bpb) in enumerate(seed_values):
        config = variant(model_name=name, seed=seed, **changes)
        make_run(root, f"2026010{i + 1}_0{len(name)}0000_{name}", config, metrics_rows(10, bpb, hellaswag[i]),
                 finished_results(config, bpb, hellaswag[i]))


def test_two_seed_groups_are_compared_with_welch_and_pooled_hellaswag(tmp_path):
    """Base (3 seeds) and Idea (3 seeds): Welch's t-test on their val bpb (t and df by hand), HellaSwag answers
    pooled over the seeds (3 x 10042 each side) in a two-proportion test (Pearson's chi-square by hand); the rows
    say better, p = ...; Base is the baseline (the docs' name for it, not the better Idea) and the runs-needed line
    uses its noise (the reference group's)."""
    root = str(tmp_path)
    base, idea = [1.300, 1.310, 1.305], [1.270, 1.281, 1.276]
    _group(root, "Base", list(zip((0, 1, 2), base)), [0.300, 0.302, 0.298])
    _group(root, "Idea", list(zip((0, 1, 2), idea)), [0.310, 0.312, 0.311], model_dim=192)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    t, df = _welch_by_hand(idea, base)
    assert board.reference.model_name == "Base" and board.reference.val_bpb == 1.300  # the first started
    (comparison,) = board.comparisons
    assert comparison.bpb.t == pytest.approx(t, rel=1e-12) and comparison.bpb.df == pytest.approx(df, rel=1e-12)
    assert 3 < df < 4 and t_p(t, 3) > comparison.bpb.p > t_p(t, 4)
    cells = cells_by_run(board)
    p_text = f"p = {comparison.bpb.p:.2g}"
    assert cells[[n for n in cells if n.endswith("_Idea") and cells[n]["Val bpb"] == "1.2700"][0]][
        "bpb vs baseline"] == f"-0.0300 better, {p_text}"
    k_base = round(0.300 * 10042) + round(0.302 * 10042) + round(0.298 * 10042)
    k_idea = round(0.310 * 10042) + round(0.312 * 10042) + round(0.311 * 10042)
    a, b, c, d = k_base, 30126 - k_base, k_idea, 30126 - k_idea
    chi2 = 60252 * (a * d - b * c) ** 2 / (30126 * 30126 * (a + c) * (b + d))
    assert comparison.hellaswag.p == pytest.approx(math.erfc(math.sqrt(chi2 / 2)), rel=1e-9)
    assert comparison.hs_answers == (30126, 30126)
    text = cmp.render_text(board)
    assert "Settings compared" in text and f"Welch t = {t:.2f}, df = {df:.1f}, {p_text}" in text
    std = statistics.stdev(base)
    n = st.runs_needed(0.01, std)
    assert st.t_test_power(0.01, std, n, 0.01) >= 0.8 > st.t_test_power(0.01, std, n - 1, 0.01)
    assert f"{n} runs per side" in board.runs_needed and "p < 0.01 with 80% power" in board.runs_needed


def test_alpha_moves_the_verdict(tmp_path):
    """The same comparison (p between 0.01 and 0.05) is 'worse' at --alpha 0.05, not at 0.01. Both groups have
    variance 2.5e-5, so Welch's df is 2 (3 - 1) = 4 and t = 0.015 / sqrt(2 x 2.5e-5 / 3) = 3.674: p from the closed
    form."""
    root = str(tmp_path)
    base, idea = [1.300, 1.310, 1.305], [1.285, 1.295, 1.290]
    p = t_p(0.015 / math.sqrt(2 * 2.5e-5 / 3), 4)
    assert 0.01 < p < 0.05
    _group(root, "Base", list(zip((0, 1, 2), base)), [0.3] * 3)
    _group(root, "Idea", list(zip((0, 1, 2), idea)), [0.3] * 3, model_dim=192)
    for alpha, word in ((0.05, "better"), (0.01, "not distinguishable")):
        board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, alpha=alpha)["board"]
        row = cells_by_run(board)[os.path.basename(sorted(p for p in os.listdir(root) if p.endswith("_Idea"))[0])]
        assert row["bpb vs baseline"].startswith(f"-0.0150 {word}, p = {p:.2g}"), row["bpb vs baseline"]
