"""gptlab.compare.stats: the distributions, tests and sample sizes it computes by hand, checked against scipy.stats
(a test dependency) and textbook values, and how the leaderboard reports two seed groups."""
import math
import os

import pytest
from scipy import special, stats

from gptlab import compare as cmp
from gptlab.compare import stats as st
from test_compare import cells_by_run, finished_results, make_run, metrics_rows, variant


@pytest.mark.parametrize("a, b, x", [(0.5, 0.5, 0.3), (2.5, 0.5, 0.9), (10.0, 3.0, 0.2), (1.0, 40.0, 0.01),
                                     (150.0, 0.5, 0.999), (3.0, 3.0, 0.5), (0.7, 12.0, 0.0), (4.0, 2.0, 1.0)])
def test_incomplete_beta_matches_scipy(a, b, x):
    assert st.incomplete_beta(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("t, df", [(0.0, 3), (1.0, 1), (-2.3, 4.5), (2.776, 4), (10.8, 2), (-45.0, 7.3),
                                   (1.96, 1000), (0.3, 0.8)])
def test_student_t_matches_scipy(t, df):
    assert st.t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), rel=1e-10, abs=1e-15)
    assert st.t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-10, abs=1e-15)


@pytest.mark.parametrize("q, df", [(0.975, 1), (0.975, 2), (0.995, 3.7), (0.8, 10), (0.025, 5), (0.9995, 30)])
def test_t_quantile_matches_scipy(q, df):
    assert st.t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9)


def test_t_quantile_textbook_values():
    # the two-sided 95% critical values every t table prints
    assert [round(st.t_quantile(0.975, df), 3) for df in (1, 2, 3, 10, 30)] == [12.706, 4.303, 3.182, 2.228, 2.042]


@pytest.mark.parametrize("t, df, shift", [(2.0, 5, 1.5), (2.0, 200, 1.5), (-2.0, 2, 1.5), (3.0, 18, 2.8),
                                          (1.0, 3, 0.0), (-4.0, 40, -1.0)])
def test_noncentral_t_matches_scipy(t, df, shift):
    assert st.noncentral_t_cdf(t, df, shift) == pytest.approx(stats.nct.cdf(t, df, shift), abs=1e-7)


def test_welch_t_test_matches_scipy():
    a, b = [2.6649, 2.7005, 2.7122], [2.61, 2.655, 2.6, 2.64]
    ours = st.welch_t_test(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert ours.t == pytest.approx(ref.statistic, rel=1e-12) and ours.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert ours.df == pytest.approx(ref.df, rel=1e-12) and ours.diff == pytest.approx(sum(a) / 3 - sum(b) / 4)


def test_t_test_with_known_noise_matches_scipy_pooled_t():
    """Two groups with equal spread: the pooled std and its degrees of freedom make it the classic Student test."""
    a, b = [1.0, 1.2, 1.1], [1.3, 1.5, 1.4]
    pooled = math.sqrt((st.statistics.variance(a) * 2 + st.statistics.variance(b) * 2) / 4)
    ours = st.t_test_with_noise(a, b, st.Noise(pooled, "hand", 4))
    ref = stats.ttest_ind(a, b, equal_var=True)
    assert ours.t == pytest.approx(ref.statistic, rel=1e-12) and ours.p == pytest.approx(ref.pvalue, rel=1e-9)


@pytest.mark.parametrize("k_a, n_a, k_b, n_b", [(3300, 10000, 3000, 10000), (272, 1000, 263, 1000),
                                                (26, 100, 25, 100), (500, 1200, 430, 900)])
def test_two_proportion_test_matches_pearson_chi_square(k_a, n_a, k_b, n_b):
    """The pooled z-test squared is Pearson's chi-square without continuity correction on the 2x2 table."""
    chi2, p, _, _ = stats.chi2_contingency([[k_a, n_a - k_a], [k_b, n_b - k_b]], correction=False)
    ours = st.two_proportion_test(k_a, n_a, k_b, n_b)
    assert ours.z ** 2 == pytest.approx(chi2, rel=1e-10) and ours.p == pytest.approx(p, rel=1e-9)
    assert ours.diff == pytest.approx(k_a / n_a - k_b / n_b)


def test_runs_needed_textbook_values():
    # Cohen (1988), table 2.4.1, two-sided alpha 0.05, power 0.80: n = 64 per group for d = 0.5, 26 for d = 0.8
    assert st.runs_needed(0.5, 1.0, alpha=0.05, power=0.8) == 64
    assert st.runs_needed(0.8, 1.0, alpha=0.05, power=0.8) == 26


def _exact_power(diff, std, n, alpha):
    df = 2 * n - 2
    crit, shift = stats.t.ppf(1 - alpha / 2, df), diff / (std * math.sqrt(2 / n))
    return stats.nct.sf(crit, df, shift) + stats.nct.cdf(-crit, df, shift)


@pytest.mark.parametrize("diff, std", [(0.01, 0.0247), (0.5, 1.0), (0.02, 0.01), (0.03, 0.01), (1.0, 1.0)])
def test_runs_needed_is_the_smallest_n_with_80_percent_power_at_p_001(diff, std):
    n = st.runs_needed(diff, std)
    assert _exact_power(diff, std, n, 0.01) >= 0.8
    assert n == 2 or _exact_power(diff, std, n - 1, 0.01) < 0.8


def _group(root, name, seed_values, hellaswag, **changes):
    for i, (seed, bpb) in enumerate(seed_values):
        config = variant(model_name=name, seed=seed, **changes)
        make_run(root, f"2026010{i + 1}_0{len(name)}0000_{name}", config, metrics_rows(10, bpb, hellaswag[i]),
                 finished_results(config, bpb, hellaswag[i]))


def test_two_seed_groups_are_compared_with_welch_and_pooled_hellaswag(tmp_path):
    """Base (3 seeds) and Idea (3 seeds): Welch's t-test on their val bpb (scipy), HellaSwag answers pooled over the
    seeds (3 x 10042 each side) in a two-proportion test (Pearson's chi-square); the rows say better, p = ...;
    the runs-needed line uses Idea's noise (the reference group's)."""
    root = str(tmp_path)
    base, idea = [1.300, 1.310, 1.305], [1.270, 1.281, 1.276]
    _group(root, "Base", list(zip((0, 1, 2), base)), [0.300, 0.302, 0.298])
    _group(root, "Idea", list(zip((0, 1, 2), idea)), [0.310, 0.312, 0.311], model_dim=192)
    board = cmp.compare([], experiments_dir=root, no_plot=True, write=False)["board"]
    ref = stats.ttest_ind(base, idea, equal_var=False)
    assert board.reference.model_name == "Idea" and board.reference.val_bpb == 1.270
    cells = cells_by_run(board)
    p_text = f"p = {ref.pvalue:.2g}"
    assert cells[[n for n in cells if n.endswith("_Base") and cells[n]["Val bpb"] == "1.3100"][0]][
        "bpb vs best"] == f"+0.0400 worse, {p_text}"
    (comparison,) = board.comparisons
    assert comparison.bpb.p == pytest.approx(ref.pvalue, rel=1e-9)
    k_base = round(0.300 * 10042) + round(0.302 * 10042) + round(0.298 * 10042)
    k_idea = round(0.310 * 10042) + round(0.312 * 10042) + round(0.311 * 10042)
    _, p_hs, _, _ = stats.chi2_contingency([[k_base, 30126 - k_base], [k_idea, 30126 - k_idea]], correction=False)
    assert comparison.hellaswag.p == pytest.approx(p_hs, rel=1e-9) and comparison.hs_answers == (30126, 30126)
    text = cmp.render_text(board)
    assert "Seed groups compared" in text and f"Welch t = {ref.statistic:.2f}, df = {ref.df:.1f}, {p_text}" in text
    std = stats.tstd(idea)
    n = st.runs_needed(0.01, std)
    assert _exact_power(0.01, std, n, 0.01) >= 0.8 > _exact_power(0.01, std, n - 1, 0.01)
    assert f"{n} runs per side" in board.runs_needed and "p < 0.01 with 80% power" in board.runs_needed


def test_alpha_moves_the_verdict(tmp_path):
    """The same comparison (p between 0.01 and 0.05 by scipy) is 'worse' at --alpha 0.05, not at 0.01."""
    root = str(tmp_path)
    base, idea = [1.300, 1.310, 1.305], [1.285, 1.295, 1.290]
    p = stats.ttest_ind(base, idea, equal_var=False).pvalue
    assert 0.01 < p < 0.05
    _group(root, "Base", list(zip((0, 1, 2), base)), [0.3] * 3)
    _group(root, "Idea", list(zip((0, 1, 2), idea)), [0.3] * 3, model_dim=192)
    for alpha, word in ((0.05, "worse"), (0.01, "not distinguishable")):
        board = cmp.compare([], experiments_dir=root, no_plot=True, write=False, alpha=alpha)["board"]
        row = cells_by_run(board)[os.path.basename(sorted(p for p in os.listdir(root) if p.endswith("_Base"))[0])]
        assert row["bpb vs best"].startswith(f"+0.0150 {word}, p = {p:.2g}"), row["bpb vs best"]
