"""Metrics of predictive distributions: calibration (MSCE, miscalibration area, coverage), accuracy, scores.

Every metric is computed from per-sample *terms* of a predictive and the targets
(:func:`sample_terms`: the PIT value ``u_t = F_t(y_t)``, the squared error of the mean, the negative
log density, the CRPS and the predictive variance) and optional per-sample *weights* (None = all 1).
That is the resampled form: the bootstrap (:mod:`calibrepro.bootstrap`'s counts) passes a block of
count rows (B, N) as weights and :meth:`RegressionMetric.value` returns the B resamples' values at
once, without touching the model or the recalibrator.  The metrics are registered with
:func:`calibrepro.metrics.register` under the task ``"regression"`` (``nll`` is also a
classification metric: each task has its own namespace).

Confidence levels.  The seed defines ``MSCE = (1/m) sum_j (p_j - accuracy(p_j))^2`` without
stating m or the p_j; we use its recalibration grid ``p_j in {0, 0.01, ..., 1.00}`` (m = 101,
:data:`LEVELS`; Kuleshov et al. 2018, section 3.5, also use equally spaced levels), a parameter
of every function.  The accuracy of level p is the fraction of targets inside the interval of
confidence p:

* one-sided ``(-inf, F_t^-1(p)]``: ``accuracy(p) = mean_t 1(u_t <= p)`` (seed; Kuleshov eq. 9);
* two-sided, the central interval ``[F_t^-1((1-p)/2), F_t^-1((1+p)/2)]``:
  ``accuracy(p) = mean_t 1(|2 u_t - 1| <= p)``.

Differences from uncertainty-toolbox (Chung et al. 2021), which the tests cross-check: its
"quantile" proportions count ``(mu - y)/sigma <= Phi^-1(p)``, i.e. the *upper* tail
``1(u_t >= 1 - p)`` (ours equal its values on mirrored targets ``2 mu - y``); its default levels are
``linspace(0, 1, 100)``; its miscalibration area is the trapezoid area on those levels (ours is the
exact area of the step curve); its sharpness is ``sqrt(mean var)`` (ours, Kuleshov's: ``mean var``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from calibrepro.metrics import Metric, register
from calibrepro.regression.distributions import Predictive

__all__ = [
    "LEVELS",
    "REGRESSION_METRICS",
    "RegressionMetric",
    "SampleTerms",
    "accuracy_curve",
    "compute_regression_metrics",
    "coverage",
    "crps",
    "mean_absolute_calibration_error",
    "miscalibration_area",
    "msce",
    "nll",
    "rmse",
    "sample_terms",
    "sharpness",
]

#: the seed's confidence levels {0, 0.01, ..., 1.00}
LEVELS = np.linspace(0.0, 1.0, 101)


@dataclass(frozen=True)
class SampleTerms:
    """Per-sample quantities every metric is a function of (arrays of length N; None = not computed)."""

    pit: np.ndarray
    squared_error: np.ndarray | None = None
    neg_log_density: np.ndarray | None = None
    crps: np.ndarray | None = None
    variance: np.ndarray | None = None


def sample_terms(
    predictive: Predictive, y, need: tuple[str, ...] = ("squared_error", "neg_log_density", "crps", "variance")
) -> SampleTerms:
    """PIT values ``F_t(y_t)`` and the terms in ``need``, computed once per predictive."""
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (len(predictive),):
        raise ValueError(f"y must have shape ({len(predictive)},), got {y.shape}")
    mean_var = getattr(predictive, "mean_var", None)
    if {"squared_error", "variance"} & set(need):
        mean, var = mean_var() if mean_var else (predictive.mean(), predictive.var())
    return SampleTerms(
        pit=predictive.cdf(y),
        squared_error=(y - mean) ** 2 if "squared_error" in need else None,
        neg_log_density=-predictive.logpdf(y) if "neg_log_density" in need else None,
        crps=predictive.crps(y) if "crps" in need else None,
        variance=var if "variance" in need else None,
    )


def _weights(n: int, weights) -> np.ndarray | None:
    """None, or (n,) weights, or (B, n): one row per resample (each row non-negative, not all 0)."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim not in (1, 2) or w.shape[-1] != n or (w < 0).any() or (w.sum(axis=-1) <= 0).any():
        raise ValueError(f"weights must be rows of {n} non-negative numbers, not all 0")
    return w


def _value(x):
    """A float for one sample's weights, the (B,) array for a block of resamples."""
    return float(x) if np.ndim(x) == 0 else x


def _central(pit: np.ndarray, sided: str) -> np.ndarray:
    if sided == "one":
        return np.asarray(pit, dtype=np.float64)
    if sided == "two":
        return np.abs(2.0 * np.asarray(pit, dtype=np.float64) - 1.0)
    raise ValueError(f"sided must be 'one' or 'two', got {sided!r}")


def accuracy_curve(pit, levels=LEVELS, sided: str = "one", weights=None) -> np.ndarray:
    """Observed confidence ``accuracy(p_j)`` at each level (module docstring; the reliability curve).

    One-sided: ``mean 1(u_t <= p)``; two-sided: ``mean 1(|2 u_t - 1| <= p)``; weighted means when
    ``weights`` are given.  Sorting once makes it O((N + m) log N).
    """
    v = _central(pit, sided)
    levels = np.asarray(levels, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    w = _weights(v.size, weights)
    cum = np.arange(1, v.size + 1, dtype=np.float64) if w is None else np.cumsum(w[..., order], axis=-1)
    k = np.searchsorted(v[order], levels, side="right")
    return np.where(k > 0, cum[..., np.maximum(k - 1, 0)], 0.0) / cum[..., -1:]


def msce(pit, levels=LEVELS, sided: str = "one", weights=None) -> float:
    """Mean squared calibration error (seed 002, "MSCE"; Kuleshov et al. 2018, eq. 9 with w_j = 1):
    ``(1/m) sum_j (p_j - accuracy(p_j))^2`` over the levels ``p_j`` (default :data:`LEVELS`)."""
    levels = np.asarray(levels, dtype=np.float64)
    return _value(np.mean((levels - accuracy_curve(pit, levels, sided, weights)) ** 2, axis=-1))


def mean_absolute_calibration_error(pit, levels=LEVELS, sided: str = "one", weights=None) -> float:
    """``(1/m) sum_j |p_j - accuracy(p_j)|`` (uncertainty-toolbox's MACE; used by :class:`StdScaling`'s criteria)."""
    levels = np.asarray(levels, dtype=np.float64)
    return _value(np.mean(np.abs(levels - accuracy_curve(pit, levels, sided, weights)), axis=-1))


def miscalibration_area(pit, sided: str = "two", weights=None) -> float:
    """Area between the reliability curve and the diagonal, ``int_0^1 |accuracy(p) - p| dp`` (Chung et al. 2021).

    Exact for the empirical (step) curve: between consecutive sorted values ``v_(k) < v_(k+1)`` the
    curve is the constant c = (weight share of the first k) and ``int_a^b |c - p| dp`` is closed
    form.  Two-sided (central intervals) by default, as uncertainty-toolbox's default.
    """
    v = _central(pit, sided)
    order = np.argsort(v, kind="stable")
    w = _weights(v.size, weights)
    w = np.ones(v.size) if w is None else w[..., order]
    edges = np.concatenate([[0.0], np.clip(v[order], 0.0, 1.0), [1.0]])
    cum = np.cumsum(w, axis=-1)
    c = np.concatenate([np.zeros(w.shape[:-1] + (1,)), cum / cum[..., -1:]], axis=-1)
    a, b = edges[:-1], edges[1:]
    below = ((b - c) ** 2 - (a - c) ** 2) / 2  # c <= a: curve under the diagonal on [a, b]
    above = ((c - a) ** 2 - (c - b) ** 2) / 2  # c >= b
    across = ((c - a) ** 2 + (b - c) ** 2) / 2
    return _value(np.sum(np.where(c <= a, below, np.where(c >= b, above, across)), axis=-1))


def coverage(pit, level: float, weights=None) -> float:
    """Fraction of targets in the central interval of confidence ``level``: ``mean 1(|2 u_t - 1| <= level)``."""
    return _value(accuracy_curve(pit, [level], "two", weights)[..., 0])


def _mean(values: np.ndarray, weights):
    w = _weights(values.size, weights)
    if w is None:
        return float(np.mean(values))
    with np.errstate(invalid="ignore"):  # an infinite term (no density, no mean) times a count of 0: NaN, left out
        return _value(w @ values / w.sum(axis=-1))


def rmse(squared_error, weights=None) -> float:
    """Root mean squared error of the predictive mean, ``sqrt(mean_t (y_t - E[Y_t])^2)``."""
    return _value(np.sqrt(_mean(squared_error, weights)))


def nll(neg_log_density, weights=None) -> float:
    """Mean negative log predictive density ``-(1/N) sum_t log f_t(y_t)`` of the predictive itself.

    Gaussian: the Gaussian NLL ``log sigma + (y - mu)^2 / (2 sigma^2) + log(2 pi)/2``; mixture: the
    log of the mixture density; Student-t: its log density; isotonic recalibration: the density of
    ``T(F_t)``, ``log T'(F_t(y)) + log f_t(y)``.  Not a Gaussian fitted to the moments.
    """
    return _mean(neg_log_density, weights)


def crps(crps_terms, weights=None) -> float:
    """Mean continuous ranked probability score (Gneiting & Raftery 2007, eq. 20); per-sample forms in
    :mod:`.distributions` (Gaussian: Gneiting et al. 2005, eq. 5; mixture: Grimit et al. 2006;
    Student-t: Jordan et al. 2019; otherwise the quantile-score integral, numerically)."""
    return _mean(crps_terms, weights)


def sharpness(variance, weights=None) -> float:
    """Mean predicted variance ``(1/N) sum_t var(F_t)`` (Kuleshov et al. 2018, section 3.3, "sharpness")."""
    return _mean(variance, weights)


@dataclass(frozen=True)
class RegressionMetric(Metric):
    """A regression metric: the shared spec (:class:`calibrepro.metrics.Metric`: name, direction, the
    bootstrap interval method of ``uncertainty.interval: auto``) with the term it needs and :meth:`value`
    from terms and weights, which is also its resampled form (weights: a (B, N) block of bootstrap
    counts).  ``function(data, weights, levels)``; ``higher_is_better`` None for coverage (closest to
    its level is best).  ``interval``, the method of ``uncertainty.interval: auto``, is the regression coverage
    study's choice (``benchmarks/bench_coverage.py --task regression``, table in benchmarks/README.md):
    the plug-in calibration errors (MSCE, miscalibration area) are biased upwards and a resample more so, so
    their percentile interval lies above the truth (coverage 0.00-0.64 for calibrated to mildly
    miscalibrated models, means over 5 splits): ``basic`` for MSCE and the area, ``debiased`` for the
    two-sided MSCE, both clipped at 0 (:func:`calibrepro.bootstrap.clip`); ``percentile`` for the means of
    per-sample terms (coverage, RMSE, NLL, CRPS, sharpness: every method 0.9-0.99)."""

    term: str = "pit"
    reference: str = ""
    target: float | None = None  # the ideal value, where there is one (coverage)
    #: why the value can be NaN or infinite (a moment that does not exist, no density), said in the log
    #: instead of writing it (:meth:`calibrepro.regression.task.RegressionTask.write_evaluation`)
    undefined: str = ""

    def value(self, terms: SampleTerms, weights=None, levels=LEVELS):
        data = getattr(terms, self.term)
        if data is None:
            raise ValueError(f"metric {self.name} needs the term {self.term!r}, which was not computed")
        return self.function(data, weights, levels)


#: why a metric of each term can be undefined (the PIT values are always defined)
_UNDEFINED = {
    "squared_error": "the predictive mean does not exist (a Student-t with df <= 1)",
    "neg_log_density": "the predictive has no density at the target (spread 0: a point mass)",
    "crps": "the CRPS is infinite where the predictive mean does not exist (a Student-t with df <= 1)",
    "variance": "the predictive variance does not exist (a Student-t with df <= 2)",
}


def _metric(name, higher, term, function, reference, target=None, bounds=(0.0, None),
            interval="percentile") -> RegressionMetric:
    spec = RegressionMetric(name, function, higher, interval=interval, bounds=bounds, term=term, reference=reference,
                            target=target, undefined=_UNDEFINED.get(term, "a non-finite value"))
    return register(spec, "regression")


REGRESSION_METRICS: dict[str, RegressionMetric] = {
    m.name: m
    for m in [
        _metric("msce", False, "pit", lambda u, w, levels: msce(u, levels, "one", w),
                "seed 002; Kuleshov et al. 2018, eq. 9", interval="basic"),
        _metric("msce_two_sided", False, "pit", lambda u, w, levels: msce(u, levels, "two", w),
                "seed 002, central intervals", interval="debiased"),
        _metric("miscalibration_area", False, "pit", lambda u, w, _: miscalibration_area(u, "two", w),
                "Chung et al. 2021", interval="basic"),
        _metric("coverage_90", None, "pit", lambda u, w, _: coverage(u, 0.9, w), "central 90 % interval", 0.9, (0, 1)),
        _metric("coverage_95", None, "pit", lambda u, w, _: coverage(u, 0.95, w), "central 95 % interval", 0.95,
                (0, 1)),
        _metric("rmse", False, "squared_error", lambda t, w, _: rmse(t, w), "RMSE of the predictive mean"),
        _metric("nll", False, "neg_log_density", lambda t, w, _: nll(t, w), "mean negative log density",
                bounds=(None, None)),
        _metric("crps", False, "crps", lambda t, w, _: crps(t, w), "Gneiting & Raftery 2007, eq. 20"),
        _metric("sharpness", False, "variance", lambda t, w, _: sharpness(t, w), "Kuleshov et al. 2018, 3.3"),
    ]
}


def compute_regression_metrics(
    predictive: Predictive, y, names=tuple(REGRESSION_METRICS), levels=LEVELS
) -> dict[str, float]:
    """``{name: value}`` for the metric keys ``names`` (each term computed once, only if needed)."""
    unknown = [n for n in names if n not in REGRESSION_METRICS]
    if unknown:
        raise ValueError(f"unknown regression metric(s) {', '.join(unknown)}; known: {', '.join(REGRESSION_METRICS)}")
    need = tuple({REGRESSION_METRICS[n].term for n in names} - {"pit"})
    terms = sample_terms(predictive, y, need)
    return {n: REGRESSION_METRICS[n].value(terms, levels=levels) for n in names}
