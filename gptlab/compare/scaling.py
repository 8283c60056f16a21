"""Scaling laws fitted to finished runs: L(C) = E + A·C^(−α) over training FLOPs, and Chinchilla's
L(N, D) = E + A/N^α + B/D^β over parameters and tokens (Hoffmann et al. 2022, eq. 2), with 95% intervals.

Fitting: least squares on val bpb (scipy.optimize.curve_fit, trust region, exponents within [0, MAX_EXPONENT]),
started from the best point of a grid over the exponents where the rest of the law is linear (so the start is the
global least-squares fit of that grid).

Identifiability first (fit_problem): a fit whose exponent ran to its bound, whose parameters overflow, whose
Jacobian is singular or ill-conditioned, whose exponent's 95% profile-likelihood interval reaches a bound (the
runs do not determine it), whose standard errors exceed the parameters, or whose runs have fewer than 3 distinct
sizes or lengths (Chinchilla) is reported in one line, without intervals; a budget farther beyond the runs than
their own span gets no interval either. Only a fit that passes gets intervals. Uncertainty: the delta method
(valid there: the fit is interior and locally linear; the tests check it against a bootstrap over runs), and for
the exponents the profile likelihood. The parameters' covariance is curve_fit's s²(JᵀJ)⁻¹ (s² = residual sum of
squares / (runs − parameters), J the Jacobian at the fit); a prediction's variance is gᵀ·cov·g with g its gradient
in the parameters (scipy.optimize.approx_fprime); the 95% band of the fitted curve is ± t(0.975, runs − parameters)
× sqrt(gᵀ·cov·g), and the interval for one new run adds s² under the root.

C is a run's training FLOPs: results.json's train_flops (every step's FLOPs as train_gpt counts them: matmuls and
the attention pairs the masks allow), else the same sum from metrics.csv, else 6 × parameters × tokens.
"""
import math
import re
import statistics
import warnings
from dataclasses import dataclass

import numpy as np

from gptlab.core.errors import UserError
from gptlab.core.files import atomic_write

MIN_RUNS_COMPUTE = 4  # 3 parameters: at least one degree of freedom for the residual noise
MIN_RUNS_CHINCHILLA = 5  # 5 parameters; the interval needs a sixth run
CONFIDENCE = 0.95
# A prediction is made within this factor of the fitted runs' FLOPs (nine decades either way): beyond it the law
# is not evidence of anything, and the figures run into the float range.
MAX_EXTRAPOLATION = 1e9
# Exponents are fitted within [0, MAX_EXPONENT]: beyond 3, C^-α is a step between the smallest run and the rest,
# not a power law (published LLM exponents are 0.05 to 0.5), and A = a·C0^α runs into the float range.
MAX_EXPONENT = 3.0
# The Jacobian's condition number (columns scaled to unit length) above which the parameters are not separately
# determined: healthy fits of 5 to 9 runs are ~1e2, degenerate designs ~1e10 and more.
MAX_CONDITION = 1e6
# Each of Chinchilla's exponents (with E) needs this many distinct values of its own variable.
MIN_DISTINCT = 3


# ------------------------------------------------------------------------------------------------ fitting
@dataclass
class Fit:
    law: str
    names: list
    theta: np.ndarray  # in the fit's scaled units (see Law.scale)
    cov: np.ndarray  # None when no degree of freedom is left
    rss: float
    dof: int
    model: object  # model(theta, x)
    x: np.ndarray
    y: np.ndarray
    exponents: tuple = ()  # indices of the exponents in theta
    profile: tuple = None  # (grid of each exponent, RSS over the grid with the linear parameters at their best)
    problem: str = None  # why the runs do not determine this fit (fit_problem), or None

    @property
    def residual_std(self):
        return math.sqrt(self.rss / self.dof) if self.dof > 0 else None

    def predict(self, x, fn=None):
        """(value, half-width of the 95% band of the fitted curve, of the interval for one new run) at x, for
        fn(theta, x) (default: the law itself); half-widths are None without a degree of freedom."""
        fn = fn or self.model
        value = np.atleast_1d(fn(self.theta, x))
        if self.cov is None or self.problem:
            return value, None, None
        from scipy import optimize, stats  # heavy (~0.7 s): only for the intervals of a fit

        step = np.sqrt(np.finfo(float).eps) * np.maximum(1.0, np.abs(self.theta))  # forward differences
        grad = optimize.approx_fprime(self.theta, lambda th: np.atleast_1d(fn(th, x)), step)
        grad = grad.reshape(value.size, len(self.theta))
        variance = np.einsum("ni,ij,nj->n", grad, self.cov, grad)
        t = stats.t.ppf(0.5 + CONFIDENCE / 2, self.dof)
        return value, t * np.sqrt(variance), t * np.sqrt(variance + self.rss / self.dof)

    def std_errors(self):
        return None if self.cov is None or self.problem else np.sqrt(np.diag(self.cov))


def _fit(law, names, model, start, x, y, exponents):
    """Least squares from `start` by scipy's curve_fit (the parameters at indices `exponents` within [0,
    MAX_EXPONENT]), with its covariance s²(JᵀJ)⁻¹; the covariance is None without a degree of freedom or when J is
    singular."""
    from scipy.optimize import OptimizeWarning, curve_fit  # heavy (~0.4 s): only when a law is fitted

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)  # "covariance could not be estimated": None below
        try:
            # central differences: J (so the covariance) right to ~1e-10, which an ill-determined fit needs
            low, high = np.full(len(start), -np.inf), np.full(len(start), np.inf)
            low[exponents], high[exponents] = 0.0, MAX_EXPONENT
            start = np.clip(start, low, high)
            theta, cov = curve_fit(lambda x_, *th: model(np.array(th), x_), x, y, p0=start, method="trf",
                                   bounds=(low, high),
                                   jac="3-point", ftol=1e-15, xtol=1e-15, gtol=1e-15, maxfev=20_000)
        except RuntimeError as e:
            raise UserError(f"the least-squares fit of the {law} law did not converge ({e}); add runs over a wider "
                            "range of scales") from None
    residual = y - model(theta, x)
    rss = float(residual @ residual)
    dof = len(y) - len(theta)
    if dof <= 0 or not np.all(np.isfinite(cov)):
        cov = None
    return Fit(law, names, theta, cov, rss, dof, model, x, y, exponents)


def compute_law(theta, c):
    """L(C) = E + a·c^(−α), c = C / C0 (scaled FLOPs)."""
    e, a, alpha = theta
    return e + a * np.power(c, -alpha)


def _linear_fits(bases, y):
    """Least squares of y on each basis of `bases` (grid points × runs × columns): (coefficients, RSS), the RSS
    infinite where a coefficient after the first (the law's A, B) is not positive."""
    coef = np.einsum("gkn,n->gk", np.linalg.pinv(bases), y)
    rss = np.sum((y - np.einsum("gnk,gk->gn", bases, coef)) ** 2, axis=1)
    rss[~np.all(coef[:, 1:] > 0, axis=1) | ~np.isfinite(rss)] = np.inf
    return coef, rss


def fit_compute_law(flops, bpb, scale=None):
    """Fit L(C) = E + A·C^(−α). Works in c = C / scale (default: the geometric mean of the FLOPs), where A·C^(−α)
    = a·c^(−α), A = a·scale^α."""
    flops, bpb = np.asarray(flops, float), np.asarray(bpb, float)
    scale = scale or float(np.exp(np.mean(np.log(flops))))
    c = flops / scale
    alphas = np.linspace(MAX_EXPONENT / 1200, MAX_EXPONENT, 1200)  # for each exponent the law is linear in (E, a)
    with np.errstate(all="ignore"):
        bases = np.stack([np.ones((alphas.size, c.size)), np.power(c[None, :], -alphas[:, None])], axis=2)
        coef, rss = _linear_fits(bases, bpb)
    if not np.any(np.isfinite(rss)):
        raise UserError("the runs' val bpb does not fall with compute, so L(C) = E + A·C^(-α) cannot be fitted; "
                        "compare runs of one family that differ in scale")
    best = int(np.argmin(rss))
    fit = _fit("compute", ["E", "a", "alpha"], compute_law, np.array([*coef[best], alphas[best]]), c, bpb, [2])
    fit.scale = scale
    fit.profile = ((alphas,), rss)
    fit.problem = fit_problem(fit, ("E", "A", "α"))
    return fit


def chinchilla_law(theta, nd):
    """L(N, D) = E + a·n^(−α) + b·d^(−β), n = N / N0, d = D / D0."""
    e, a, alpha, b, beta = theta
    return e + a * np.power(nd[..., 0], -alpha) + b * np.power(nd[..., 1], -beta)


def fit_chinchilla_law(n_params, tokens, bpb):
    n_params, tokens, bpb = (np.asarray(v, float) for v in (n_params, tokens, bpb))
    scales = (float(np.exp(np.mean(np.log(n_params)))), float(np.exp(np.mean(np.log(tokens)))))
    nd = np.stack([n_params / scales[0], tokens / scales[1]], axis=1)
    grid = np.linspace(MAX_EXPONENT / 150, MAX_EXPONENT, 150)
    alpha, beta = (g.ravel() for g in np.meshgrid(grid, grid, indexing="ij"))
    with np.errstate(all="ignore"):
        bases = np.stack([np.ones((alpha.size, bpb.size)), np.power(nd[None, :, 0], -alpha[:, None]),
                          np.power(nd[None, :, 1], -beta[:, None])], axis=2)
        coef, rss = _linear_fits(bases, bpb)
    if not np.any(np.isfinite(rss)):
        raise UserError("val bpb does not fall with both parameters and tokens in these runs, so Chinchilla's "
                        "L(N, D) cannot be fitted")
    best = int(np.argmin(rss))
    start = np.array([coef[best, 0], coef[best, 1], alpha[best], coef[best, 2], beta[best]])
    fit = _fit("chinchilla", ["E", "a", "alpha", "b", "beta"], chinchilla_law, start, nd, bpb, [2, 4])
    fit.scales = scales
    fit.profile = ((grid, grid), rss.reshape(grid.size, grid.size))
    fit.problem = fit_problem(fit, ("E", "A", "α", "B", "β"))
    return fit


# ------------------------------------------------------------------------------------------------ identifiability
def _jacobian(fit):
    """d law / d theta at the fit, by central differences."""
    columns = []
    for i in range(len(fit.theta)):
        step = np.zeros_like(fit.theta)
        step[i] = 1e-6 * max(1.0, abs(fit.theta[i]))
        columns.append((fit.model(fit.theta + step, fit.x) - fit.model(fit.theta - step, fit.x)) / (2 * step[i]))
    return np.stack(columns, axis=1)


def profile_interval(fit, k):
    """The 95% profile-likelihood interval of the k-th exponent: the exponents where the residual sum of squares,
    minimised over the other parameters, is at most RSS·(1 + F(0.95; 1, dof)/dof) (the likelihood-ratio test of a
    Gaussian fit); (low, high, whether it reaches an end of [0, MAX_EXPONENT]). None without a degree of freedom."""
    from scipy import stats  # heavy: only for the intervals of a fit

    if fit.dof <= 0 or fit.profile is None:
        return None
    grids, rss = fit.profile
    profile = rss if rss.ndim == 1 else np.min(rss, axis=1 - k)
    floor = min(fit.rss, float(np.min(profile)))
    inside = profile <= floor * (1 + stats.f.ppf(CONFIDENCE, 1, fit.dof) / fit.dof) + 1e-300
    best = int(np.argmin(profile))
    low = high = best
    while low > 0 and inside[low - 1]:
        low -= 1
    while high < len(inside) - 1 and inside[high + 1]:
        high += 1
    grid = grids[k]
    return float(grid[low]), float(grid[high]), low == 0 or high == len(grid) - 1


def fit_problem(fit, symbols):
    """Why the runs do not determine this fit (one clause), or None: an exponent at its bound, parameters beyond
    the float range, a singular or ill-conditioned Jacobian, an exponent's profile-likelihood interval reaching a
    bound, or a standard error above its parameter."""
    exponents = list(fit.exponents)
    with np.errstate(all="ignore"):
        real = [fit.theta[i] * (fit.scale if fit.law == "compute" else fit.scales[(i - 1) // 2]) ** fit.theta[i + 1]
                if i in (1, 3) else fit.theta[i] for i in range(len(fit.theta))]
    bad = [symbols[i] for i, v in enumerate(real) if not np.isfinite(v)]
    if bad:
        return f"its parameters overflow ({', '.join(f'{b} = inf' for b in bad)})"
    for i in exponents:
        if fit.theta[i] >= MAX_EXPONENT * (1 - 1e-6):
            return (f"{symbols[i]} ran to its bound {MAX_EXPONENT:g} (the curve is a step between the smallest runs "
                    "and the rest, not a power law)")
        if fit.theta[i] <= 1e-6:
            return f"{symbols[i]} ran to 0 (val bpb does not fall with scale in these runs)"
    with np.errstate(all="ignore"):
        jac = _jacobian(fit)
        norms = np.linalg.norm(jac, axis=0)
        cond = np.linalg.cond(jac / norms) if np.all(norms > 0) and np.all(np.isfinite(jac)) else np.inf
    if not cond <= MAX_CONDITION:
        return (f"its Jacobian is singular or ill-conditioned (condition number {cond:.2g}): the parameters trade off "
                "against each other")
    for k, i in enumerate(exponents):
        interval = profile_interval(fit, k)
        if interval and interval[2]:
            return (f"{symbols[i]}'s 95% profile-likelihood interval [{interval[0]:.3g}, {interval[1]:.3g}] reaches "
                    f"the end of [0, {MAX_EXPONENT:g}]: the runs do not determine it")
    if fit.cov is not None:
        errors = np.sqrt(np.diag(fit.cov))
        over = [i for i in range(len(fit.theta)) if errors[i] > abs(fit.theta[i])]
        if over:
            i = over[0]
            name = symbols[i] if symbols[i] in ("E", "α", "β") else symbols[i].lower()
            return f"a standard error exceeds its parameter (σ({name}) = {errors[i]:.2g} > |{name}| = {abs(fit.theta[i]):.2g})"
    return None


def compute_optimal(fit, flops):
    """Chinchilla's allocation of C = 6ND (Hoffmann et al. eq. 4) for a fit: functions of theta giving N, D and L
    at the optimum (in real units), for Fit.predict."""
    n0, d0 = fit.scales
    budget = flops / 6.0 / (n0 * d0)  # n·d in scaled units

    def n_opt(theta, _=None):
        _, a, alpha, b, beta = theta
        return np.power(alpha * a * budget ** beta / (beta * b), 1.0 / (alpha + beta))

    def loss(theta, x=None):
        n = n_opt(theta)
        return chinchilla_law(theta, np.array([n, budget / n]))

    return (lambda th, x=None: n_opt(th) * n0), (lambda th, x=None: budget / n_opt(th) * d0), loss


# ------------------------------------------------------------------------------------------------ runs
@dataclass
class ScalingPoint:
    name: str
    flops: float
    flops_source: str
    n_params: float
    tokens: float
    bpb: float
    gpu_hours: float
    cost_usd: float
    usd_per_gpu_hour: float


def scaling_points(runs):
    """(points, notes): finished runs with a val bpb and training FLOPs."""
    points, notes = [], []
    for run in runs:
        if not run.final or run.val_bpb is None:
            notes.append(f"{run.name}: left out ({run.status}, or no val bpb)")
        elif not run.train_flops:
            notes.append(f"{run.name}: left out (no training FLOPs: no train_flops, step FLOPs, parameters or tokens)")
        elif not (math.isfinite(run.train_flops) and run.train_flops > 0 and math.isfinite(run.val_bpb)
                  and run.val_bpb > 0):
            notes.append(f"{run.name}: left out (training FLOPs {run.train_flops:g} or val bpb {run.val_bpb:g} is "
                         "not a positive number)")
        else:
            points.append(ScalingPoint(run.name, run.train_flops, run.train_flops_source, run.n_params, run.tokens,
                                       run.val_bpb, run.gpu_hours, run.cost_usd, run.usd_per_gpu_hour))
    return points, notes


# ------------------------------------------------------------------------------------------------ budgets
_BUDGET_RE = re.compile(r"^\s*(\$)?\s*([0-9.]+(?:e[+-]?[0-9]+)?)\s*([a-z$/_ -]*)\s*$", re.I)


def parse_budget(text):
    """'1e18' / '1e18 flops' → ('flops', 1e18); '50 gpu-h' / '50gpuh' → ('gpu_hours', 50); '$20' / '20 usd' →
    ('usd', 20)."""
    match = _BUDGET_RE.match(text or "")
    unit = (match.group(3) or "").lower().replace(" ", "").replace("-", "").replace("_", "") if match else None
    kind = None
    if match and match.group(1):
        kind = "usd" if unit in ("", "usd", "$") else None
    elif match:
        kind = {"": "flops", "flops": "flops", "flop": "flops", "gpuh": "gpu_hours", "gpuhours": "gpu_hours",
                "gpuhour": "gpu_hours", "h": "gpu_hours", "usd": "usd", "$": "usd", "dollars": "usd"}.get(unit)
    try:
        value = float(match.group(2)) if kind else None
    except ValueError:
        value = None
    if value is not None and not math.isfinite(value):
        raise UserError(f"--budget {text!r} is beyond a float's range; give a budget near the fitted runs' (e.g. "
                        "1e18 FLOPs, 50gpuh or $20)")
    if not value or value <= 0:
        raise UserError(f"--budget {text!r} is not a budget: write FLOPs (1e18), GPU-hours (50gpuh) or dollars "
                        "($20)")
    return kind, value


def budget_in_flops(kind, value, points, usd_per_gpu_hour=None):
    """(FLOPs, how the budget was converted): GPU-hours at the fitted runs' median FLOPs per GPU-hour, dollars at
    --usd_per_gpu_hour (else the runs' median price)."""
    if kind == "flops":
        return value, f"{value:.3g} FLOPs"
    rates = [p.flops / p.gpu_hours for p in points if p.gpu_hours]
    if not rates:
        raise UserError("the runs record no wall time, so a budget in GPU-hours or dollars cannot be turned into "
                        "FLOPs; give --budget in FLOPs (e.g. 1e18)")
    rate = statistics.median(rates)
    hours, how = value, f"{value:g} GPU-hours"
    if kind == "usd":
        price = usd_per_gpu_hour
        if price is None:
            prices = [p.usd_per_gpu_hour for p in points if p.usd_per_gpu_hour]
            if not prices:
                raise UserError("no price per GPU-hour is known for these runs (CPU runs, or GPUs missing from "
                                "gptlab/train/cost.py's table); pass --usd_per_gpu_hour to turn dollars into GPU-hours")
            price = statistics.median(prices)
        if not price > 0:
            raise UserError("at $0 per GPU-hour a dollar budget buys unlimited GPU-hours; pass --usd_per_gpu_hour "
                            "above 0, or give --budget in GPU-hours or FLOPs")
        hours = value / price
        how = f"${value:g} at ${price:g}/GPU-hour = {hours:.3g} GPU-hours"
    return hours * rate, f"{how} at {rate:.3g} FLOPs per GPU-hour (median of the fitted runs, evaluations included)"


# ------------------------------------------------------------------------------------------------ report
@dataclass
class ScalingReport:
    points: list
    notes: list
    compute_fit: Fit
    chinchilla_fit: Fit = None
    chinchilla_note: str = None
    budget: tuple = None  # (FLOPs, description)


def scaling_report(runs, budget=None, usd_per_gpu_hour=None):
    points, notes = scaling_points(runs)
    distinct = len({p.flops for p in points})
    if distinct < MIN_RUNS_COMPUTE:
        raise UserError(f"a scaling fit needs at least {MIN_RUNS_COMPUTE} finished runs with different training "
                        f"FLOPs; {len(points)} usable run(s) here"
                        + (f", at {distinct} different FLOPs" if distinct < len(points) else "")
                        + (f" ({'; '.join(notes[:3])})" if notes else "")
                        + ". Train the same recipe at a few sizes or step counts, e.g. with sweep.py")
    report = ScalingReport(points, notes, _fitted(fit_compute_law, [p.flops for p in points],
                                                  [p.bpb for p in points]))
    usable = [p for p in points if p.n_params and p.tokens]
    design = np.stack([np.ones(len(usable)), np.log([p.n_params for p in usable] or [1]),
                       np.log([p.tokens for p in usable] or [1])], axis=1) if usable else None
    sizes, lengths = len({p.n_params for p in usable}), len({p.tokens for p in usable})
    if len(usable) < MIN_RUNS_CHINCHILLA or np.linalg.matrix_rank(design) < 3:
        report.chinchilla_note = (f"Chinchilla's L(N, D) needs at least {MIN_RUNS_CHINCHILLA} runs that vary both "
                                  "parameters and tokens independently (not all on one tokens-per-parameter line)")
    elif min(sizes, lengths) < MIN_DISTINCT:
        # with 2 lengths, E + B/D^β takes 2 values for its 3 parameters: B, β and E are not separately determined
        report.chinchilla_note = (f"Chinchilla's L(N, D) is not fitted: these runs have {sizes} distinct sizes and "
                                  f"{lengths} distinct lengths (tokens), and each of its exponents needs at least "
                                  f"{MIN_DISTINCT} values of its own variable to be told apart from E")
    else:
        report.chinchilla_fit = _fitted(fit_chinchilla_law, [p.n_params for p in usable],
                                        [p.tokens for p in usable], [p.bpb for p in usable])
    if budget:
        report.budget = budget_in_flops(*parse_budget(budget), points, usd_per_gpu_hour)
        check_prediction(report)
    return report


def _fitted(fit_law, *columns):
    """fit_law(*columns), its numerical failures (a singular system, values beyond the float range) one error."""
    try:
        with np.errstate(all="ignore"):
            return fit_law(*columns)
    except (np.linalg.LinAlgError, ValueError, FloatingPointError, OverflowError, ZeroDivisionError) as err:
        raise UserError(f"the scaling law cannot be fitted to these runs ({type(err).__name__}: {err}); check their "
                        "training FLOPs and val bpb, or compare runs of one family that differ in scale") from None


def _prediction_problem(value, fit_e):
    """Why a predicted val bpb cannot be shown (not finite, not positive, below the fit's irreducible term E), or
    None."""
    if not math.isfinite(value):
        return f"the fit gives {value} there"
    if value <= 0 or value < fit_e:
        return (f"the fit gives val bpb {value:.4g} there, "
                + ("not a positive number (" if value <= 0 else "below") + f" its irreducible term E = {fit_e:.4g}" + (")" if value <= 0 else ""))
    return None


def check_prediction(report):
    """Refuse (UserError) a --budget the L(C) fit cannot speak for: beyond MAX_EXTRAPOLATION times the fitted runs'
    FLOPs either way, or where its prediction is not a positive val bpb above the fit's E."""
    flops, how = report.budget
    low, high = min(p.flops for p in report.points), max(p.flops for p in report.points)
    lowest, highest = low / MAX_EXTRAPOLATION, high * MAX_EXTRAPOLATION
    if not (math.isfinite(flops) and lowest <= flops <= highest):
        raise UserError(f"--budget {how} = {flops:.3g} FLOPs is too far from the fitted runs ({low:.3g} to {high:.3g} "
                        f"FLOPs) to extrapolate the law to; give a budget between {lowest:.3g} and {highest:.3g} "
                        "FLOPs")
    fit = report.compute_fit
    with np.errstate(all="ignore"):
        value = float(np.atleast_1d(fit.model(fit.theta, np.array([flops / fit.scale])))[0])
    problem = _prediction_problem(value, float(fit.theta[0]))
    if problem:
        raise UserError(f"refusing to extrapolate L(C) to {flops:.3g} FLOPs: {problem}, so the law does not hold "
                        f"that far from the fitted runs ({low:.3g} to {high:.3g} FLOPs); give a budget closer to them")


def _interval(value, half):
    return "" if half is None else f" [{value - half:.4f}, {value + half:.4f}]"


def problem_line(fit):
    """The one line saying that the runs do not determine `fit`, and that no interval is shown."""
    return (f"  these runs do not pin the law down: {fit.problem}; no intervals are shown (add runs over a wider "
            "range of scales)")


def far_beyond(points, flops):
    """Why `flops` is too far from the runs for an interval (farther beyond them than their own span), or None."""
    low, high = min(p.flops for p in points), max(p.flops for p in points)
    span, beyond = high / low, max(flops / high, low / flops)
    if beyond <= max(span, 1.0):
        return None
    side = "beyond the largest" if flops > high else "below the smallest"
    return (f"{flops:.3g} FLOPs is {beyond:.3g}× {side} fitted run, farther than the runs' own span ({span:.3g}×), "
            "where the law fitted to them is no evidence")


def _param_lines(fit, real_values):
    errors = fit.std_errors()
    shown = []
    for i, (name, value) in enumerate(real_values):
        # standard errors of E and the exponents are the fit's; of A (B) relative, as of a (b)
        scaled = fit.theta[i]
        rel = None if errors is None or scaled == 0 else errors[i] / abs(scaled)
        if name in ("E", "α", "β"):
            shown.append(f"{name} = {value:.4g}" + ("" if errors is None else f" ± {errors[i]:.2g}"))
        else:
            shown.append(f"{name} = {value:.4g}" + ("" if rel is None else f" (± {100 * rel:.0f}%)"))
    return ", ".join(shown)


def render_scaling(report):
    fit = report.compute_fit
    e, a, alpha = fit.theta
    sources = sorted({p.flops_source for p in report.points})
    out = [f"Scaling fit over {len(report.points)} runs: L(C) = E + A·C^(−α), C = training FLOPs (from "
           f"{', '.join(sources)})",
           "  " + _param_lines(fit, [("E", e), ("A", a * fit.scale ** alpha), ("α", alpha)])
           + (f"; residual std {fit.residual_std:.4f} bpb, {fit.dof} degree(s) of freedom" if fit.dof else
              "; no degree of freedom left: no interval")]
    interval = profile_interval(fit, 0)
    if fit.problem:
        out.append(problem_line(fit))
    elif interval:
        out.append(f"  α's 95% profile-likelihood interval: [{interval[0]:.4g}, {interval[1]:.4g}]")
    width = max(len(p.name) for p in report.points)
    out += ["", f"  {'run':<{width}} {'FLOPs':>10} {'val bpb':>8} {'fit':>8}"]
    predicted = fit.predict(fit.x)[0]
    for p, value in zip(report.points, predicted):
        out.append(f"  {p.name:<{width}} {p.flops:>10.3g} {p.bpb:>8.4f} {value:>8.4f}")
    if report.chinchilla_fit is not None:
        ch = report.chinchilla_fit
        e2, a2, al, b2, be = ch.theta
        out += ["", f"Chinchilla fit over {len(ch.y)} runs: L(N, D) = E + A/N^α + B/D^β (N parameters, D tokens)",
                "  " + _param_lines(ch, [("E", e2), ("A", a2 * ch.scales[0] ** al), ("α", al),
                                         ("B", b2 * ch.scales[1] ** be), ("β", be)])
                + (f"; residual std {ch.residual_std:.4f} bpb, {ch.dof} degree(s) of freedom" if ch.dof else
                   "; no degree of freedom left: no interval (a sixth run gives one)")]
        if ch.problem:
            out.append(problem_line(ch))
    elif report.chinchilla_note:
        out += ["", f"({report.chinchilla_note}.)"]
    if report.budget:
        flops, how = report.budget
        value, band, single = fit.predict(np.array([flops / fit.scale]))
        far = far_beyond(report.points, flops)
        out += ["", f"Prediction for {how}" + ("" if how == f"{flops:.3g} FLOPs" else f" = {flops:.3g} FLOPs") + ":"]
        if fit.problem:
            out.append("  L(C): no prediction: these runs do not determine the law (above)")
        elif far:
            out.append(f"  L(C): val bpb {value[0]:.4f}, no interval: {far}")
        else:
            out.append(f"  L(C): val bpb {value[0]:.4f}" + (f"; 95% band of the fit{_interval(value[0], band[0])}, 95% "
                                                            f"interval for one run{_interval(value[0], single[0])}"
                                                            if band is not None else ""))
            if not min(p.flops for p in report.points) <= flops <= max(p.flops for p in report.points):
                out.append("  (an extrapolation beyond the fitted runs' FLOPs: the interval assumes the law holds "
                           "there)")
        if report.chinchilla_fit is not None:
            out.append(_chinchilla_prediction(report.chinchilla_fit, flops, far))
    out += [f"note: {n}" for n in report.notes]
    out.append("Intervals, only for fits these runs determine: delta method, parameter covariance s²(JᵀJ)⁻¹, "
               "Student t with runs − parameters degrees of freedom; α's by profile likelihood (F test).")
    return "\n".join(out) + "\n"


def _chinchilla_prediction(ch, flops, far=None):
    """The line of L(N, D)'s prediction at the compute-optimal N and D for `flops`, or why there is none (or why
    it has no interval: `far`)."""
    if ch.problem:
        return "  L(N, D): no prediction: these runs do not determine the law (above)"
    n_fn, d_fn, loss_fn = compute_optimal(ch, flops)
    with np.errstate(all="ignore"):
        problem = _prediction_problem(float(np.atleast_1d(loss_fn(ch.theta))[0]), float(ch.theta[0]))
    if problem:
        return f"  L(N, D): no prediction at {flops:.3g} FLOPs: {problem}; the law does not hold that far"
    loss, band, single = ch.predict(None, loss_fn)
    return (f"  L(N, D) at the compute-optimal N = {n_fn(ch.theta):.3g} parameters, "
            f"D = {d_fn(ch.theta):.3g} tokens (C = 6ND): val bpb {loss[0]:.4f}"
            + (f", no interval: {far}" if far else
               f"; 95% band{_interval(loss[0], band[0])}, one run{_interval(loss[0], single[0])}"
               if band is not None else ""))


def _label_axes(ax, xlabel, title):
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final val bpb")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def data_ylim(values):
    """A y-range from the values shown (runs, and a prediction), 10% of their spread either side: a fit that runs
    off (a step, a band of ±1e5) is cut at the edge instead of setting the axis."""
    low, high = float(np.min(values)), float(np.max(values))
    margin = 0.1 * (high - low) or 0.05 * abs(high) or 0.1
    return low - margin, high + margin


def plot_scaling(report, path, size=(1200, 800)):
    """Points, the L(C) fit with its 95% band (and one run's interval at the budget), in a PNG."""
    import matplotlib  # heavy (~0.4 s with pyplot): only when a PNG is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

    fig = draw_scaling(plt, report, size)
    with atomic_write(path, "wb", overwrite=True) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path


def draw_scaling(plt, report, size=(1200, 800)):
    """The figure of plot_scaling; axes from the data: the runs' val bpb (and a prediction that has an interval)."""
    fit = report.compute_fit
    panels = 2 if report.chinchilla_fit is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(size[0] / 100, size[1] / 100), dpi=100, squeeze=False)
    ax = axes[0][0]
    flops = np.array([p.flops for p in report.points])
    bpb = [p.bpb for p in report.points]
    lo, hi = flops.min(), flops.max()
    shown = list(bpb)
    predicted = None
    if report.budget and not fit.problem:
        predicted = fit.predict(np.array([report.budget[0] / fit.scale]))
        if predicted[2] is not None and not far_beyond(report.points, report.budget[0]):
            lo, hi = min(lo, report.budget[0]), max(hi, report.budget[0])
            shown += [predicted[0][0] - predicted[2][0], predicted[0][0] + predicted[2][0]]
        else:
            predicted = None
    grid = np.geomspace(lo / 1.5, hi * 1.5, 200)
    with np.errstate(all="ignore"):
        value, band, _ = fit.predict(grid / fit.scale)
    ax.scatter(flops, bpb, color="black", zorder=3, label="runs")
    ax.plot(grid, value, color="tab:blue", label="fit E + A·C^(−α)" + (" (not determined by these runs)"
                                                                       if fit.problem else ""))
    if band is not None:
        ax.fill_between(grid, value - band, value + band, color="tab:blue", alpha=0.2, label="95% band of the fit")
    if predicted is not None:
        ax.errorbar([report.budget[0]], predicted[0], yerr=[predicted[2]], color="tab:red", marker="D",
                    capsize=4, label="prediction (95% interval for one run)")
    ax.set_ylim(*data_ylim(shown))
    _label_axes(ax, "training FLOPs", "L(C) = E + A·C^(−α)")
    if report.chinchilla_fit is not None:
        ch, ax = report.chinchilla_fit, axes[0][1]
        n_values = sorted({p.n_params for p in report.points if p.n_params and p.tokens})
        tokens = np.array([p.tokens for p in report.points if p.tokens])
        d_grid = np.geomspace(tokens.min() / 1.5, tokens.max() * 1.5, 100)
        colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(n_values)))
        for n, color in zip(n_values, colors):
            pts = [p for p in report.points if p.n_params == n and p.tokens]
            ax.scatter([p.tokens for p in pts], [p.bpb for p in pts], color=color, zorder=3)
            nd = np.stack([np.full_like(d_grid, n / ch.scales[0]), d_grid / ch.scales[1]], axis=1)
            with np.errstate(all="ignore"):
                ax.plot(d_grid, chinchilla_law(ch.theta, nd), color=color, label=f"N = {n:.3g}")
        ax.set_ylim(*data_ylim([p.bpb for p in report.points if p.n_params and p.tokens]))
        _label_axes(ax, "training tokens D", "L(N, D) = E + A/N^α + B/D^β")
    fig.tight_layout()
    return fig
