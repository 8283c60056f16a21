"""Scaling laws fitted to finished runs: L(C) = E + A·C^(−α) over training FLOPs, and Chinchilla's
L(N, D) = E + A/N^α + B/D^β over parameters and tokens (Hoffmann et al. 2022, eq. 2), with 95% intervals.

Fitting: least squares on val bpb (scipy.optimize.curve_fit, trust region), started from the best point of a grid
over the exponents where the rest of the law is linear (so the start is the global least-squares fit of that
grid). Uncertainty: the delta method. The parameters' covariance is curve_fit's s²(JᵀJ)⁻¹ (s² = residual sum of
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

    @property
    def residual_std(self):
        return math.sqrt(self.rss / self.dof) if self.dof > 0 else None

    def predict(self, x, fn=None):
        """(value, half-width of the 95% band of the fitted curve, of the interval for one new run) at x, for
        fn(theta, x) (default: the law itself); half-widths are None without a degree of freedom."""
        fn = fn or self.model
        value = np.atleast_1d(fn(self.theta, x))
        if self.cov is None:
            return value, None, None
        from scipy import optimize, stats  # heavy (~0.7 s): only for the intervals of a fit

        step = np.sqrt(np.finfo(float).eps) * np.maximum(1.0, np.abs(self.theta))  # forward differences
        grad = optimize.approx_fprime(self.theta, lambda th: np.atleast_1d(fn(th, x)), step)
        grad = grad.reshape(value.size, len(self.theta))
        variance = np.einsum("ni,ij,nj->n", grad, self.cov, grad)
        t = stats.t.ppf(0.5 + CONFIDENCE / 2, self.dof)
        return value, t * np.sqrt(variance), t * np.sqrt(variance + self.rss / self.dof)

    def std_errors(self):
        return None if self.cov is None else np.sqrt(np.diag(self.cov))


def _fit(law, names, model, start, x, y):
    """Least squares from `start` by scipy's curve_fit, with its covariance s²(JᵀJ)⁻¹; the covariance is None
    without a degree of freedom or when J is singular."""
    from scipy.optimize import OptimizeWarning, curve_fit  # heavy (~0.4 s): only when a law is fitted

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)  # "covariance could not be estimated": None below
        try:
            # central differences: J (so the covariance) right to ~1e-10, which an ill-determined fit needs
            theta, cov = curve_fit(lambda x_, *th: model(np.array(th), x_), x, y, p0=start, method="trf",
                                   jac="3-point", ftol=1e-15, xtol=1e-15, gtol=1e-15, maxfev=20_000)
        except RuntimeError as e:
            raise UserError(f"the least-squares fit of the {law} law did not converge ({e}); add runs over a wider "
                            "range of scales") from None
    residual = y - model(theta, x)
    rss = float(residual @ residual)
    dof = len(y) - len(theta)
    if dof <= 0 or not np.all(np.isfinite(cov)):
        cov = None
    return Fit(law, names, theta, cov, rss, dof, model, x, y)


def compute_law(theta, c):
    """L(C) = E + a·c^(−α), c = C / C0 (scaled FLOPs)."""
    e, a, alpha = theta
    return e + a * np.power(c, -alpha)


def fit_compute_law(flops, bpb, scale=None):
    """Fit L(C) = E + A·C^(−α). Works in c = C / scale (default: the geometric mean of the FLOPs), where A·C^(−α)
    = a·c^(−α), A = a·scale^α."""
    flops, bpb = np.asarray(flops, float), np.asarray(bpb, float)
    scale = scale or float(np.exp(np.mean(np.log(flops))))
    c = flops / scale
    best = None
    for alpha in np.linspace(0.005, 3.0, 600):  # for each exponent the law is linear in (E, a)
        basis = np.stack([np.ones_like(c), np.power(c, -alpha)], axis=1)
        (e, a), *_ = np.linalg.lstsq(basis, bpb, rcond=None)
        if a <= 0:
            continue
        rss = float(np.sum((bpb - basis @ np.array([e, a])) ** 2))
        if best is None or rss < best[0]:
            best = (rss, np.array([e, a, alpha]))
    if best is None:
        raise UserError("the runs' val bpb does not fall with compute, so L(C) = E + A·C^(-α) cannot be fitted; "
                        "compare runs of one family that differ in scale")
    fit = _fit("compute", ["E", "a", "alpha"], compute_law, best[1], c, bpb)
    fit.scale = scale
    return fit


def chinchilla_law(theta, nd):
    """L(N, D) = E + a·n^(−α) + b·d^(−β), n = N / N0, d = D / D0."""
    e, a, alpha, b, beta = theta
    return e + a * np.power(nd[..., 0], -alpha) + b * np.power(nd[..., 1], -beta)


def fit_chinchilla_law(n_params, tokens, bpb):
    n_params, tokens, bpb = (np.asarray(v, float) for v in (n_params, tokens, bpb))
    scales = (float(np.exp(np.mean(np.log(n_params)))), float(np.exp(np.mean(np.log(tokens)))))
    nd = np.stack([n_params / scales[0], tokens / scales[1]], axis=1)
    best = None
    grid = np.linspace(0.02, 2.0, 100)
    for alpha in grid:
        for beta in grid:
            basis = np.stack([np.ones(len(bpb)), np.power(nd[:, 0], -alpha), np.power(nd[:, 1], -beta)], axis=1)
            coef, *_ = np.linalg.lstsq(basis, bpb, rcond=None)
            if coef[1] <= 0 or coef[2] <= 0:
                continue
            rss = float(np.sum((bpb - basis @ coef) ** 2))
            if best is None or rss < best[0]:
                best = (rss, np.array([coef[0], coef[1], alpha, coef[2], beta]))
    if best is None:
        raise UserError("val bpb does not fall with both parameters and tokens in these runs, so Chinchilla's "
                        "L(N, D) cannot be fitted")
    fit = _fit("chinchilla", ["E", "a", "alpha", "b", "beta"], chinchilla_law, best[1], nd, bpb)
    fit.scales = scales
    return fit


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
    if len(usable) < MIN_RUNS_CHINCHILLA or np.linalg.matrix_rank(design) < 3:
        report.chinchilla_note = (f"Chinchilla's L(N, D) needs at least {MIN_RUNS_CHINCHILLA} runs that vary both "
                                  "parameters and tokens independently (not all on one tokens-per-parameter line)")
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


def _undetermined(fit):
    """True when some parameter's standard error exceeds its value: the runs do not pin the law down."""
    errors = fit.std_errors()
    return errors is not None and bool(np.any(errors > np.abs(fit.theta)))


UNDETERMINED = ("  (these runs do not pin the law down: a standard error exceeds its parameter, so the intervals are "
                "very wide; add runs over a wider range of scales)")


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
    if _undetermined(fit):
        out.append(UNDETERMINED)
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
        if _undetermined(ch):
            out.append(UNDETERMINED)
    elif report.chinchilla_note:
        out += ["", f"({report.chinchilla_note}.)"]
    if report.budget:
        flops, how = report.budget
        value, band, single = fit.predict(np.array([flops / fit.scale]))
        out += ["", f"Prediction for {how}" + ("" if how == f"{flops:.3g} FLOPs" else f" = {flops:.3g} FLOPs") + ":",
                f"  L(C): val bpb {value[0]:.4f}" + (f"; 95% band of the fit{_interval(value[0], band[0])}, 95% "
                                                     f"interval for one run{_interval(value[0], single[0])}"
                                                     if band is not None else "")]
        if not min(p.flops for p in report.points) <= flops <= max(p.flops for p in report.points):
            out.append("  (an extrapolation beyond the fitted runs' FLOPs: the interval assumes the law holds there)")
        if report.chinchilla_fit is not None:
            out.append(_chinchilla_prediction(report.chinchilla_fit, flops))
    out += [f"note: {n}" for n in report.notes]
    out.append("Intervals: delta method, parameter covariance s²(JᵀJ)⁻¹, Student t with runs − parameters degrees "
               "of freedom.")
    return "\n".join(out) + "\n"


def _chinchilla_prediction(ch, flops):
    """The line of L(N, D)'s prediction at the compute-optimal N and D for `flops`, or why there is none."""
    n_fn, d_fn, loss_fn = compute_optimal(ch, flops)
    with np.errstate(all="ignore"):
        problem = _prediction_problem(float(np.atleast_1d(loss_fn(ch.theta))[0]), float(ch.theta[0]))
    if problem:
        return f"  L(N, D): no prediction at {flops:.3g} FLOPs: {problem}; the law does not hold that far"
    loss, band, single = ch.predict(None, loss_fn)
    return (f"  L(N, D) at the compute-optimal N = {n_fn(ch.theta):.3g} parameters, "
            f"D = {d_fn(ch.theta):.3g} tokens (C = 6ND): val bpb {loss[0]:.4f}"
            + (f"; 95% band{_interval(loss[0], band[0])}, one run{_interval(loss[0], single[0])}"
               if band is not None else ""))


def _label_axes(ax, xlabel, title):
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final val bpb")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def plot_scaling(report, path, size=(1200, 800)):
    """Points, the L(C) fit with its 95% band (and one run's interval at the budget), in a PNG."""
    import matplotlib  # heavy (~0.4 s with pyplot): only when a PNG is drawn
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

    fit = report.compute_fit
    panels = 2 if report.chinchilla_fit is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(size[0] / 100, size[1] / 100), dpi=100, squeeze=False)
    ax = axes[0][0]
    flops = np.array([p.flops for p in report.points])
    lo, hi = flops.min(), flops.max()
    if report.budget:
        lo, hi = min(lo, report.budget[0]), max(hi, report.budget[0])
    grid = np.geomspace(lo / 1.5, hi * 1.5, 200)
    value, band, _ = fit.predict(grid / fit.scale)
    ax.scatter(flops, [p.bpb for p in report.points], color="black", zorder=3, label="runs")
    ax.plot(grid, value, color="tab:blue", label="fit E + A·C^(−α)")
    if band is not None:
        ax.fill_between(grid, value - band, value + band, color="tab:blue", alpha=0.2, label="95% band of the fit")
    if report.budget:
        at, single = report.budget[0], fit.predict(np.array([report.budget[0] / fit.scale]))
        ax.errorbar([at], single[0], yerr=None if single[2] is None else [single[2]], color="tab:red", marker="D",
                    capsize=4, label="prediction (95% interval for one run)")
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
            ax.plot(d_grid, chinchilla_law(ch.theta, nd), color=color, label=f"N = {n:.3g}")
        _label_axes(ax, "training tokens D", "L(N, D) = E + A/N^α + B/D^β")
    fig.tight_layout()
    with atomic_write(path, "wb", overwrite=True) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return path
