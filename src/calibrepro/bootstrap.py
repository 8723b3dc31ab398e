"""Bootstrap intervals of every metric over the test half, from multinomial counts.

A bootstrap resample of the N test samples is a vector of counts ``w`` (how often each sample is
drawn; ``sum w = N``): :func:`resample_counts` draws B of them, shared by every method of a model
(paired comparisons), and :func:`bootstrap_replicates` evaluates every metric on them through its
resampled form (:mod:`calibrepro.resampling`, declared in the metric's spec).

The estimates (the ``estimate`` column) are not taken from the resampled forms but from
:func:`calibrepro.metrics.compute_metrics` on the original sample, so they equal ``metrics.csv``
exactly.  Replicates are deterministic for a given seed and independent of the block size.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy import special
from threadpoolctl import threadpool_limits

from calibrepro import metrics as M
from calibrepro.metrics.bins import check_inputs
from calibrepro.resampling import Resampling

#: count matrices are processed in blocks of about this many entries (bounds memory: 64 MB of
#: float64 per block; large blocks keep the dense products of classwise-ECE efficient)
_BLOCK_ENTRIES = 1 << 23


def bootstrap_seed(seed: int, *keys: object) -> np.random.SeedSequence:
    """Seed sequence of one cell's resamples: the configured seed and the cell's keys (stable hash)."""
    return np.random.SeedSequence([int(seed), *(zlib.crc32(str(key).encode("utf-8")) for key in keys)])


def resample_counts(n: int, resamples: int, seed) -> np.ndarray:
    """``(resamples, n)`` multinomial counts of ``n`` draws with replacement from ``n`` samples.

    Row r are the counts of the r-th resample (``np.bincount`` of n uniform draws), as uint16.
    """
    if resamples < 1:
        raise ValueError(f"the number of bootstrap resamples must be at least 1, got {resamples}")
    rng = np.random.default_rng(seed)
    counts = np.empty((resamples, n), dtype=np.uint16)
    rows = max(1, _BLOCK_ENTRIES // max(n, 1))
    for start in range(0, resamples, rows):
        b = min(rows, resamples - start)
        draws = rng.integers(0, n, size=(b, n))
        draws += (np.arange(b) * n)[:, None]
        counts[start : start + b] = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
    return counts


def bootstrap_replicates(
    methods: Iterable[tuple[str, np.ndarray]],
    labels: np.ndarray,
    names: Sequence[str],
    counts: np.ndarray,
    *,
    bins: int = 15,
) -> dict[str, dict[str, np.ndarray]]:
    """``{method: {metric: (B,) replicates}}`` on the resamples ``counts`` (shared: paired).

    ``methods`` yields ``(name, probs)`` one at a time, so only one probability matrix needs to be
    in memory.
    """
    n = counts.shape[1]
    rows = max(1, _BLOCK_ENTRIES // max(n, 1))
    out: dict[str, dict[str, np.ndarray]] = {}
    for method, probs in methods:
        # one BLAS thread: OpenBLAS splits the sums of some products over its threads, so their
        # rounding (and the last digits of intervals.csv) would depend on the thread count; the
        # pipeline runs models in parallel instead (one bootstrap job per model, snakemake --cores)
        with threadpool_limits(1, user_api="blas"):
            resampler = Resampling(probs, labels, names, bins)
            blocks = [resampler.replicates(counts[s : s + rows]) for s in range(0, counts.shape[0], rows)]
        out[method] = {name: np.concatenate([block[name] for block in blocks]) for name in names}
    return out


#: the interval methods of ``uncertainty.interval`` (besides ``auto``: each metric's :attr:`Metric.interval`)
INTERVAL_METHODS = ("percentile", "basic", "bca", "debiased")
#: groups of the grouped jackknife that estimates BCa's acceleration
JACKKNIFE_GROUPS = 20


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval ``[low, high]`` and the point estimate it belongs to (``centre``).

    ``centre`` is the interval's own limit at level 0: the plug-in estimate for the percentile
    interval, the bias-corrected estimate for the basic and debiased intervals, BCa's
    median-corrected point for BCa; it always lies in ``[low, high]``, the plug-in estimate may not.
    """

    low: float
    high: float
    centre: float


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"the interval level must lie in (0, 1), got {level}")


def _quantiles(replicates: np.ndarray, probabilities) -> np.ndarray:
    return np.quantile(replicates, probabilities)


def percentile_interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    """Bootstrap percentile interval (Efron & Tibshirani 1993, "An Introduction to the Bootstrap", eq. 13.5).

    The ``(1 - level)/2`` and ``(1 + level)/2`` quantiles of the replicates (numpy's default
    linear interpolation).  Right when the bootstrap distribution is centred on the estimate as the
    estimate's is on the truth; a biased statistic (binned ECE: upwards, a resample with its
    duplicated samples more so) shifts it, and for a small ECE it can lie above the estimate.
    """
    _check_level(level)
    low, high = _quantiles(replicates, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def basic_interval(replicates: np.ndarray, estimate: float, level: float) -> Interval:
    """Basic (pivotal) bootstrap interval (Davison & Hinkley 1997, "Bootstrap Methods", eq. 5.6).

    ``[2 t - q_high, 2 t - q_low]`` with ``t`` the estimate and ``q`` the percentile interval's
    quantiles: the distribution of ``t* - t`` stands for that of ``t - truth``, so the bootstrap's
    bias is subtracted once more.  Centre: the median-bias-corrected estimate ``2 t - median(t*)``.
    """
    _check_level(level)
    low, median, high = _quantiles(replicates, [(1 - level) / 2, 0.5, (1 + level) / 2])
    return Interval(float(2 * estimate - high), float(2 * estimate - low), float(2 * estimate - median))


def debiased_interval(replicates: np.ndarray, estimate: float, level: float) -> Interval:
    """Percentile interval of the bias-corrected statistic (Efron & Tibshirani 1993, sec. 10.6).

    The bootstrap estimate of the bias is ``b = median(t*) - t`` (the median: robust, and the centre
    stays inside); the corrected statistic ``t - b`` has bootstrap distribution ``t* - 2b``, whose
    percentile interval this is.  Same centre as :func:`basic_interval`; unlike it, the shape of the
    bootstrap distribution is kept instead of mirrored (a right-skewed ECE stays right-skewed).
    """
    _check_level(level)
    low, median, high = _quantiles(replicates, [(1 - level) / 2, 0.5, (1 + level) / 2])
    bias = median - estimate
    return Interval(float(low - 2 * bias), float(high - 2 * bias), float(estimate - bias))


def bca_interval(replicates: np.ndarray, estimate: float, level: float, jackknife: np.ndarray) -> Interval:
    """Bias-corrected and accelerated (BCa) interval (Efron 1987; Efron & Tibshirani 1993, eqs. 14.9-14.15).

    Quantiles ``Phi(z0 + (z0 + z) / (1 - a (z0 + z)))`` of the replicates for ``z = -/+ z_(1+level)/2``,
    with the bias correction ``z0 = Phi^-1(share of t* below t, ties counted half)`` (clipped to
    ``[1/(2B), 1 - 1/(2B)]``) and the acceleration ``a = sum d^3 / (6 (sum d^2)^1.5)``,
    ``d = mean(jackknife) - jackknife`` (grouped jackknife, :func:`jackknife_values`).  Centre:
    the ``z = 0`` point.
    """
    _check_level(level)
    r = np.asarray(replicates, dtype=np.float64)
    b = r.size
    share = (np.count_nonzero(r < estimate) + 0.5 * np.count_nonzero(r == estimate)) / b
    z0 = special.ndtri(min(max(share, 0.5 / b), 1 - 0.5 / b))
    d = np.mean(jackknife) - np.asarray(jackknife, dtype=np.float64)
    squares = float(np.sum(d * d))
    a = float(np.sum(d**3)) / (6 * squares**1.5) if squares > 0 else 0.0
    z = special.ndtri((1 + level) / 2)
    points = np.array([-z, 0.0, z]) + z0
    low, centre, high = _quantiles(r, special.ndtr(z0 + points / (1 - a * points)))
    return Interval(float(low), float(high), float(centre))


def jackknife_values(probs, labels, names: Sequence[str], *, bins: int = 15, groups: int = JACKKNIFE_GROUPS
                     ) -> dict[str, np.ndarray]:
    """Each metric without each of ``groups`` groups of samples (sample i in group ``i mod groups``).

    The grouped (delete-d) jackknife (Efron & Tibshirani 1993, sec. 11.5) that BCa's acceleration
    needs: ``groups`` evaluations instead of N; the test half's order is random (the split), so the
    groups are random too.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    groups = min(groups, n)
    if groups < 2:
        return {name: np.zeros(1) for name in names}
    member = np.arange(n) % groups
    rows = [M.compute_metrics(probs[member != g], labels[member != g], names, bins=bins) for g in range(groups)]
    return {name: np.array([row[name] for row in rows]) for name in names}


def clip(bounds: Interval, low: float | None = None, high: float | None = None) -> Interval:
    """``bounds`` intersected with the metric's range ``[low, high]`` (None: unbounded on that side).

    Each of low, high and centre is clamped into the range (an interval wholly outside it becomes
    the range's nearest point).  For every true value inside the range, ``truth in bounds`` and
    ``truth in clip(bounds)`` are the same event, so clipping keeps the coverage and only drops
    impossible values (a negative ECE); docs/decisions.md, "Intervals clipped to the metric's range".
    """
    def clamp(value: float) -> float:
        value = value if low is None else max(value, low)
        return float(value if high is None else min(value, high))

    return Interval(clamp(bounds.low), clamp(bounds.high), clamp(bounds.centre))


def _interval(replicates: np.ndarray, estimate: float, level: float, method: str, jackknife) -> Interval:
    if method == "percentile":
        low, high = percentile_interval(replicates, level)
        return Interval(low, high, float(estimate))
    if method == "basic":
        return basic_interval(replicates, estimate, level)
    if method == "debiased":
        return debiased_interval(replicates, estimate, level)
    if method == "bca":
        if jackknife is None:
            raise ValueError("the BCa interval needs the jackknife values (jackknife_values)")
        return bca_interval(replicates, estimate, level, jackknife)
    raise ValueError(f"unknown interval method {method!r}; known: {', '.join(INTERVAL_METHODS)}")


def interval(replicates: np.ndarray, estimate: float, level: float, method: str, jackknife=None,
             bounds: tuple[float | None, float | None] = (None, None)) -> Interval:
    """The ``method`` interval (:data:`INTERVAL_METHODS`) of ``estimate`` from its replicates.

    ``bounds``: the metric's range (:attr:`calibrepro.metrics.Metric.bounds`), see :func:`clip`.
    """
    return clip(_interval(replicates, estimate, level, method, jackknife), *bounds)


def interval_method(metric: str, choice: str, task: str | None = None) -> str:
    """The interval method of ``metric`` (of ``task``: :func:`calibrepro.metrics.spec`) under
    ``uncertainty.interval: choice`` (``auto``: the metric's own)."""
    if choice != "auto":
        return choice
    spec = M.spec(metric, task)
    return spec.interval if spec is not None else "percentile"


def paired_differences(
    replicates: Mapping[str, np.ndarray],
    estimates: Mapping[str, float],
    best: str,
    level: float,
    method: str = "percentile",
    jackknife: Mapping[str, np.ndarray] | None = None,
) -> dict[str, tuple[float, float, float]]:
    """Each method minus ``best`` on the same resamples: ``{method: (difference, low, high)}``.

    The interval of the difference is of the same ``method`` as the metric's own intervals (BCa:
    the difference of the jackknife values, same groups).  The difference of ``best`` with itself
    is exactly 0 (the same array subtracted).
    """
    out = {}
    for name, values in replicates.items():
        difference = estimates[name] - estimates[best]
        if name == best:
            out[name] = (0.0, 0.0, 0.0)
            continue
        jack = None if jackknife is None else jackknife[name] - jackknife[best]
        bounds = interval(values - replicates[best], difference, level, method, jack)
        out[name] = (difference, bounds.low, bounds.high)
    return out


@dataclass(frozen=True)
class MetricInterval:
    """A metric's estimate on the whole sample and its bootstrap interval (:func:`metric_intervals`).

    ``centre``: the estimate the interval belongs to (:attr:`Interval.centre`); ``interval``: its method;
    ``level`` and ``resamples`` (B) as asked.
    """

    estimate: float
    low: float
    high: float
    centre: float
    interval: str
    level: float
    resamples: int


def metric_intervals(probs, labels, names: Sequence[str] = ("accuracy", "brier", "ece", "mce", "nll"), *,
                     bins: int = 15, resamples: int = 1000, level: float = 0.95, interval: str = "auto",
                     seed=0) -> dict[str, MetricInterval]:
    """``{metric: MetricInterval}``: each metric of ``names`` on ``probs`` (N, K) and ``labels`` (N,), with its
    bootstrap interval, as the pipeline's bootstrap step computes one cell.

    The estimates are :func:`calibrepro.metrics.compute_metrics` (equal to ``metrics.csv``'s); the replicates
    are the metrics on ``resamples`` multinomial resamples of the N rows (:func:`resample_counts` seeded with
    ``seed``, an int or a ``numpy.random.SeedSequence``); the interval of each metric is ``interval``
    (:data:`INTERVAL_METHODS`, or ``auto``: the metric's own, :func:`interval_method`; BCa with its
    grouped jackknife) at ``level``, clipped to the metric's range (:func:`interval`).
    """
    _check_level(level)
    estimates = M.compute_metrics(probs, labels, names, bins=bins)
    p, y = check_inputs(probs, labels)
    jackknifed = [name for name in names if interval_method(name, interval) == "bca"]
    jackknife = jackknife_values(p, y, jackknifed, bins=bins) if jackknifed else {}
    counts = resample_counts(len(y), resamples, seed)
    replicates = bootstrap_replicates([("probs", p)], y, names, counts, bins=bins)["probs"]
    return intervals_from(estimates, replicates, level, interval, jackknife=jackknife)


def intervals_from(estimates: Mapping[str, float], replicates: Mapping[str, np.ndarray], level: float,
                   interval: str = "auto", *, jackknife: Mapping[str, np.ndarray] | None = None,
                   task: str | None = None) -> dict[str, MetricInterval]:
    """``{metric: MetricInterval}`` of every metric of ``estimates`` (of ``task``'s registry) from its (B,)
    ``replicates``: the ``interval`` method (``auto``: the metric's own; BCa needs its ``jackknife`` values)
    at ``level``, clipped to the metric's range."""
    _check_level(level)
    out = {}
    for name, estimate in estimates.items():
        method = interval_method(name, interval, task)
        spec = M.spec(name, task)
        bounds = clip(_interval(replicates[name], estimate, level, method, (jackknife or {}).get(name)),
                      *(spec.bounds if spec is not None else (None, None)))
        out[name] = MetricInterval(float(estimate), bounds.low, bounds.high, bounds.centre, method, float(level),
                                   int(len(replicates[name])))
    return out
