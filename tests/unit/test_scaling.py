"""Scaling fits (gptlab.compare.scaling) on synthetic runs drawn from a known law (tests/helpers/scaling_law.py): the
fit recovers the law, it is the least-squares fit, its standard errors are s²(JᵀJ)⁻¹ with the law's own
derivatives, and the 95% band covers the truth. compare_experiments.py --scaling: tests/e2e/test_scaling_e2e.py."""
import math

import numpy as np
import pytest

from gptlab.compare import scaling
from gptlab.core.errors import UserError
from helpers.run_folders import metrics_rows
from helpers.scaling_law import A, ALPHA, E, FLOPS, true_loss

T_975_5 = 2.571  # Student's t(0.975, 5 degrees of freedom), as t tables print it (8 runs - 3 parameters)


def test_fit_recovers_the_law_without_noise():
    fit = scaling.fit_compute_law(FLOPS, true_loss(FLOPS))
    e, a, alpha = fit.theta
    assert e == pytest.approx(E, rel=1e-6) and alpha == pytest.approx(ALPHA, rel=1e-6)
    assert a * fit.scale ** alpha == pytest.approx(A, rel=1e-5)


def _compute_law_jacobian(theta, c):
    """d/d(E, a, α) of E + a c^-α, by hand: (1, c^-α, -a c^-α ln c)."""
    _, a, alpha = theta
    return np.stack([np.ones_like(c), c ** -alpha, -a * c ** -alpha * np.log(c)], axis=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_fit_is_the_least_squares_fit_and_covers_the_truth(seed):
    rng = np.random.default_rng(seed)
    bpb = true_loss(FLOPS) + rng.normal(0, 0.003, FLOPS.size)
    fit = scaling.fit_compute_law(FLOPS, bpb)
    c = FLOPS / fit.scale
    jac = _compute_law_jacobian(fit.theta, c)
    residual = bpb - scaling.compute_law(fit.theta, c)
    # the least-squares fit: the residual is orthogonal to every derivative (normal equations), and for its exponent
    # E and a are the linear least-squares solution (numpy), whose sum of squares is lowest at that exponent
    assert np.all(np.abs(jac.T @ residual) <= 1e-8 * np.linalg.norm(jac, axis=0) * np.linalg.norm(residual))
    assert fit.rss == pytest.approx(float(residual @ residual), rel=1e-12) and fit.dof == 5

    def linear_fit(alpha):
        basis = np.stack([np.ones_like(c), c ** -alpha], axis=1)
        coef, *_ = np.linalg.lstsq(basis, bpb, rcond=None)
        return coef, float(np.sum((bpb - basis @ coef) ** 2))
    assert linear_fit(fit.theta[2])[0] == pytest.approx(fit.theta[:2], rel=1e-7)
    assert linear_fit(fit.theta[2] - 1e-3)[1] > fit.rss < linear_fit(fit.theta[2] + 1e-3)[1]
    # the covariance s² (JᵀJ)⁻¹, s² = residual sum of squares / (8 runs - 3 parameters), J the law's derivatives
    cov = fit.rss / 5 * np.linalg.inv(jac.T @ jac)
    assert fit.std_errors() == pytest.approx(np.sqrt(np.diag(cov)), rel=1e-5)
    errors = fit.std_errors()
    assert abs(fit.theta[0] - E) < 4 * errors[0] and abs(fit.theta[2] - ALPHA) < 4 * errors[2]
    # the band at c = 1 (C = the scale): gradient (1, c^-alpha, -a c^-alpha ln c) = (1, 1, 0), so its variance is
    # cov[0,0] + 2 cov[0,1] + cov[1,1], times Student's t(0.975, 8 runs - 3 parameters)
    _, band, single = fit.predict(np.array([1.0]))
    variance = cov[0, 0] + 2 * cov[0, 1] + cov[1, 1]
    assert band[0] == pytest.approx(T_975_5 * math.sqrt(variance), rel=1e-3)
    assert single[0] == pytest.approx(T_975_5 * math.sqrt(variance + fit.rss / 5), rel=1e-3)
    # elsewhere (an extrapolation, c = 30) the exponent's derivative counts too
    _, band, single = fit.predict(np.array([30.0]))
    grad = _compute_law_jacobian(fit.theta, np.array([30.0]))[0]
    assert band[0] == pytest.approx(T_975_5 * math.sqrt(grad @ cov @ grad), rel=1e-3)
    assert single[0] == pytest.approx(T_975_5 * math.sqrt(grad @ cov @ grad + fit.rss / 5), rel=1e-3)


def test_the_95_percent_intervals_cover_95_percent_of_the_time():
    """200 synthetic sets of 8 runs (noise std 0.003): the fit's 95% band at C = 10^16.5 holds the true curve, and
    the interval for one run holds a new noisy run, in 90-99% of the sets (binomial: 95% +- 3 standard errors)."""
    at = 10 ** 16.5
    band_hits = run_hits = 0
    for seed in range(200):
        rng = np.random.default_rng(1000 + seed)
        fit = scaling.fit_compute_law(FLOPS, true_loss(FLOPS) + rng.normal(0, 0.003, FLOPS.size))
        value, band, single = fit.predict(np.array([at / fit.scale]))
        band_hits += abs(value[0] - true_loss(at)) <= band[0]
        run_hits += abs(value[0] - (true_loss(at) + rng.normal(0, 0.003))) <= single[0]
    assert 0.90 <= band_hits / 200 <= 0.99 and 0.90 <= run_hits / 200 <= 0.99, (band_hits, run_hits)


def test_chinchilla_fit_recovers_a_known_law():
    n = np.array([1e6, 1e6, 1e6, 4e6, 4e6, 4e6, 1.6e7, 1.6e7, 1.6e7])
    d = np.array([1e8, 4e8, 1.6e9] * 3)
    law = 1.7 + 400 / n ** 0.34 + 410 / d ** 0.28
    fit = scaling.fit_chinchilla_law(n, d, law)
    e, a, alpha, b, beta = fit.theta
    assert (e, alpha, beta) == pytest.approx((1.7, 0.34, 0.28), rel=1e-4)
    assert a * fit.scales[0] ** alpha == pytest.approx(400, rel=1e-3)
    assert b * fit.scales[1] ** beta == pytest.approx(410, rel=1e-3)
    # Hoffmann et al. eq. 4: N_opt = G (C/6)^(beta/(alpha+beta)), G = (alpha A / (beta B))^(1/(alpha+beta))
    flops = 1e17
    n_fn, d_fn, loss_fn = scaling.compute_optimal(fit, flops)
    g = (0.34 * 400 / (0.28 * 410)) ** (1 / 0.62)
    assert n_fn(fit.theta) == pytest.approx(g * (flops / 6) ** (0.28 / 0.62), rel=1e-3)
    assert n_fn(fit.theta) * d_fn(fit.theta) == pytest.approx(flops / 6, rel=1e-9)


def test_noisy_chinchilla_fit_has_the_least_squares_covariance():
    """The same grid with noise 0.002 (4 degrees of freedom): residual orthogonal to the law's derivatives, and the
    standard errors are s² (JᵀJ)⁻¹ with J by hand: (1, n^-α, -a n^-α ln n, d^-β, -b d^-β ln d)."""
    n = np.array([1e6, 1e6, 1e6, 4e6, 4e6, 4e6, 1.6e7, 1.6e7, 1.6e7])
    d = np.array([1e8, 4e8, 1.6e9] * 3)
    law = 1.7 + 400 / n ** 0.34 + 410 / d ** 0.28 + np.random.default_rng(1).normal(0, 0.002, 9)
    fit = scaling.fit_chinchilla_law(n, d, law)
    _, a, alpha, b, beta = fit.theta
    n_s, d_s = fit.x[:, 0], fit.x[:, 1]
    jac = np.stack([np.ones(9), n_s ** -alpha, -a * n_s ** -alpha * np.log(n_s), d_s ** -beta,
                    -b * d_s ** -beta * np.log(d_s)], axis=1)
    residual = law - scaling.chinchilla_law(fit.theta, fit.x)
    assert np.all(np.abs(jac.T @ residual) <= 1e-8 * np.linalg.norm(jac, axis=0) * np.linalg.norm(residual))
    assert fit.dof == 4 and fit.std_errors() == pytest.approx(
        np.sqrt(np.diag(fit.rss / 4 * np.linalg.inv(jac.T @ jac))), rel=1e-5)
    assert abs(fit.theta[2] - 0.34) < 4 * fit.std_errors()[2] and abs(fit.theta[4] - 0.28) < 4 * fit.std_errors()[4]


def test_no_degree_of_freedom_no_interval():
    """Three runs for three parameters: the law goes through them, no covariance and no interval."""
    flops = FLOPS[::3]
    fit = scaling.fit_compute_law(flops, true_loss(flops))
    assert fit.dof == 0 and fit.cov is None and fit.std_errors() is None
    value, band, single = fit.predict(np.array([1.0]))
    assert band is None and single is None and value[0] == pytest.approx(true_loss(fit.scale), rel=1e-6)
    points = [scaling.ScalingPoint(f"r{i}", f, "results.json", None, None, float(true_loss(f)), None, None, None)
              for i, f in enumerate(flops)]
    assert "no degree of freedom left: no interval" in scaling.render_scaling(scaling.ScalingReport(points, [], fit))


@pytest.mark.parametrize("text, expected", [("1e18", ("flops", 1e18)), ("2.5e17 FLOPs", ("flops", 2.5e17)),
                                            ("50gpuh", ("gpu_hours", 50.0)), ("8 GPU-h", ("gpu_hours", 8.0)),
                                            ("$20", ("usd", 20.0)), ("300 usd", ("usd", 300.0))])
def test_budget_parsing(text, expected):
    assert scaling.parse_budget(text) == expected


@pytest.mark.parametrize("text", ["lots", "-5", "10 parsecs", "$", "0"])
def test_bad_budget_is_one_clear_error(text):
    with pytest.raises(UserError, match="is not a budget: write FLOPs"):
        scaling.parse_budget(text)


def test_training_flops_of_older_runs_come_from_their_metrics():
    """Without train_flops in results.json: the sum over step rows of tflops_per_gpu x step_time_s x world size
    (here 40 steps x 0.5 s x 2 TFLOP/s x 2 GPUs = 80e12), else 6 x parameters x tokens."""
    from gptlab.compare.runs import _train_flops
    from gptlab.train.records import Metrics

    rows = [dict(r, tflops_per_gpu=2.0) if r.get("train_loss") is not None else r for r in metrics_rows(40, 1.3, 0.3)]

    class R:
        world_size, n_params, tokens = 2, 1e6, 1e8
    assert _train_flops({}, Metrics(rows=rows), R) == (pytest.approx(80e12), "metrics.csv")
    assert _train_flops({}, Metrics(rows=metrics_rows(40, 1.3, 0.3)), R) == (6e14, "6ND")
    assert _train_flops({"train_flops": 5e12}, Metrics(rows=rows), R) == (5e12, "results.json")
    assert math.isclose(_train_flops({}, Metrics(rows=rows), R)[0], 80e12)


def test_runs_that_do_not_pin_the_law_down_are_called_so():
    """Five runs over a factor of 4 in FLOPs with noise 0.02: the exponent is not determined (curve_fit without
    bounds puts its standard error above it; bounded, it runs to the bound), so the fit is called so and shows no
    interval (it used to print the intervals with a warning)."""
    rng = np.random.default_rng(3)
    flops = np.geomspace(1e15, 4e15, 5)
    points = [scaling.ScalingPoint(f"r{i}", f, "results.json", None, None, float(b), None, None, None)
              for i, (f, b) in enumerate(zip(flops, true_loss(flops) + rng.normal(0, 0.02, 5)))]
    fit = scaling.fit_compute_law([p.flops for p in points], [p.bpb for p in points])
    from scipy.optimize import curve_fit
    theta, cov = curve_fit(lambda c, e, a, alpha: e + a * c ** -alpha, flops / fit.scale, [p.bpb for p in points],
                           p0=[2, 0.1, 1], maxfev=20_000)
    assert np.any(np.sqrt(np.diag(cov)) > np.abs(theta)) and fit.problem and fit.std_errors() is None
    text = scaling.render_scaling(scaling.ScalingReport(points, [], fit))
    assert "these runs do not pin the law down" in text and "±" not in text
