"""Accuracy and the proper scoring rules of the thesis: Brier (eq. 10) and NLL (eq. 9).

Each is the mean of per-sample terms (``*_terms``), which is also how the bootstrap resamples it
(:class:`calibrepro.metrics.MeanOfTerms`). The ``*_checked`` forms take inputs already checked by
:func:`calibrepro.metrics.bins.check_inputs` (:func:`calibrepro.metrics.compute_metrics` checks once for all).

NLL convention (docs/decisions.md, "Metrics"): probabilities are clipped to ``[1e-15, 1 - 1e-15]``
and every row renormalised before taking the log, exactly as scikit-learn's ``log_loss`` did up to
version 1.4 (with its old default ``eps=1e-15``).  Histogram binning and isotonic regression output
exact zeros; with this convention their NLL is finite and equals the thesis's values.
"""

from __future__ import annotations

import numpy as np

from calibrepro.metrics.bins import check_inputs, top_label

#: Clip of the NLL, as scikit-learn's ``log_loss(eps=1e-15)`` (versions <= 1.4).
NLL_EPS = 1e-15
#: Rows of the NLL clip are processed in chunks of about this many entries (bounds memory).
_CHUNK_ELEMENTS = 1 << 20


def accuracy_terms(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample correctness (1.0 / 0.0) of the argmax prediction (their mean is the accuracy)."""
    return top_label(p, y)[1]


def accuracy(probs, labels, bins: int = 15) -> float:
    """Accuracy: fraction of samples whose argmax class (lowest index on ties) is the label.

    The thesis's Table 1 (printed in percent).  ``bins`` is ignored (uniform signature).
    """
    return accuracy_checked(*check_inputs(probs, labels))


def accuracy_checked(p, y, bins=15, top=None) -> float:
    """:func:`accuracy` of checked inputs; ``top``: their :func:`~calibrepro.metrics.bins.top_label`, when known."""
    correct = (np.argmax(p, axis=1) == y) if top is None else top[1]
    return float(np.mean(correct))


def overconfidence_terms(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample top-label confidence minus correctness (their mean is :func:`overconfidence`)."""
    conf, correct = top_label(p, y)
    return conf - correct


def overconfidence(probs, labels, bins: int = 15) -> float:
    """Mean top-label confidence minus accuracy, ``1/N sum_i (max_k p_ik - 1(argmax_k p_ik = y_i))``.

    The gap between "avg. confidence" and accuracy that Guo et al. (2017, fig. 1 and section 2) read as
    over- (> 0) or underconfidence (< 0): the signed counterpart of the ECE over one bin holding all
    samples. In [-1, 1]; ``bins`` is ignored.
    """
    return overconfidence_checked(*check_inputs(probs, labels))


def overconfidence_checked(p, y, bins=15, top=None) -> float:
    """:func:`overconfidence` of checked inputs; ``top``: their :func:`~calibrepro.metrics.bins.top_label`, when known."""
    conf, correct = top_label(p, y) if top is None else top
    return float(np.mean(conf - correct))


def brier(probs, labels, bins: int = 15) -> float:
    """Brier score, thesis eq. (10): ``BS = 1/l sum_i sum_j (a_ij - 1(y_i = j))^2``.

    Mean over samples of the *sum* over classes (Brier 1950; the multi-class form used by
    Guo et al. 2017 and scikit-learn's ``brier_score_loss(..., scale_by_half=False)``), so
    it lies in [0, 2].  Computed as ``sum_j a_ij^2 - a_iy^2 + (a_iy - 1)^2`` per row, which
    needs no (N, K) temporary.  ``bins`` is ignored.
    """
    return brier_checked(*check_inputs(probs, labels))


def brier_checked(p, y, bins=15) -> float:
    """:func:`brier` of checked inputs."""
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
    return nll_checked(*check_inputs(probs, labels))


def nll_checked(p, y, bins=15) -> float:
    """:func:`nll` of checked inputs."""
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
