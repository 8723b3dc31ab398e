"""Calibration metrics of the thesis (section 3.2, equations (5)-(10)), vectorised, in float64.

Every metric takes ``probs`` (N, K) -- rows are probability vectors -- and integer ``labels``
(N,), and returns a Python float; ECE/MCE-type metrics are *fractions* (the report multiplies
by 100 to print percent).  Nothing here loops over samples in Python.

Conventions (design.md section 4; they are what reproduce the thesis's printed cells):

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

from typing import Callable, Sequence

import numpy as np

__all__ = [
    "METRICS",
    "accuracy",
    "bin_index",
    "brier",
    "classwise_ece",
    "compute_metrics",
    "ece",
    "ece_equal_mass",
    "ece_l2",
    "mce",
    "mce_equal_mass",
    "nll",
    "reliability_bins",
]

#: Clip of the NLL, as scikit-learn's ``log_loss(eps=1e-15)`` (versions <= 1.4).
NLL_EPS = 1e-15
#: Rows of the NLL clip are processed in chunks of about this many entries (bounds memory).
_CHUNK_ELEMENTS = 1 << 20


# --------------------------------------------------------------------------------------------
# input handling and binning
# --------------------------------------------------------------------------------------------
def _check(probs, labels) -> tuple[np.ndarray, np.ndarray]:
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


def _edges(bins: int) -> np.ndarray:
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
    edges = _edges(bins)
    v = np.asarray(values, dtype=np.float64)
    guess = np.multiply(v, bins)
    np.ceil(guess, out=guess)
    np.clip(guess, 1, bins, out=guess)
    m = guess.astype(np.intp)
    # move one bin left where v is not above the lower edge, one right where above the upper
    m -= (v <= edges[m - 1]) & (m > 1)
    m += (v > edges[m]) & (m < bins)
    return m - 1


def _top_label(p: np.ndarray, y: np.ndarray):
    """Confidence ``max_k p_ik``, correctness of the prediction ``argmax`` (lowest index on ties)."""
    pred = np.argmax(p, axis=1)
    conf = p[np.arange(p.shape[0]), pred]
    correct = (pred == y).astype(np.float64)
    return conf, correct


def _equal_width_stats(conf: np.ndarray, correct: np.ndarray, bins: int):
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
def accuracy(probs, labels, bins: int = 15) -> float:
    """Accuracy: fraction of samples whose argmax class (lowest index on ties) is the label.

    The thesis's Table 1 (printed in percent).  ``bins`` is ignored (uniform signature).
    """
    return _accuracy(*_check(probs, labels))


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
    return _brier(*_check(probs, labels))


def _brier(p, y, bins=15) -> float:
    sq = np.einsum("ij,ij->i", p, p)
    py = p[np.arange(p.shape[0]), y]
    return float(np.mean(sq - py * py + (py - 1.0) ** 2))


def nll(probs, labels, bins: int = 15) -> float:
    """Negative log-likelihood, thesis eq. (9): ``NLL = -1/l sum_i log a_{i,y_i}`` (natural log).

    As the thesis's tooling computed it (scikit-learn ``log_loss`` up to 1.4, ``eps=1e-15``):
    every probability is clipped to ``[1e-15, 1 - 1e-15]``, each row is divided by its
    (clipped) sum, then the log of the true-class entry is averaged.  The row sums use the same
    numpy reduction as scikit-learn, so the value agrees with old ``log_loss`` to the last bit.
    ``bins`` is ignored.
    """
    return _nll(*_check(probs, labels))


def _nll(p, y, bins=15) -> float:
    n, k = p.shape
    rowsum = np.empty(n, dtype=np.float64)
    step = max(1, _CHUNK_ELEMENTS // k)
    buf = np.empty((min(step, n), k), dtype=np.float64)
    for start in range(0, n, step):  # chunks of rows: bounded memory, same per-row sums
        chunk = p[start : start + step]
        clipped = np.clip(chunk, NLL_EPS, 1 - NLL_EPS, out=buf[: chunk.shape[0]])
        rowsum[start : start + step] = clipped.sum(axis=1)
    py = np.clip(p[np.arange(n), y], NLL_EPS, 1 - NLL_EPS)
    return float(np.mean(-np.log(py / rowsum)))


def ece(probs, labels, bins: int = 15) -> float:
    """Expected calibration error, thesis eq. (6) (Naeini et al. 2015; Guo et al. 2017).

    ``ECE = sum_m |B_m|/l * |A_m - C_m|`` over M equal-width bins ``((m-1)/M, m/M]`` of the
    top-label confidence, with ``A_m``, ``C_m`` of eq. (5).  Fraction, not percent.
    """
    p, y = _check(probs, labels)
    return _ece_from(_equal_width_stats(*_top_label(p, y), bins))


def mce(probs, labels, bins: int = 15) -> float:
    """Maximum calibration error, thesis eq. (7) (Naeini et al. 2015): ``max_m |A_m - C_m|``.

    Over the non-empty equal-width bins of the top-label confidence.  Fraction.
    """
    p, y = _check(probs, labels)
    return _mce_from(_equal_width_stats(*_top_label(p, y), bins))


def ece_l2(probs, labels, bins: int = 15) -> float:
    """l2 (RMS) calibration error, thesis sec. 3.2 (Kumar et al. 2019, "Verified Uncertainty Calibration").

    ``sqrt(sum_m |B_m|/l * (A_m - C_m)^2)`` over the equal-width bins of eq. (6).  Fraction.
    """
    p, y = _check(probs, labels)
    return _ece_l2_from(_equal_width_stats(*_top_label(p, y), bins))


def ece_equal_mass(probs, labels, bins: int = 15) -> float:
    """Equal-mass (adaptive) ECE, thesis sec. 3.2 (Nixon et al. 2019, ref. [9]).

    Eq. (6) with M bins holding (almost) equally many samples: sorted confidences cut into M
    contiguous chunks whose sizes differ by at most one (module docstring).  Fraction.
    """
    p, y = _check(probs, labels)
    return _ece_from(_equal_mass_stats(*_top_label(p, y), bins))


def mce_equal_mass(probs, labels, bins: int = 15) -> float:
    """Equal-mass (adaptive) MCE: eq. (7) over the equal-mass bins of :func:`ece_equal_mass` (Nixon et al. 2019)."""
    p, y = _check(probs, labels)
    return _mce_from(_equal_mass_stats(*_top_label(p, y), bins))


def _classwise_sums(p: np.ndarray, y: np.ndarray, bins: int):
    """Per (class, bin): sum of ``p_ik`` and number of samples with ``y_i = k`` (eq. 8 sums).

    Most entries of a K-class probability matrix lie in the first bin ``[0, 1/M]``; their
    per-class sums are one masked column reduction, and only the (at most M-1 per row) entries
    above ``1/M`` are binned one by one.  Same sums as a bincount over all N*K entries, up to
    summation order; about 4x faster at K=1000.
    """
    n, k = p.shape
    e1 = _edges(bins)[1]
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
    return _classwise_ece(*_check(probs, labels), bins)


def _classwise_ece(p, y, bins=15) -> float:
    sums, positives = _classwise_sums(p, y, bins)
    n, k = p.shape
    return float(np.sum(np.abs(positives - sums)) / n / k)


METRICS: dict[str, Callable[..., float]] = {
    "accuracy": accuracy,
    "brier": brier,
    "nll": nll,
    "ece": ece,
    "mce": mce,
    "ece_l2": ece_l2,
    "ece_equal_mass": ece_equal_mass,
    "mce_equal_mass": mce_equal_mass,
    "classwise_ece": classwise_ece,
}


def compute_metrics(probs, labels, names: Sequence[str], bins: int = 15) -> dict[str, float]:
    """Compute the metrics ``names`` (keys of :data:`METRICS`) at once, sharing the work.

    The input is converted and checked once, and the top-label confidences and the bin
    statistics are computed once for all binned metrics.  Values are identical to calling
    each function of :data:`METRICS` separately.
    """
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    p, y = _check(probs, labels)
    out: dict[str, float] = {}
    top = None
    width = None
    mass = None
    plain = {"brier": _brier, "nll": _nll, "classwise_ece": _classwise_ece}
    for name in names:
        if name in plain:
            out[name] = plain[name](p, y, bins)
            continue
        if top is None:  # confidence and correctness of the top label, shared
            top = _top_label(p, y)
        if name == "accuracy":
            out[name] = _accuracy(p, y, bins, top)
        elif name in ("ece", "mce", "ece_l2"):
            if width is None:
                width = _equal_width_stats(*top, bins)
            out[name] = {"ece": _ece_from, "mce": _mce_from, "ece_l2": _ece_l2_from}[name](width)
        else:  # ece_equal_mass, mce_equal_mass
            if mass is None:
                mass = _equal_mass_stats(*top, bins)
            out[name] = (_ece_from if name == "ece_equal_mass" else _mce_from)(mass)
    return out


def reliability_bins(probs, labels, bins: int = 15) -> dict:
    """Reliability-diagram data (thesis eq. (5), fig. 1(b)) per equal-width bin, JSON-ready.

    Returns ``{"count": [...], "confidence": [...], "accuracy": [...]}``: for every bin
    ``((m-1)/M, m/M]`` of the top-label confidence, the number of samples ``|B_m|``, the mean
    confidence ``C_m`` and the accuracy ``A_m`` (``None`` where the bin is empty).  The bin
    weight of the diagram is ``count / sum(count)``.
    """
    p, y = _check(probs, labels)
    count, conf_sum, acc_sum = _equal_width_stats(*_top_label(p, y), bins)
    conf = [None if c == 0 else float(s / c) for c, s in zip(count, conf_sum, strict=True)]
    acc = [None if c == 0 else float(s / c) for c, s in zip(count, acc_sum, strict=True)]
    return {"count": [int(c) for c in count], "confidence": conf, "accuracy": acc}
