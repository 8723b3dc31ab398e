"""The inputs and bins every binned metric shares: checked arrays, the top label, bin statistics.

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

The reliability diagrams (:mod:`calibrepro.reliability`) and histogram binning
(:mod:`calibrepro.calibrators.binning`) bin with the same functions.
"""

from __future__ import annotations

import numpy as np


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


def equal_mass_stats(conf: np.ndarray, correct: np.ndarray, bins: int):
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


def ece_from(stats) -> float:
    """Eq. (6) from per-bin ``(count, conf_sum, acc_sum)``: ``sum_m |B_m|/l * |A_m - C_m|``."""
    gap, weight = _gaps(*stats)
    return float(np.sum(weight * gap))


def mce_from(stats) -> float:
    """Eq. (7) from per-bin ``(count, conf_sum, acc_sum)``: ``max_m |A_m - C_m|`` over the non-empty bins."""
    gap, _ = _gaps(*stats)
    return float(np.max(gap))


def ece_l2_from(stats) -> float:
    """The l2 error from per-bin ``(count, conf_sum, acc_sum)``: ``sqrt(sum_m |B_m|/l * (A_m - C_m)^2)``."""
    gap, weight = _gaps(*stats)
    return float(np.sqrt(np.sum(weight * gap * gap)))
