"""The binned calibration errors: ECE, MCE and l2 (thesis eqs. (5)-(8), sec. 3.2), equal-width and equal-mass.

ECE/MCE-type metrics are *fractions* (the report multiplies by 100 to print percent); the bins and
the top label are those of :mod:`calibrepro.metrics.bins`.
"""

from __future__ import annotations

import numpy as np

from calibrepro.metrics.bins import (
    bin_edges, bin_index, check_inputs, ece_from, ece_l2_from, equal_mass_stats, equal_width_stats, mce_from, top_label,
)


def ece(probs, labels, bins: int = 15) -> float:
    """Expected calibration error, thesis eq. (6) (Naeini et al. 2015; Guo et al. 2017).

    ``ECE = sum_m |B_m|/l * |A_m - C_m|`` over M equal-width bins ``((m-1)/M, m/M]`` of the
    top-label confidence, with ``A_m``, ``C_m`` of eq. (5).  Fraction, not percent.
    """
    p, y = check_inputs(probs, labels)
    return ece_from(equal_width_stats(*top_label(p, y), bins))


def mce(probs, labels, bins: int = 15) -> float:
    """Maximum calibration error, thesis eq. (7) (Naeini et al. 2015): ``max_m |A_m - C_m|``.

    Over the non-empty equal-width bins of the top-label confidence.  Fraction.
    """
    p, y = check_inputs(probs, labels)
    return mce_from(equal_width_stats(*top_label(p, y), bins))


def ece_l2(probs, labels, bins: int = 15) -> float:
    """l2 (RMS) calibration error, thesis sec. 3.2 (Kumar et al. 2019, "Verified Uncertainty Calibration").

    ``sqrt(sum_m |B_m|/l * (A_m - C_m)^2)`` over the equal-width bins of eq. (6).  Fraction.
    """
    p, y = check_inputs(probs, labels)
    return ece_l2_from(equal_width_stats(*top_label(p, y), bins))


def ece_equal_mass(probs, labels, bins: int = 15) -> float:
    """Equal-mass (adaptive) ECE, thesis sec. 3.2 (Nixon et al. 2019, ref. [9]).

    Eq. (6) with M bins holding (almost) equally many samples: sorted confidences cut into M
    contiguous chunks whose sizes differ by at most one (:mod:`calibrepro.metrics.bins`).  Fraction.
    """
    p, y = check_inputs(probs, labels)
    return ece_from(equal_mass_stats(*top_label(p, y), bins))


def mce_equal_mass(probs, labels, bins: int = 15) -> float:
    """Equal-mass (adaptive) MCE: eq. (7) over the equal-mass bins of :func:`ece_equal_mass` (Nixon et al. 2019)."""
    p, y = check_inputs(probs, labels)
    return mce_from(equal_mass_stats(*top_label(p, y), bins))


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
    return classwise_ece_checked(*check_inputs(probs, labels), bins)


def classwise_ece_checked(p, y, bins=15) -> float:
    """:func:`classwise_ece` of checked inputs."""
    sums, positives = _classwise_sums(p, y, bins)
    n, k = p.shape
    return float(np.sum(np.abs(positives - sums)) / n / k)


def debiased_bin_edges(sorted_conf: np.ndarray, bins: int) -> np.ndarray:
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
    edges = debiased_bin_edges(conf, bins)
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
