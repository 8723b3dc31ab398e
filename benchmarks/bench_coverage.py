"""Coverage of the 95 % bootstrap intervals of every metric, on simulated models with known truth.

A simulated model: per sample, true class probabilities ``q = softmax(g)`` with logits ``g`` drawn
around a random class (``g ~ N(0, 1)`` per class, ``+ boost`` on one), the label ``y ~ q``, and the
model's prediction ``p = softmax(g / tau)``: calibrated (``tau = 1``), mildly overconfident
(``tau = 0.95``: ECE 2.2 % at K = 10, 3.8 % at K = 100, the realistic case), overconfident
(``tau = 0.6``) or underconfident (``tau = 1.6``). The population value of every metric is computed
on a pool of ``--pool`` samples with the expectation over the label taken exactly (accuracy
``E[q_argmax]``, Brier ``E[sum p^2 - 2 p.q + 1]``, NLL ``E[-q.log p]``, and the binned calibration
errors from the per-bin sums of ``q`` instead of the 0/1 labels), so only the binning of a finite
pool remains.

Each replication draws a test half of n samples, computes the metrics and B bootstrap replicates of
all of them at once (``bootstrap_replicates``: one count matrix, every metric's resampled form), and
the percentile, basic, BCa and debiased intervals as the pipeline makes them (clipped to the
metric's range, :func:`calibrepro.bootstrap.interval`); a cell is the share of the R intervals that
contain the population value (Monte Carlo standard error ``sqrt(0.95 * 0.05 / R)``: 0.015 at
R = 200) and their mean width.  The last table is the per-metric choice of
``uncertainty.interval: auto`` this data supports: the method with the smallest mean of
``|coverage - 0.95|`` over all scenarios, where differences below :data:`TIE` go to the simpler
method (:data:`PREFERENCE`).

Every finished scenario is saved under ``--out`` (one ``.npz``: the population values and all R x
metrics x methods intervals); a rerun with the same ``--out`` and settings loads it, computes only
replications beyond the saved ones (a larger R later extends a run), and ``--replications 0`` only
prints the tables of what is saved.

``--task regression``: the regression metrics (:data:`calibrepro.regression.metrics.REGRESSION_METRICS`)
of a Gaussian predictive ``N(0, sigma_t^2)`` whose targets are ``y_t ~ N(0, (s sigma_t)^2)``: a known
dispersion error ``s`` (:data:`DISPERSIONS`; s > 1: the predicted sigma too small, overconfident),
``log sigma_t ~ N(`` :data:`LOG_SIGMA` ``)``.  Every metric depends on ``y - mu`` only, so the means
are 0.  Population values in closed form (:func:`regression_population`).  A replication draws
``--splits`` independent test sets of n samples, takes each one's terms (``sample_terms``), estimates
and B resampled values exactly as ``regression_evaluate_step`` does (``resample_weights``: the
pipeline's counts), and the interval of their *mean over the splits*, as the reproduction report
makes it (``regression.uncertainty.mean_intervals``).  With ``--windows H`` a test set is n sliding
windows of H forecast hours over one AR(1) error series (hourly correlation :data:`AR`), resampled as
the pipeline resamples a time series (the energy data set): in circular blocks of consecutive windows
(``regression.uncertainty.block_counts``).  Methods: percentile,
basic and debiased (BCa needs a jackknife the regression pipeline does not compute).

    nice -n 10 .venv/bin/python benchmarks/bench_coverage.py [--replications 200] [--resamples 1000] [--jobs 2]
        [--sizes 5000,500] [--calibrations calibrated,mild,overconfident,underconfident] [--classes 10,100]
        [--metrics a,b] [--out DIR]
    nice -n 10 .venv/bin/python benchmarks/bench_coverage.py --task regression [--sizes 160,400,2000]
        [--splits 1,5] [--windows 10] [--calibrations calibrated,mild,...] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.special import softmax
from threadpoolctl import threadpool_limits

from calibrepro import bootstrap as B
from calibrepro import metrics as M
from calibrepro.metrics import smooth
from calibrepro.metrics.bins import bin_index
from calibrepro.metrics.scores import NLL_EPS
from calibrepro.regression import metrics as RM
from calibrepro.regression.distributions import Gaussian
from calibrepro.regression.uncertainty import resample_weights

CALIBRATIONS = {"calibrated": 1.0, "mild": 0.95, "overconfident": 0.6, "underconfident": 1.6}
#: boost of one class's logit (about 59 % accuracy at K = 10 and 38 % at K = 100)
BOOST = {10: 3.0, 100: 4.5}
BINS = 15
LEVEL = 0.95
#: mean |coverage - 0.95| differences below this count as ties (about the Monte Carlo standard
#: error of one cell at R = 200, 0.015); a tie goes to the first method in PREFERENCE: the
#: simplest, and BCa (a jackknife per cell) last
TIE = 0.015
PREFERENCE = ("percentile", "basic", "debiased", "bca")
METHODS = B.INTERVAL_METHODS

#: regression: dispersion errors s, targets ~ N(mu, (s sigma)^2) for a predicted N(mu, sigma^2) (population
#: one-sided MSCE 0, 0.0006, 0.0048, 0.027 and 0.0037; central 95 % coverage 0.95, 0.91, 0.81, 0.49, 0.99)
DISPERSIONS = {"calibrated": 1.0, "mild": 1.15, "overconfident": 1.5, "strongly_overconfident": 3.0,
               "underconfident": 0.7}
#: mean and sd of log sigma_t (the predicted standard deviations' spread)
LOG_SIGMA = (-1.0, 0.4)
#: lag-one correlation of the hourly errors of the time-series scenario (``--windows``)
AR = 0.8
#: the interval methods the regression pipeline offers (no jackknife there, so no BCa)
REGRESSION_METHODS = ("percentile", "basic", "debiased")


def draw(k: int, tau: float, n: int, rng: np.random.Generator):
    """``n`` samples of the scenario: model probabilities ``p`` and true class probabilities ``q``."""
    g = rng.normal(size=(n, k))
    g[np.arange(n), rng.integers(0, k, size=n)] += BOOST[k]
    return softmax(g / tau, axis=1), softmax(g, axis=1)


def _binned(gap_sums: np.ndarray, counts: np.ndarray, total: int, kind: str) -> float:
    """Population ECE / MCE / l2 from per-bin sums of (q - conf) and bin counts."""
    nonempty = counts > 0
    gap = np.abs(gap_sums[nonempty]) / counts[nonempty]
    weight = counts[nonempty] / total
    if kind == "ece":
        return float(np.sum(weight * gap))
    if kind == "mce":
        return float(np.max(gap))
    return float(np.sqrt(np.sum(weight * gap * gap)))


def population(k: int, tau: float, size: int, seed: int, chunk: int = 100_000) -> dict[str, float]:
    """Population values of every metric on ``size`` samples (expectation over the label exact)."""
    rng = np.random.default_rng(seed)
    acc = brier = nll = 0.0
    class_p = np.zeros((k, BINS))
    class_q = np.zeros((k, BINS))
    confs, q_top = [], []
    for start in range(0, size, chunk):
        p, q = draw(k, tau, min(chunk, size - start), rng)
        rows = np.arange(p.shape[0])
        pred = np.argmax(p, axis=1)
        conf, qp = p[rows, pred], q[rows, pred]
        confs.append(conf)
        q_top.append(qp)
        acc += qp.sum()
        brier += np.sum(np.sum(p * p, axis=1) - 2 * np.sum(p * q, axis=1) + 1)
        nll += np.sum(-np.sum(q * np.log(np.clip(p, NLL_EPS, 1 - NLL_EPS)), axis=1))
        b = bin_index(p.ravel(), BINS).reshape(p.shape) + (np.arange(k) * BINS)[None, :]
        class_p += np.bincount(b.ravel(), weights=p.ravel(), minlength=k * BINS).reshape(k, BINS)
        class_q += np.bincount(b.ravel(), weights=q.ravel(), minlength=k * BINS).reshape(k, BINS)
    conf, qp = np.concatenate(confs), np.concatenate(q_top)
    out = {"accuracy": acc / size, "brier": brier / size, "nll": nll / size}
    b = bin_index(conf, BINS)
    counts = np.bincount(b, minlength=BINS)
    gaps = np.bincount(b, weights=qp - conf, minlength=BINS)
    for name, kind in (("ece", "ece"), ("mce", "mce"), ("ece_l2", "l2")):
        out[name] = _binned(gaps, counts, size, kind)
    order = np.argsort(conf, kind="stable")
    chunks = np.array_split(np.arange(size), BINS)
    mass_counts = np.array([c.size for c in chunks])
    mass_gaps = np.array([np.sum(qp[order[c]] - conf[order[c]]) for c in chunks])
    out["ece_equal_mass"] = _binned(mass_gaps, mass_counts, size, "ece")
    out["mce_equal_mass"] = _binned(mass_gaps, mass_counts, size, "mce")
    out["ece_l2_debiased"] = _binned(mass_gaps, mass_counts, size, "l2")  # its target: the binned l2 error
    out["classwise_ece"] = float(np.sum(np.abs(class_q - class_p)) / size / k)
    sigma = smooth.smooth_ece_bandwidth(conf, qp)
    out["smooth_ece"] = smooth.smooth_ece_at(conf, qp, sigma)
    out["overconfidence"] = float(np.mean(conf - qp))  # mean confidence minus the expected accuracy
    return out


def _seed(k: int, tau: float, n: int) -> list[int]:
    return [k, round(tau * 100), n]


def scenario_population(args) -> np.ndarray:
    k, tau, pool, names = args
    with threadpool_limits(1):
        truth = population(k, tau, pool, seed=k + round(tau * 100))
    return np.array([truth[name] for name in names])


def one_replication(args) -> np.ndarray:
    """(metrics, methods, 3) array of the intervals' low, high, centre of one simulated test half."""
    k, tau, n, replication, resamples, names = args
    with threadpool_limits(1):  # one BLAS thread per worker: the workers are the parallelism
        rng = np.random.default_rng([*_seed(k, tau, n), replication])
        p, q = draw(k, tau, n, rng)
        labels = (q.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(0, k - 1)
        estimates = M.compute_metrics(p, labels, names, bins=BINS)
        counts = B.resample_counts(n, resamples, B.bootstrap_seed(0, "coverage", *_seed(k, tau, n), replication))
        replicates = B.bootstrap_replicates([("m", p)], labels, names, counts, bins=BINS)["m"]
        jackknife = B.jackknife_values(p, labels, names, bins=BINS)
    out = np.empty((len(names), len(METHODS), 3))
    for i, name in enumerate(names):
        for j, method in enumerate(METHODS):
            bounds = B.interval(replicates[name], estimates[name], LEVEL, method, jackknife[name], M.spec(name).bounds)
            out[i, j] = bounds.low, bounds.high, bounds.centre
    return out


def regression_population(s: float, names: list[str]) -> np.ndarray:
    """Population value of each regression metric for dispersion error ``s`` (closed form).

    With ``z = (y - mu) / sigma ~ N(0, s^2)`` the PIT is ``Phi(z)``, so the one-sided accuracy of level
    p is ``Phi(Phi^-1(p) / s)`` and the two-sided one ``2 Phi(Phi^-1((1 + p) / 2) / s) - 1``: MSCE on
    :data:`calibrepro.regression.metrics.LEVELS`, the miscalibration area by quadrature, coverage at the
    level.  With ``log sigma ~ N(m, v)``: RMSE ``s sqrt(E sigma^2)``, NLL ``m + s^2/2 + log(2 pi)/2``,
    CRPS ``E sigma (sqrt(2 (1 + s^2) / pi) - 1/sqrt(pi))`` (``E|X - Y| - E|X - X'|/2`` for ``X ~ N(0, 1)``,
    ``Y ~ N(0, s^2)``; Gneiting & Raftery 2007, eq. 21), sharpness ``E sigma^2``.
    """
    from scipy import integrate, stats

    def one(p):
        return stats.norm.cdf(stats.norm.ppf(p) / s)

    def two(p):
        return 2 * stats.norm.cdf(stats.norm.ppf((1 + np.asarray(p)) / 2) / s) - 1

    m, sd = LOG_SIGMA
    levels = RM.LEVELS
    area = integrate.quad(lambda p: abs(two(p) - p), 0, 1, limit=200, epsabs=1e-12)[0]
    values = {
        "msce": np.mean((levels - one(levels)) ** 2),
        "msce_two_sided": np.mean((levels - two(levels)) ** 2),
        "miscalibration_area": area,
        "coverage_90": two(0.9),
        "coverage_95": two(0.95),
        "rmse": s * np.exp(m + sd**2),
        "nll": m + s**2 / 2 + np.log(2 * np.pi) / 2,
        "crps": np.exp(m + sd**2 / 2) * (np.sqrt(2 * (1 + s**2) / np.pi) - 1 / np.sqrt(np.pi)),
        "sharpness": np.exp(2 * m + 2 * sd**2),
    }
    return np.array([float(values[name]) for name in names])


def regression_test_set(s: float, n: int, windows: int, rng: np.random.Generator):
    """One simulated test set: the predictive, the targets and each row's sample index (its window)."""
    if windows:  # n sliding windows of `windows` hours over one stationary AR(1) series of N(0, 1) errors
        hours = n + windows - 1
        e = np.empty(hours)
        e[0] = rng.normal()
        shocks = rng.normal(size=hours) * np.sqrt(1 - AR**2)
        for t in range(1, hours):
            e[t] = AR * e[t - 1] + shocks[t]
        errors = np.lib.stride_tricks.sliding_window_view(e, windows).ravel()
        index = np.repeat(np.arange(n), windows)
    else:
        errors, index = rng.normal(size=n), np.arange(n)
    sigma = np.exp(LOG_SIGMA[0] + LOG_SIGMA[1] * rng.normal(size=errors.size))
    return Gaussian(np.zeros(errors.size), sigma), s * sigma * errors, index


def regression_replication(args) -> np.ndarray:
    """(metrics, methods, 3): the intervals of the mean over ``splits`` simulated test sets (as
    ``regression.uncertainty.mean_intervals`` makes them from the splits' replicates)."""
    label, s, n, splits, windows, replication, resamples, names = args
    with threadpool_limits(1):
        rng = np.random.default_rng([round(s * 100), n, splits, windows, replication])
        estimates, replicates = [], []
        for split in range(splits):
            predictive, y, index = regression_test_set(s, n, windows, rng)
            terms = RM.sample_terms(predictive, y)
            weights = resample_weights(index, resamples, 0, "coverage", label, n, windows, replication, split)
            estimates.append([RM.REGRESSION_METRICS[name].value(terms) for name in names])
            replicates.append([RM.REGRESSION_METRICS[name].value(terms, weights) for name in names])
        estimate, replicate = np.mean(estimates, axis=0), np.mean(replicates, axis=0)
    out = np.empty((len(names), len(REGRESSION_METHODS), 3))
    for i, name in enumerate(names):
        for j, method in enumerate(REGRESSION_METHODS):
            bounds = B.interval(replicate[i], estimate[i], LEVEL, method, bounds=RM.REGRESSION_METRICS[name].bounds)
            out[i, j] = bounds.low, bounds.high, bounds.centre
    return out


def _regression(scenario: tuple) -> bool:
    return scenario[0] == "regression"


def _path(out: Path | None, scenario: tuple) -> Path | None:
    """The scenario's file under ``--out``: ``K10_mild_n5000.npz``, ``regression_mild_n160_S5[_w10].npz``."""
    if out is None:
        return None
    if _regression(scenario):
        _, label, _, n, splits, windows = scenario
        return out / f"regression_{label}_n{n}_S{splits}{f'_w{windows}' if windows else ''}.npz"
    return out / f"K{scenario[0]}_{scenario[1]}_n{scenario[3]}.npz"


def _column(scenario: tuple) -> str:
    if _regression(scenario):
        _, label, _, _, splits, windows = scenario
        return f"{label} S={splits}" + (f" windows of {windows}" if windows else "")
    return f"K={scenario[0]} {scenario[1]}"


def _population_job(scenario: tuple, args, names):
    """The key its population is shared under and the job computing it."""
    if _regression(scenario):
        return ("regression", scenario[2]), (regression_population, (scenario[2], names))
    k, _, tau, _ = scenario
    return (k, tau), (scenario_population, ((k, tau, args.pool, names),))


def _replication_job(scenario: tuple, replication: int, args, names):
    if _regression(scenario):
        _, label, s, n, splits, windows = scenario
        return regression_replication, (label, s, n, splits, windows, replication, args.resamples, names)
    k, _, tau, n = scenario
    return one_replication, (k, tau, n, replication, args.resamples, names)


def _scale(name: str, regression: bool) -> float:
    return 1.0 if regression or name in ("brier", "nll") else 100.0


def _load(path: Path | None, names: list[str], resamples: int, pool: int):
    """The saved ``(truth, intervals)`` of a scenario if its settings match, else None."""
    if path is None or not path.is_file():
        return None
    saved = np.load(path, allow_pickle=False)
    same = list(saved["names"]) == names and int(saved["resamples"]) == resamples and int(saved["pool"]) == pool
    return (saved["truth"], saved["intervals"]) if same else None


def run(args, names: list[str], scenarios: list[tuple]) -> dict:
    """``{scenario: (truth (metrics,), intervals (R, metrics, methods, 3))}``.

    Saved scenarios are loaded; one saved with fewer than R replications gets only the missing ones
    (replication r always draws the same test half and resamples, so R can be raised later).
    """
    results: dict = {}
    todo = []
    pool_size = 0 if args.task == "regression" else args.pool  # closed-form regression populations
    for scenario in scenarios:
        path = _path(args.out, scenario)
        saved = _load(path, names, args.resamples, pool_size)
        have = 0 if saved is None else saved[1].shape[0]
        if saved is not None:
            results[scenario] = saved
        if args.replications > have:
            todo.append((scenario, path, have))
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        populations = {}  # one per (K, tau) or dispersion: the same for every n
        for scenario, _, have in todo:
            key, (function, job) = _population_job(scenario, args, names)
            if have == 0 and key not in populations:
                known = next((results[s][0] for s in results if _population_job(s, args, names)[0] == key), None)
                populations[key] = known if known is not None else pool.submit(function, *job)
        pending = {s: [pool.submit(*_replication_job(s, r, args, names)) for r in range(have, args.replications)]
                   for s, _, have in todo}
        for scenario, path, have in todo:
            new = np.stack([future.result() for future in pending[scenario]])
            if have:
                truth, old = results[scenario]
                intervals = np.concatenate([old, new])
            else:
                truth = populations[_population_job(scenario, args, names)[0]]
                truth = truth if isinstance(truth, np.ndarray) else truth.result()
                intervals = new
            results[scenario] = truth, intervals
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(".part.npz")
                np.savez(partial, names=np.array(names), resamples=args.resamples, pool=pool_size, truth=truth,
                         intervals=intervals)
                partial.replace(path)
            print(f"{_column(scenario)}, n = {scenario[3]}: {intervals.shape[0]} replications, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    return results


def coverage(truth: np.ndarray, intervals: np.ndarray):
    """(metrics, methods) coverage and mean width of the intervals."""
    t = truth[None, :, None]
    covered = (intervals[..., 0] <= t) & (t <= intervals[..., 1])
    return covered.mean(axis=0), (intervals[..., 1] - intervals[..., 0]).mean(axis=0)


def choices(results: dict, names: list[str], scenarios: list[tuple], methods=METHODS) -> dict[str, tuple]:
    """``{metric: (choice, mean |coverage - LEVEL| per method, the same at the largest n)}``: the method
    with the smallest mean deviation over the scenarios, ties within :data:`TIE` to the simpler one."""
    done = [s for s in scenarios if s in results]
    large = np.array([s[3] == max(x[3] for x in done) for s in done])
    out = {}
    for i, name in enumerate(names):
        deviation = np.array([np.abs(coverage(*results[s])[0][i] - LEVEL) for s in done])  # (scenarios, methods)
        scores = dict(zip(methods, deviation.mean(axis=0)))
        best = min(scores.values())
        choice = next(m for m in PREFERENCE if m in scores and scores[m] <= best + TIE)
        out[name] = choice, deviation.mean(axis=0), deviation[large].mean(axis=0)
    return out


def print_tables(results: dict, names: list[str], scenarios: list[tuple], task: str = "classification") -> None:
    regression = task == "regression"
    methods = REGRESSION_METHODS if regression else METHODS
    done = [s for s in scenarios if s in results]
    what = "truth (mean estimate)" if regression else "truth (printed units)"
    for n in sorted({s[3] for s in done}, reverse=True):
        columns = [s for s in done if s[3] == n]
        reps = sorted({results[s][1].shape[0] for s in columns})
        print(f"\n### Coverage, n = {n:,} (R = {'/'.join(map(str, reps))}; "
              f"`{what}: {' / '.join(methods)}`)\n")
        print("| metric | " + " | ".join(_column(s) for s in columns) + " |")
        print("|---|" + "---|" * len(columns))
        for i, name in enumerate(names):
            cells = []
            for s in columns:
                truth, intervals = results[s]
                cover, _ = coverage(truth, intervals)
                scale = _scale(name, regression)
                # the percentile interval's centre is the plug-in estimate (mean over the splits)
                mean = f" ({np.mean(intervals[:, i, 0, 2]) * scale:.4g})" if regression else ""
                cells.append(f"{truth[i] * scale:.4g}{mean}: " + " / ".join(f"{c:.2f}" for c in cover[i]))
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"\nMean width (printed units), n = {n:,}: `{' / '.join(methods)}`\n")
        print("| metric | " + " | ".join(_column(s) for s in columns) + " |")
        print("|---|" + "---|" * len(columns))
        for i, name in enumerate(names):
            cells = []
            for s in columns:
                _, width = coverage(*results[s])
                cells.append(" / ".join(f"{w * _scale(name, regression):.3g}" for w in width[i]))
            print(f"| {name} | " + " | ".join(cells) + " |")
    largest = max(s[3] for s in done)
    print(f"\n### {'Regression: choice' if regression else 'Choice'} per metric (smallest mean |coverage - {LEVEL}| "
          f"over the {len(done)} scenarios; "
          f"n = {largest:,} alone in brackets)\n")
    print("| metric | " + " | ".join(methods) + " | choice | now |")
    print("|---|" + "---|" * (len(methods) + 2))
    for name, (choice, scores, large) in choices(results, names, scenarios, methods).items():
        cells = " | ".join(f"{a:.3f} ({b:.3f})" for a, b in zip(scores, large))
        print(f"| {name} | {cells} | {choice} | {M.spec(name, 'regression' if regression else None).interval} |")
    print(f"\n(ties within {TIE}: {' > '.join(m for m in PREFERENCE if m in methods)}; "
          f"`now`: `Metric.interval`, what `auto` uses)")


def _scenarios(args) -> tuple[list[str], list[tuple]]:
    """The metrics and the scenarios of the command line, in its order."""
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.task == "regression":
        names = (args.metrics or ",".join(RM.REGRESSION_METRICS)).split(",")
        dispersions = [(label, DISPERSIONS[label]) for label in (args.calibrations or ",".join(DISPERSIONS)).split(",")]
        splits = [int(s) for s in args.splits.split(",")]
        scenarios = [("regression", label, s, n, k, args.windows)
                     for n in sizes for k in splits for label, s in dispersions]
        return names, scenarios
    names = (args.metrics or ",".join(M.METRICS)).split(",")
    calibrations = [(label, CALIBRATIONS[label]) for label in (args.calibrations or ",".join(CALIBRATIONS)).split(",")]
    classes = [int(k) for k in args.classes.split(",")]
    return names, [(k, label, tau, n) for n in sizes for (label, tau), k in itertools.product(calibrations, classes)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=("classification", "regression"), default="classification")
    parser.add_argument("--replications", type=int, default=200, help="R test halves per scenario (0: print saved)")
    parser.add_argument("--resamples", type=int, default=1000, help="B bootstrap resamples")
    parser.add_argument("--pool", type=int, default=1_000_000, help="samples of the population values")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sizes", help="test sizes n (comma-separated; default 5000,500, regression 160,400,2000; "
                                        "with --windows: windows per test set)")
    parser.add_argument("--metrics", help="default: every metric of the task")
    parser.add_argument("--calibrations", help="scenarios, in this order (regression: keys of DISPERSIONS)")
    parser.add_argument("--classes", default="10,100", help="K of the scenarios, in this order")
    parser.add_argument("--splits", default="1,5", help="regression: test sets averaged per replication")
    parser.add_argument("--windows", type=int, default=0, help="regression: hours per window (0: iid samples)")
    parser.add_argument("--out", type=Path, help="folder of the saved scenarios (reused by a rerun)")
    args = parser.parse_args()
    args.sizes = args.sizes or ("160,400,2000" if args.task == "regression" else "5000,500")
    names, scenarios = _scenarios(args)
    start, cpu = time.perf_counter(), time.process_time()
    print(f"{args.task}: R = {args.replications} replications, B = {args.resamples}, level {LEVEL}, "
          f"jobs {args.jobs}, {len(names)} metrics, {len(scenarios)} scenarios", flush=True)
    results = run(args, names, scenarios)
    print_tables(results, names, scenarios, args.task)
    children = __import__("os").times()
    print(f"\ntotal {time.perf_counter() - start:.0f} s wall, "
          f"{children.children_user + children.children_system + time.process_time() - cpu:.0f} s CPU")


if __name__ == "__main__":
    main()
