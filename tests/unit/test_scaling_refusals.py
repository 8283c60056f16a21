"""Scaling fits that refuse to lie (issue 39): a fit the runs do not determine (an exponent at its bound, a
singular Jacobian, too few distinct sizes or lengths, a budget far beyond the runs) says so in one line and shows
no interval, and scaling.png's axes come from the data; a fit they do determine is the least-squares fit
scipy's curve_fit finds, and its band agrees with a bootstrap over runs done here."""
import os

import numpy as np
import pytest

from gptlab import compare as cmp
from gptlab.compare import scaling
from helpers.run_folders import finished_results, make_run, metrics_rows, variant
from helpers.scaling_law import FLOPS, STEP_BPB, STEP_PARAMS, STEP_TOKENS, true_loss


def _points(flops, bpb, n_params=None, tokens=None):
    n_params = [None] * len(flops) if n_params is None else n_params
    tokens = [None] * len(flops) if tokens is None else tokens
    return [scaling.ScalingPoint(f"r{i}", float(f), "results.json", n, d, float(b), None, None, None)
            for i, (f, b, n, d) in enumerate(zip(flops, bpb, n_params, tokens))]


def _step_lab(root):
    """The hand-built 3 sizes x 2 lengths sweep as run folders (C = 6 N D), each run at 1e15 FLOP/s."""
    for i, (n, d, bpb) in enumerate(zip(STEP_PARAMS, STEP_TOKENS, STEP_BPB)):
        config = variant(model_name=f"Scale{i}", num_layers=i + 2, n_params=int(n))
        make_run(root, f"20260101_00000{i}_Scale{i}", config, metrics_rows(10, bpb, 0.3),
                 finished_results(config, bpb, 0.3, tokens=int(d), train_flops=6.0 * n * d,
                                  wall_time_s=6.0 * n * d / 1e15))


def test_a_known_law_is_curve_fits_least_squares_fit_and_its_band_agrees_with_a_bootstrap():
    rng = np.random.default_rng(7)
    bpb = true_loss(FLOPS) + rng.normal(0, 0.003, FLOPS.size)
    fit = scaling.fit_compute_law(FLOPS, bpb)
    assert fit.problem is None
    from scipy.optimize import curve_fit

    def law(c, e, a, alpha):
        return e + a * c ** -alpha
    c = FLOPS / fit.scale
    theta, _ = curve_fit(law, c, bpb, p0=[1.0, 1.0, 0.5], maxfev=50_000)
    assert fit.theta == pytest.approx(theta, rel=1e-4)
    # the 95% band at the middle of the runs against a residual bootstrap over the 8 runs (refits by curve_fit)
    at = np.array([1.0])
    value, band, _ = fit.predict(at)
    fitted = law(c, *theta)
    residual = (bpb - fitted) * np.sqrt(8 / 5)  # leverage-free rescaling of residuals to the noise's variance
    boot = []
    for _ in range(400):
        sample = fitted + rng.choice(residual, 8, replace=True)
        th, _ = curve_fit(law, c, sample, p0=theta, maxfev=50_000)
        boot.append(law(at, *th)[0])
    # the band's standard error (half-width / t(0.975, 5) = 2.571, a t table's) against the bootstrap's
    assert band[0] / 2.571 == pytest.approx(np.std(boot, ddof=1), rel=0.25)
    # the exponent's 95% profile-likelihood interval: where the RSS minimised over (E, a) at fixed α (numpy's
    # lstsq) rises to RSS·(1 + F(0.95; 1, 5)/5), F's 0.95 quantile 6.608 from an F table; ends found by brentq
    from scipy.optimize import brentq

    def profile(alpha):
        basis = np.stack([np.ones_like(c), c ** -alpha], axis=1)
        coef, *_ = np.linalg.lstsq(basis, bpb, rcond=None)
        return float(np.sum((bpb - basis @ coef) ** 2)) - fit.rss * (1 + 6.608 / 5)
    low, high, at_bound = scaling.profile_interval(fit, 0)
    assert low == pytest.approx(brentq(profile, 0.01, fit.theta[2]), abs=0.003) and not at_bound
    assert high == pytest.approx(brentq(profile, fit.theta[2], 1.0), abs=0.003)


def test_the_degenerate_three_by_two_sweep_is_refused_in_one_line_with_no_interval(tmp_path):
    root = str(tmp_path)
    _step_lab(root)
    out = cmp.compare([], experiments_dir=root, no_plot=True, scaling=True, budget="0.05gpuh")["scaling"]
    text = scaling.render_scaling(out)
    lines = [l for l in text.splitlines() if "do not pin the law down" in l]
    assert len(lines) == 1 and "α ran to its bound" in lines[0] and "no intervals are shown" in lines[0]
    assert "±" not in text and "band" not in text and "interval for one run" not in text
    assert "L(C): no prediction: these runs do not determine the law" in text
    # 2 lengths: Chinchilla's B, β and E are not separately determined, so it is not fitted
    assert out.chinchilla_fit is None and "3 distinct sizes and 2 distinct lengths" in text


def test_chinchilla_on_two_lengths_is_not_determined_when_fitted_directly():
    fit = scaling.fit_chinchilla_law(STEP_PARAMS, STEP_TOKENS, STEP_BPB)
    assert fit.problem and fit.std_errors() is None and fit.predict(None, lambda th, x: th[0])[1] is None


def test_a_singular_jacobian_is_named():
    """a = 0: the law no longer depends on α, so J's α column is zero (rank 2 of 3)."""
    c = FLOPS / 1e16
    fit = scaling.Fit("compute", ["E", "a", "alpha"], np.array([2.0, 0.0, 0.5]), np.eye(3), 1.0, 5,
                      scaling.compute_law, c, np.full(8, 2.0), (2,))
    fit.scale = 1e16
    assert "Jacobian is singular or ill-conditioned" in scaling.fit_problem(fit, ("E", "A", "α"))


def test_overflowing_parameters_are_named():
    c = FLOPS / 1e16
    fit = scaling.Fit("compute", ["E", "a", "alpha"], np.array([2.0, 1.0, 2.9]), np.eye(3), 1.0, 5,
                      scaling.compute_law, c, np.full(8, 2.0), (2,))
    fit.scale = 1e200
    assert scaling.fit_problem(fit, ("E", "A", "α")) == "its parameters overflow (A = inf)"


def test_a_budget_farther_beyond_the_runs_than_their_span_gets_no_interval():
    """The runs span 1e15 to 1e18 (1000×): 1e22 is 10^4× beyond, so no band; 3e18 (3×) keeps one."""
    bpb = true_loss(FLOPS) + np.random.default_rng(0).normal(0, 0.002, FLOPS.size)
    points = _points(FLOPS, bpb)
    fit = scaling.fit_compute_law(FLOPS, bpb)
    far = scaling.render_scaling(scaling.ScalingReport(points, [], fit, budget=(1e22, "1e+22 FLOPs")))
    line = next(l for l in far.splitlines() if "L(C): val bpb" in l)
    assert "no interval: 1e+22 FLOPs is 1e+04× beyond the largest fitted run" in line and "[" not in line
    near = scaling.render_scaling(scaling.ScalingReport(points, [], fit, budget=(3e18, "3e+18 FLOPs")))
    assert "95% band of the fit [" in near


def test_scaling_png_axes_come_from_the_data(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    root = str(tmp_path)
    _step_lab(root)
    report = cmp.compare([], experiments_dir=root, no_plot=True, scaling=True, budget="0.05gpuh")["scaling"]
    fig = scaling.draw_scaling(plt, report)
    low, high = fig.axes[0].get_ylim()
    spread = STEP_BPB.max() - STEP_BPB.min()
    assert low == pytest.approx(STEP_BPB.min() - 0.1 * spread) and high == pytest.approx(STEP_BPB.max() + 0.1 * spread)
    plt.close(fig)
    assert os.path.exists(scaling.plot_scaling(report, str(tmp_path / "s.png")))
