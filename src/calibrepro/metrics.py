"""Calibration metrics of the thesis (section 3.2, equations (5)-(10)), vectorised, in float64.

Every metric takes ``probs`` (N, K) -- rows are probability vectors -- and integer ``labels``
(N,), and returns a Python float; ECE/MCE-type metrics are *fractions* (the report multiplies
by 100 to print percent).  Nothing here loops over samples in Python.

Conventions (docs/decisions.md, "Metrics"; they are what reproduce the thesis's printed cells):

* **Predicted class** ``argmax_k p_ik`` with ties going to the lowest class index (``np.argmax``);
  the **top-label confidence** is ``max_k p_ik``.
* **Equal-width bins** (Guo et al. 2017): bin ``m = 1..M`` is the half-open interval
  ``((m-1)/M, m/M]``; a value of exactly 0 belongs to bin 1, exactly 1.0 to bin M.  The edges
  are the float64 numbers ``m/M`` (correctly rounded), and a value equal to an edge belongs to
  the bin on its left.  See :func:`bin_index`.
* **Equal-mass (adaptive) bins** (Nixon et al. 2019): the confidences are sorted (stable sort,
  so exactly equal confidences keep sample order) and cut into M contiguous chunks whose sizes
  differ by at most one, the first ``N mod M`` chunks holding the extra sample (the same split
  as ``numpy.array_split`` / ``torch.tensor_split``).  Tied confidences may therefore be split
  across two chunks; empty chunks (N < M) are skipped.
* **NLL** clips probabilities to ``[1e-15, 1 - 1e-15]`` and renormalises every row before
  taking the log, exactly as scikit-learn's ``log_loss`` did up to version 1.4 (with its old
  default ``eps=1e-15``).  Histogram binning and isotonic regression output exact zeros; with
  this convention their NLL is finite and equals the thesis's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "METRICS",
    "MeanOfTerms",
    "Metric",
    "accuracy",
    "bin_index",
    "brier",
    "classwise_ece",
    "compute_metrics",
    "ece",
    "ece_equal_mass",
    "ece_l2",
    "ece_l2_debiased",
    "mce",
    "mce_equal_mass",
    "nll",
    "register",
    "smooth_ece",
    "spec",
]

#: Clip of the NLL, as scikit-learn's ``log_loss(eps=1e-15)`` (versions <= 1.4).
NLL_EPS = 1e-15
#: Rows of the NLL clip are processed in chunks of about this many entries (bounds memory).
_CHUNK_ELEMENTS = 1 << 20


# --------------------------------------------------------------------------------------------
# input handling and binning
# --------------------------------------------------------------------------------------------
def check_inputs(probs, labels) -> tuple[np.ndarray, np.ndarray]:
    """Return ``probs`` as a C-contiguous float64 (N, K) array and ``labels`` as int64 (N,)."""
    p = np.ascontiguousarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 2:
        raise ValueError(f"probs must be a 2-D array (N, K), got shape {p.shape}")
    if y.ndim != 1 or y.shape[0] != p.shape[0]:
        raise ValueError(f"labels must have shape ({p.shape[0]},), got {y.shape}")
    if p.shape[0] == 0:
        raise ValueError("metrics need at least one sample")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
            pass
        else:
            raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    y = y.astype(np.int64, copy=False)
    if y.min() < 0 or y.max() >= p.shape[1]:
        raise ValueError(f"labels must lie in [0, {p.shape[1] - 1}]")
    if not np.isfinite(p).all():
        raise ValueError("probs contain NaN or infinite values")
    return p, y


def bin_edges(bins: int) -> np.ndarray:
    """Float64 bin edges ``m / M`` for m = 0..M (correctly rounded divisions)."""
    if int(bins) != bins or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    return np.arange(bins + 1, dtype=np.float64) / float(bins)


def bin_index(values: np.ndarray, bins: int = 15) -> np.ndarray:
    """0-based equal-width bin of each value: index ``m-1`` such that ``(m-1)/M < v <= m/M``.

    The comparison is made against the float64 edges ``m/M``, so a value that *is* an edge
    (e.g. ``0.2`` with M=5) goes to the bin on its left; 0 goes to the first bin and values
    above 1 (impossible for probabilities) to the last.  ``ceil(v*M)`` alone is not enough:
    ``fl(7/25)*25`` rounds above 7, so the first guess is corrected against the edge table.
    """
    edges = bin_edges(bins)
    v = np.asarray(values, dtype=np.float64)
    guess = np.multiply(v, bins)
    np.ceil(guess, out=guess)
    np.clip(guess, 1, bins, out=guess)
    m = guess.astype(np.intp)
    # move one bin left where v is not above the lower edge, one right where above the upper
    m -= (v <= edges[m - 1]) & (m > 1)
    m += (v > edges[m]) & (m < bins)
    return m - 1


def top_label(p: np.ndarray, y: np.ndarray):
    """Confidence ``max_k p_ik``, correctness of the prediction ``argmax`` (lowest index on ties)."""
    pred = np.argmax(p, axis=1)
    conf = p[np.arange(p.shape[0]), pred]
    correct = (pred == y).astype(np.float64)
    return conf, correct


def equal_width_stats(conf: np.ndarray, correct: np.ndarray, bins: int):
    """Per equal-width bin: sample count, sum of confidences, number correct (eq. 5 sums)."""
    b = bin_index(conf, bins)
    count = np.bincount(b, minlength=bins)
    conf_sum = np.bincount(b, weights=conf, minlength=bins)
    acc_sum = np.bincount(b, weights=correct, minlength=bins)
    return count, conf_sum, acc_sum


def _equal_mass_stats(conf: np.ndarray, correct: np.ndarray, bins: int):
    """Per equal-mass bin (sorted, ``array_split`` sizes): count, sum conf, number correct."""
    n = conf.shape[0]
    order = np.argsort(conf, kind="stable")
    sizes = np.full(bins, n // bins, dtype=np.intp)
    sizes[: n % bins] += 1
    b = np.repeat(np.arange(bins), sizes)  # bin of the j-th smallest confidence
    count = sizes
    conf_sum = np.bincount(b, weights=conf[order], minlength=bins)
    acc_sum = np.bincount(b, weights=correct[order], minlength=bins)
    return count, conf_sum, acc_sum


def _gaps(count, conf_sum, acc_sum):
    """``|A_m - C_m|`` and weights ``|B_m| / l`` over the non-empty bins."""
    nonempty = count > 0
    c = count[nonempty].astype(np.float64)
    gap = np.abs(acc_sum[nonempty] / c - conf_sum[nonempty] / c)
    weight = c / count.sum()
    return gap, weight


def _ece_from(stats) -> float:
    gap, weight = _gaps(*stats)
    return float(np.sum(weight * gap))


def _mce_from(stats) -> float:
    gap, _ = _gaps(*stats)
    return float(np.max(gap))


def _ece_l2_from(stats) -> float:
    gap, weight = _gaps(*stats)
    return float(np.sqrt(np.sum(weight * gap * gap)))


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------
def accuracy_terms(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample correctness (1.0 / 0.0) of the argmax prediction (their mean is the accuracy)."""
    return top_label(p, y)[1]


def accuracy(probs, labels, bins: int = 15) -> float:
    """Accuracy: fraction of samples whose argmax class (lowest index on ties) is the label.

    The thesis's Table 1 (printed in percent).  ``bins`` is ignored (uniform signature).
    """
    return _accuracy(*check_inputs(probs, labels))


def _accuracy(p, y, bins=15, top=None) -> float:
    correct = (np.argmax(p, axis=1) == y) if top is None else top[1]
    return float(np.mean(correct))


def brier(probs, labels, bins: int = 15) -> float:
    """Brier score, thesis eq. (10): ``BS = 1/l sum_i sum_j (a_ij - 1(y_i = j))^2``.

    Mean over samples of the *sum* over classes (Brier 1950; the multi-class form used by
    Guo et al. 2017 and scikit-learn's ``brier_score_loss(..., scale_by_half=False)``), so
    it lies in [0, 2].  Computed as ``sum_j a_ij^2 - a_iy^2 + (a_iy - 1)^2`` per row, which
    needs no (N, K) temporary.  ``bins`` is ignored.
    """
    return _brier(*check_inputs(probs, labels))


def _brier(p, y, bins=15) -> float:
    return float(np.mean(brier_terms(p, y)))


def brier_terms(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample Brier contributions ``sum_j (a_ij - 1(y_i = j))^2`` (their mean is eq. 10)."""
    sq = np.einsum("ij,ij->i", p, p)
    py = p[np.arange(p.shape[0]), y]
    return sq - py * py + (py - 1.0) ** 2


def nll(probs, labels, bins: int = 15) -> float:
    """Negative log-likelihood, thesis eq. (9): ``NLL = -1/l sum_i log a_{i,y_i}`` (natural log).

    As the thesis's tooling computed it (scikit-learn ``log_loss`` up to 1.4, ``eps=1e-15``):
    every probability is clipped to ``[1e-15, 1 - 1e-15]``, each row is divided by its
    (clipped) sum, then the log of the true-class entry is averaged.  The row sums use the same
    numpy reduction as scikit-learn, so the value agrees with old ``log_loss`` to the last bit.
    ``bins`` is ignored.
    """
    return _nll(*check_inputs(probs, labels))


def _nll(p, y, bins=15) -> float:
    return float(np.mean(nll_terms(p, y)))


def nll_terms(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample NLL contributions ``-log a_{i,y_i}`` after the clip and renormalisation of :func:`nll`."""
    n, k = p.shape
    rowsum = np.empty(n, dtype=np.float64)
    step = max(1, _CHUNK_ELEMENTS // k)
    buf = np.empty((min(step, n), k), dtype=np.float64)
    for start in range(0, n, step):  # chunks of rows: bounded memory, same per-row sums
        chunk = p[start : start + step]
        clipped = np.clip(chunk, NLL_EPS, 1 - NLL_EPS, out=buf[: chunk.shape[0]])
        rowsum[start : start + step] = clipped.sum(axis=1)
    py = np.clip(p[np.arange(n), y], NLL_EPS, 1 - NLL_EPS)
    return -np.log(py / rowsum)


def ece(probs, labels, bins: int = 15) -> float:
    """Expected calibration error, thesis eq. (6) (Naeini et al. 2015; Guo et al. 2017).

    ``ECE = sum_m |B_m|/l * |A_m - C_m|`` over M equal-width bins ``((m-1)/M, m/M]`` of the
    top-label confidence, with ``A_m``, ``C_m`` of eq. (5).  Fraction, not percent.
    """
    p, y = check_inputs(probs, labels)
    return _ece_from(equal_width_stats(*top_label(p, y), bins))


def mce(probs, labels, bins: int = 15) -> float:
    """Maximum calibration error, thesis eq. (7) (Naeini et al. 2015): ``max_m |A_m - C_m|``.

    Over the non-empty equal-width bins of the top-label confidence.  Fraction.
    """
    p, y = check_inputs(probs, labels)
    return _mce_from(equal_width_stats(*top_label(p, y), bins))


def ece_l2(probs, labels, bins: int = 15) -> float:
    """l2 (RMS) calibration error, thesis sec. 3.2 (Kumar et al. 2019, "Verified Uncertainty Calibration").

    ``sqrt(sum_m |B_m|/l * (A_m - C_m)^2)`` over the equal-width bins of eq. (6).  Fraction.
    """
    p, y = check_inputs(probs, labels)
    return _ece_l2_from(equal_width_stats(*top_label(p, y), bins))


def ece_equal_mass(probs, labels, bins: int = 15) -> float:
    """Equal-mass (adaptive) ECE, thesis sec. 3.2 (Nixon et al. 2019, ref. [9]).

    Eq. (6) with M bins holding (almost) equally many samples: sorted confidences cut into M
    contiguous chunks whose sizes differ by at most one (module docstring).  Fraction.
    """
    p, y = check_inputs(probs, labels)
    return _ece_from(_equal_mass_stats(*top_label(p, y), bins))


def mce_equal_mass(probs, labels, bins: int = 15) -> float:
    """Equal-mass (adaptive) MCE: eq. (7) over the equal-mass bins of :func:`ece_equal_mass` (Nixon et al. 2019)."""
    p, y = check_inputs(probs, labels)
    return _mce_from(_equal_mass_stats(*top_label(p, y), bins))


def _classwise_sums(p: np.ndarray, y: np.ndarray, bins: int):
    """Per (class, bin): sum of ``p_ik`` and number of samples with ``y_i = k`` (eq. 8 sums).

    Most entries of a K-class probability matrix lie in the first bin ``[0, 1/M]``; their
    per-class sums are one masked column reduction, and only the (at most M-1 per row) entries
    above ``1/M`` are binned one by one.  Same sums as a bincount over all N*K entries, up to
    summation order; about 4x faster at K=1000.
    """
    n, k = p.shape
    e1 = bin_edges(bins)[1]
    sums = np.zeros((k, bins), dtype=np.float64)
    big = np.greater(p, e1)
    sums[:, 0] = np.sum(p, axis=0, where=~big)
    where = np.flatnonzero(big)  # (much faster than a 2-D nonzero)
    if where.size:
        cols = where % k
        vals = p.reshape(-1)[where]
        flat = cols * bins + bin_index(vals, bins)
        sums += np.bincount(flat, weights=vals, minlength=k * bins).reshape(k, bins)
    py = p[np.arange(n), y]
    positives = np.bincount(y * bins + bin_index(py, bins), minlength=k * bins).reshape(k, bins)
    return sums, positives


def classwise_ece(probs, labels, bins: int = 15) -> float:
    """Classwise-ECE, thesis eq. (8) (Kull et al. 2019, "Beyond temperature scaling").

    ``1/n sum_j sum_m |B_m^j|/l * |A_m^j - C_m^j|``: for every class j, the equal-width
    reliability of the one-vs-rest probabilities ``p_ij`` (all samples), averaged over the n
    classes.  The thesis prints the prefactor as ``1/M``; that is a typo for ``1/n`` (Kull et
    al. average over classes).  Since ``|B|/l * |A - C| = |sum 1(y=j) - sum p| / l``, the
    per-bin counts are not needed.  Fraction.
    """
    return _classwise_ece(*check_inputs(probs, labels), bins)


def _classwise_ece(p, y, bins=15) -> float:
    sums, positives = _classwise_sums(p, y, bins)
    n, k = p.shape
    return float(np.sum(np.abs(positives - sums)) / n / k)


def debiased_binbin_edges(sorted_conf: np.ndarray, bins: int) -> np.ndarray:
    """Upper edges of the equal-mass bins of Kumar et al.'s estimator, from sorted confidences.

    As their ``calibration`` package (``get_equal_bins``): the sorted values are cut into
    ``min(M, N)`` chunks of ``numpy.array_split`` sizes, the edge between two chunks is the mean
    of the last value of one and the first of the next, the last edge is 1.0.  A sample goes to
    the first bin whose edge is ``>=`` its confidence, so equal confidences never straddle bins.
    """
    n = sorted_conf.shape[0]
    parts = min(bins, n)
    ends = np.cumsum(np.full(parts, n // parts) + (np.arange(parts) < n % parts))[:-1]
    edges = (sorted_conf[ends - 1] + sorted_conf[ends]) / 2.0
    return np.append(edges, 1.0)


def ece_l2_debiased(probs, labels, bins: int = 15) -> float:
    """Debiased l2 calibration error of the top label (Kumar, Liang & Ma 2019, thesis ref. [10]).

    Their eq. for the debiased estimator (sec. 5, "Verified Uncertainty Calibration"):
    ``sqrt(max(0, sum_m |B_m|/l * [(A_m - C_m)^2 - A_m (1 - A_m) / (|B_m| - 1)]))``; a bin with
    fewer than 2 samples adds 0.  The subtracted term removes the plug-in estimate's upward bias
    ``Var(A_m)``.  Bins: the authors' default for this estimator (``calibration`` package,
    ``get_calibration_error(..., p=2, debias=True, mode="top-label")`` on continuous outputs)
    is M *equal-mass* bins with edges between chunks (:func:`debiased_bin_edges`), not the
    equal-width bins of :func:`ece_l2`; we use the same scheme, so the value equals the
    package's.  (The package switches to one bin per distinct value when it guesses that the
    outputs are discrete; we never switch.)  Fraction.
    """
    p, y = check_inputs(probs, labels)
    conf, correct = top_label(p, y)
    order = np.argsort(conf, kind="stable")
    conf, correct = conf[order], correct[order]
    edges = debiased_binbin_edges(conf, bins)
    b = np.searchsorted(edges, conf, side="left")
    count = np.bincount(b, minlength=edges.size).astype(np.float64)
    conf_sum = np.bincount(b, weights=conf, minlength=edges.size)
    acc_sum = np.bincount(b, weights=correct, minlength=edges.size)
    return debiased_from(count, conf_sum, acc_sum, p.shape[0])


def debiased_from(count, conf_sum, acc_sum, n) -> np.ndarray | float:
    """The debiased sum of :func:`ece_l2_debiased` from per-bin sums (last axis = bins)."""
    ok = count >= 2
    safe = np.where(ok, count, 2.0)
    acc = acc_sum / safe
    gap = conf_sum / safe - acc
    terms = np.where(ok, count / n * (gap * gap - acc * (1.0 - acc) / (safe - 1.0)), 0.0)
    value = np.sqrt(np.maximum(np.sum(terms, axis=-1), 0.0))
    return float(value) if np.ndim(value) == 0 else value


#: relplot's numerical constants (Blasiok & Nakkiran 2023, their reference code): evaluation
#: points of the smoothed residual, floor added to the kernel density, bandwidth search.
SMOOTH_ECE_POINTS = 200
SMOOTH_ECE_DENSITY_FLOOR = 1e-4
SMOOTH_ECE_MIN_BANDWIDTH = 1e-3
SMOOTH_ECE_BISECTIONS = 10


def smooth_grid_size(sigma: float) -> int:
    """Number of grid points the kernel smoothing at bandwidth ``sigma`` uses (as relplot)."""
    return max(2000, round(20 / sigma)) // 2 + 1


def smooth_eval_points(sigma: float) -> np.ndarray:
    """Points of [0, 1] at which the smoothed residual is evaluated (as relplot)."""
    return np.linspace(0.0, 1.0, max(round(10 / sigma), SMOOTH_ECE_POINTS))


def grid_weights(values: np.ndarray, size: int):
    """Linear split of each value between its two neighbouring grid points ``j/(size-1)``."""
    scaled = values * (size - 1)
    left = np.clip(scaled.astype(np.intp), 0, size - 2)
    frac = scaled - left
    return left, frac


def reflected_gaussian_kernel(sigma: float, size: int) -> np.ndarray:
    """Gaussian density of bandwidth ``sigma`` on ``size`` points centred in [0, 1]."""
    t = np.linspace(0.0, 1.0, size)
    return np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma * sigma)) / (np.sqrt(2 * np.pi) * sigma)


def _reflect(values: np.ndarray) -> np.ndarray:
    """The grid extended by its mirror images at 0 and 1 (reflection at the boundary)."""
    return np.concatenate([values[::-1][:-1], values, values[::-1][1:]])


def interpolation_weights(t: np.ndarray, size: int):
    """Left grid index and weight of the right neighbour for evaluating a grid function at ``t``."""
    left = np.clip((t * (size - 1)).astype(np.intp), 0, size - 2)
    step = 1.0 / (size - 1)
    return left, (t - left * step) / step


def _smooth(conf: np.ndarray, values: np.ndarray, sigma: float, t: np.ndarray) -> np.ndarray:
    """Kernel smoothing of each row of ``values`` (c, N), located at ``conf``, evaluated at ``t``.

    Reflected Gaussian kernel on relplot's grid; the convolution by FFT (``scipy.signal.fftconvolve``,
    the same sums as relplot's ``np.convolve`` up to rounding, about 1e-16 relative): the bandwidth
    search reaches grids of 10^4 points, where the direct convolution cost most of smooth ECE's time.
    """
    from scipy.signal import fftconvolve  # here: importing metrics stays light (the workflow's start)

    size = smooth_grid_size(sigma)
    left, frac = grid_weights(conf, size)
    grid = np.stack([np.bincount(left, weights=(1 - frac) * row, minlength=size)
                     + np.bincount(left + 1, weights=frac * row, minlength=size) for row in values])
    reflected = np.concatenate([grid[:, ::-1][:, :-1], grid, grid[:, ::-1][:, 1:]], axis=1)
    smoothed = fftconvolve(reflected, reflected_gaussian_kernel(sigma, size)[None, :], mode="valid", axes=1)
    smoothed = smoothed[:, size // 2 : size // 2 + size]
    i, w = interpolation_weights(t, size)
    return smoothed[:, i] * (1 - w) + smoothed[:, i + 1] * w


def smooth_ece_at(conf: np.ndarray, correct: np.ndarray, sigma: float) -> float:
    """Smooth ECE at a fixed bandwidth ``sigma`` (Blasiok & Nakkiran 2023, Def. 9 / eq. (5)).

    ``smECE_sigma = integral |r_hat(t)| delta_hat(t) dt / integral delta_hat(t) dt`` where
    ``r_hat`` is the Nadaraya-Watson kernel regression of the residual ``conf - correct`` on the
    confidence and ``delta_hat`` the kernel density of the confidences, both with a Gaussian
    kernel reflected at 0 and 1, on relplot's grid (:func:`smooth_grid_size`).
    """
    t = smooth_eval_points(sigma)
    density, residual = _smooth(conf, np.stack([np.ones_like(conf), conf - correct]), sigma, t)
    density = density + SMOOTH_ECE_DENSITY_FLOOR
    residual = residual / density
    return float(np.sum(np.abs(residual) * density) / np.sum(density))


def smooth_ece_bandwidth(conf: np.ndarray, correct: np.ndarray) -> float:
    """The bandwidth of :func:`smooth_ece`: the fixed point ``sigma* = smECE_sigma*`` (bisection).

    Blasiok & Nakkiran (2023), sec. 4: ``smECE_sigma`` decreases in ``sigma``, so the fixed point
    is found by bisection on (0, 1] (10 halvings, as relplot), stopping below 0.001.
    """
    def above(sigma):
        return sigma < SMOOTH_ECE_MIN_BANDWIDTH or sigma < smooth_ece_at(conf, correct, sigma)

    if above(1.0):
        return 1.0
    high, low = 1.0, 0.0
    for _ in range(SMOOTH_ECE_BISECTIONS):
        middle = (high + low) / 2
        if above(middle):
            low = middle
        else:
            high = middle
    return high


def smooth_ece(probs, labels, bins: int = 15) -> float:
    """Smooth ECE of the top label (Blasiok & Nakkiran 2023, "Smooth ECE: principled reliability diagrams").

    ``smECE_sigma*`` (:func:`smooth_ece_at`) at the self-consistent bandwidth
    ``sigma* = smECE_sigma*`` (:func:`smooth_ece_bandwidth`), on the top-label confidence and
    its correctness, exactly as the authors' ``relplot.smECE(conf, correct)``; no bins
    (``bins`` is ignored).  Fraction.
    """
    conf, correct = top_label(*check_inputs(probs, labels))
    return smooth_ece_at(conf, correct, smooth_ece_bandwidth(conf, correct))


@dataclass(frozen=True)
class MeanOfTerms:
    """Resampled form of a metric that is the mean of per-sample terms, ``finish(mean(terms))``.

    ``terms`` takes the metric's inputs (here ``(probs, labels)``, checked) and returns one value
    per sample; a resample's value is then ``finish(counts @ terms / N)``: one matrix product
    (:mod:`calibrepro.resampling`). ``finish`` (e.g. ``np.sqrt`` for an RMSE) defaults to identity.
    """

    terms: Callable[..., np.ndarray]
    finish: Callable[[np.ndarray], np.ndarray] | None = None


@dataclass(frozen=True)
class Metric:
    """One metric, everything the pipeline needs to know about it (report captions: report/labels.py).

    ``function(probs, labels, bins)`` is the estimate; ``higher_is_better`` is the direction that
    tables (bold), ranks and paired comparisons (the row's best) read; ``resampled`` is how the
    bootstrap computes it on a resample: a :class:`MeanOfTerms`, or the name of a custom vectorised
    form in :data:`calibrepro.resampling.FORMS`; ``interval`` the bootstrap interval method that
    ``uncertainty.interval: auto`` uses for it, chosen by the coverage study
    (``benchmarks/bench_coverage.py``, table in benchmarks/README.md); ``bounds`` the metric's range
    ``(low, high)`` (None: unbounded), which every bootstrap interval is intersected with
    (:func:`calibrepro.bootstrap.interval`; docs/decisions.md, "Intervals clipped to the metric's range").
    """

    name: str
    function: Callable[..., float]
    higher_is_better: bool = False
    resampled: MeanOfTerms | str | None = None
    interval: str = "percentile"
    bounds: tuple[float | None, float | None] = (None, None)

    def __call__(self, *args, **kwargs) -> float:
        return self.function(*args, **kwargs)


#: the range of a probability, a share or a calibration error
UNIT = (0.0, 1.0)

#: the classification metrics, in the order of the thesis's tables then the extra ones
METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in [
        Metric("accuracy", accuracy, True, MeanOfTerms(accuracy_terms), "percentile", UNIT),
        Metric("brier", brier, False, MeanOfTerms(brier_terms), "percentile", (0.0, 2.0)),
        Metric("nll", nll, False, MeanOfTerms(nll_terms), "percentile", (0.0, None)),
        Metric("ece", ece, False, "equal_width_ece", "basic", UNIT),
        Metric("mce", mce, False, "equal_width_mce", "basic", UNIT),
        Metric("ece_l2", ece_l2, False, "equal_width_l2", "basic", UNIT),
        Metric("ece_equal_mass", ece_equal_mass, False, "equal_mass_ece", "basic", UNIT),
        Metric("mce_equal_mass", mce_equal_mass, False, "equal_mass_mce", "basic", UNIT),
        Metric("classwise_ece", classwise_ece, False, "classwise", "basic", UNIT),
        Metric("ece_l2_debiased", ece_l2_debiased, False, "debiased", "basic", UNIT),
        Metric("smooth_ece", smooth_ece, False, "smooth", "basic", UNIT),
    ]
}

#: metrics of other tasks (e.g. regression), added by :func:`register`; :func:`spec` reads both
_REGISTERED: dict[str, Metric] = {}
#: metrics of tasks with a namespace of their own (``register(metric, task)``), by task then name
_TASKS: dict[str, dict[str, Metric]] = {}


def register(metric: Metric, task: str | None = None) -> Metric:
    """Make another task's ``metric`` known to :func:`spec` (tables, ranks, bootstrap); returns it.

    With ``task`` (e.g. ``"regression"``) the name lives in that task's namespace, so it may repeat a
    classification metric's (regression's ``nll`` is not the classification NLL); ``spec(name, task)``
    finds it."""
    registry = _REGISTERED if task is None else _TASKS.setdefault(task, {})
    if (task is None and metric.name in METRICS) or registry.get(metric.name, metric) is not metric:
        raise ValueError(f"a metric named {metric.name!r} is already registered" + (f" for {task}" if task else ""))
    registry[metric.name] = metric
    return metric


def spec(name: str, task: str | None = None) -> Metric | None:
    """The :class:`Metric` named ``name`` (classification or registered; with ``task``, that task's), None
    when unknown."""
    if task is not None:
        return _TASKS.get(task, {}).get(name)
    return METRICS.get(name) or _REGISTERED.get(name)


def higher_is_better(name: str) -> bool:
    """The direction of metric ``name``; an unknown metric is taken as lower-is-better."""
    metric = spec(name)
    return bool(metric and metric.higher_is_better)


def compute_metrics(probs, labels, names: Sequence[str], bins: int = 15) -> dict[str, float]:
    """Compute the metrics ``names`` (keys of :data:`METRICS`) at once, sharing the work.

    The input is converted and checked once, and the top-label confidences and the bin
    statistics are computed once for all binned metrics.  Values are identical to calling
    each function of :data:`METRICS` separately.
    """
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    p, y = check_inputs(probs, labels)
    out: dict[str, float] = {}
    top = None
    width = None
    mass = None
    plain = {"brier": _brier, "nll": _nll, "classwise_ece": _classwise_ece,
             "ece_l2_debiased": lambda p, y, bins: ece_l2_debiased(p, y, bins),
             "smooth_ece": lambda p, y, bins: smooth_ece(p, y, bins)}
    for name in names:
        if name in plain:
            out[name] = plain[name](p, y, bins)
            continue
        if top is None:  # confidence and correctness of the top label, shared
            top = top_label(p, y)
        if name == "accuracy":
            out[name] = _accuracy(p, y, bins, top)
        elif name in ("ece", "mce", "ece_l2"):
            if width is None:
                width = equal_width_stats(*top, bins)
            out[name] = {"ece": _ece_from, "mce": _mce_from, "ece_l2": _ece_l2_from}[name](width)
        else:  # ece_equal_mass, mce_equal_mass
            if mass is None:
                mass = _equal_mass_stats(*top, bins)
            out[name] = (_ece_from if name == "ece_equal_mass" else _mce_from)(mass)
    return out

