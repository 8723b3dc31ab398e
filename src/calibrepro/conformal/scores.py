"""Conformity scores of split-conformal classification and the threshold that turns them into sets.

Every score is computed for all K labels of every row at once: the rows' probabilities are sorted once
(:func:`rank_order`, a stable ``argsort`` of ``-p``: ties go to the lower class index, as the
calibrators' argmax does), the scores follow from cumulative sums along the sorted rows, and a label's
score is read from its rank. No Python loop runs over the samples.

With ``p_(1) >= ... >= p_(K)`` a row's sorted probabilities, ``o(y)`` the rank of label ``y`` (1 for the
most probable) and ``rho(y) = p_(1) + ... + p_(o(y)-1)`` the mass of the labels ranked above it:

* **LAC** (least ambiguous set-valued classifier; Sadinle, Lei & Wasserman 2019, JASA 114, eq. 5):
  ``s(x, y) = 1 - p_y``;
* **APS** (adaptive prediction sets; Romano, Sesia & Candès 2020, NeurIPS, eq. 5 and its randomised
  form, sec. 2.2): ``s(x, y, u) = rho(y) + u * p_y``, with ``u ~ U(0, 1)`` drawn once per row
  (randomised) or ``u = 1`` (non-randomised: the mass of the labels up to and including ``y``);
* **RAPS** (regularised APS; Angelopoulos, Bates, Malik & Jordan 2021, ICLR, Algorithm 2):
  ``s(x, y, u) = rho(y) + u * p_y + lambda * max(0, o(y) - k_reg)``.

For each row these scores grow with the rank (``rho(y) + u p_y <= rho(y) + p_y = rho(y')`` for the
next label ``y'``), so every prediction set is the top of the ranking: :func:`set_sizes` counts, and
:func:`prediction_sets` marks, the labels whose score is at most the threshold.

The threshold (Vovk et al. 2005; Angelopoulos & Bates 2023, "Conformal prediction: a gentle
introduction", eq. 1): with ``n`` calibration scores, ``q = s_(k)``, the ``k``-th smallest, for
``k = ceil((n + 1)(1 - alpha))``. Then a new exchangeable sample's set ``{y : s(x, y) <= q}`` holds
its label with probability at least ``1 - alpha``, and at most ``1 - alpha + 1/(n + 1)`` when the
scores have no ties (randomised APS and RAPS, LAC on continuous probabilities). When ``k > n`` no
calibration score is large enough: the set would be every label, and :func:`threshold` says so
(:class:`ConformalError`) rather than return it silently.
"""

from __future__ import annotations

import math

import numpy as np

#: the conformity scores, name -> what it is (the ``score`` of a conformal classifier)
SCORES = {
    "lac": "1 - p_y (Sadinle et al. 2019)",
    "aps": "mass of the labels ranked above y, plus u p_y (Romano et al. 2020)",
    "raps": "APS plus lambda (rank - k_reg)^+ (Angelopoulos et al. 2021)",
}
#: the scores that a uniform draw per row randomises (LAC has no ties to break on continuous probabilities)
RANDOMISABLE = ("aps", "raps")


class ConformalError(ValueError):
    """A conformal fit or prediction that cannot be made: a bad alpha or score, too few calibration samples,
    probabilities that are not probabilities. The message is one line naming the value or file at fault."""


def check_score(score: str) -> str:
    if score not in SCORES:
        raise ConformalError(f"unknown conformity score {score!r}; known: {', '.join(SCORES)}")
    return score


def check_alpha(alpha) -> float:
    """``alpha`` as a float in (0, 1), the miscoverage level (1 - alpha: the coverage asked for)."""
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        raise ConformalError(f"alpha {alpha!r} is no number; give the miscoverage level, e.g. 0.1") from None
    if not 0 < value < 1:
        raise ConformalError(f"alpha {alpha!r} must lie strictly between 0 and 1 (e.g. 0.1 for 90 % coverage)")
    return value


def check_probabilities(probabilities, where: str = "probabilities", tolerance: float = 1e-6) -> np.ndarray:
    """(N, K) probability rows as float64: finite, non-negative, each summing to 1 within ``tolerance``."""
    p = np.asarray(probabilities)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 2:
        raise ConformalError(f"{where}: expected an (N, K) array with K >= 2, got shape {p.shape}")
    p = p.astype(np.float64, copy=False)
    if not np.isfinite(p).all():
        raise ConformalError(f"{where}: contain NaN or infinite values")
    sums = p.sum(axis=1)
    bad = np.flatnonzero((p < 0).any(axis=1) | (np.abs(sums - 1) > tolerance))
    if bad.size:
        raise ConformalError(
            f"{where}: row {bad[0]} is no probability vector (sum {sums[bad[0]]:.6g}, smallest entry "
            f"{p[bad[0]].min():.6g}); give softmax probabilities or logits"
        )
    return p


def rank_order(probabilities: np.ndarray) -> np.ndarray:
    """(N, K) class indices of each row, most probable first (stable: ties keep the class order)."""
    return np.argsort(-probabilities, axis=1, kind="stable")


def sorted_scores(probabilities: np.ndarray, order: np.ndarray, score: str, u: np.ndarray | None, *,
                  penalty: float = 0.0, k_reg: int = 0) -> np.ndarray:
    """(N, K) scores of every row's labels in rank order (column j: the label ranked j + 1), module docstring.

    ``u``: (N,) uniform draws of the randomised APS and RAPS, or None for ``u = 1`` (non-randomised); LAC
    ignores it. ``penalty`` and ``k_reg``: RAPS's lambda and k_reg.
    """
    ranked = np.take_along_axis(probabilities, order, axis=1)
    if score == "lac":
        return 1.0 - ranked
    scores = np.cumsum(ranked, axis=1)  # rho(y) + p_y
    if u is not None:
        scores -= (1.0 - u)[:, None] * ranked  # rho(y) + u p_y
    if score == "raps":
        ranks = np.arange(1, ranked.shape[1] + 1)
        scores += penalty * np.maximum(ranks - k_reg, 0)
    return scores


def label_ranks(order: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(N,) 0-based rank of each row's label in ``order``."""
    return np.argmax(order == np.asarray(labels)[:, None], axis=1)


def quantile_index(n: int, alpha: float) -> int:
    """``k = ceil((n + 1)(1 - alpha))``: the threshold is the k-th smallest of ``n`` calibration scores.

    ``(n + 1)(1 - alpha)`` is rounded to 9 decimals first, so that e.g. n = 99, alpha = 0.1 gives exactly 90
    (not 91 from the float ``90.00000000000001``).
    """
    return math.ceil(round((n + 1) * (1 - alpha), 9))


def threshold(calibration_scores: np.ndarray, alpha: float, where: str = "the calibration set") -> float:
    """The conformal threshold ``q``: the ``ceil((n + 1)(1 - alpha))``-th smallest calibration score.

    Raises :class:`ConformalError` when that index exceeds n (n < 1/alpha - 1): the set would hold every label.
    """
    n = len(calibration_scores)
    k = quantile_index(n, alpha)
    if k > n:
        needed = math.ceil(round(1 / alpha - 1, 9))
        raise ConformalError(
            f"{where}: {n} calibration samples are too few for alpha {alpha:g}: ceil((n + 1)(1 - alpha)) = {k} > n, "
            f"so every prediction set would be every label; use at least {needed} samples or a larger alpha"
        )
    return float(np.partition(calibration_scores, k - 1)[k - 1])


def set_sizes(scores: np.ndarray, q: float) -> np.ndarray:
    """(N,) sizes of the sets ``{y : s(x, y) <= q}`` from the rank-ordered scores of :func:`sorted_scores`."""
    return np.count_nonzero(scores <= q, axis=1)


def prediction_sets(scores: np.ndarray, order: np.ndarray, q: float) -> np.ndarray:
    """(N, K) bool: label ``y`` of row ``i`` is in its set (``s(x_i, y) <= q``), in class order."""
    sets = np.zeros(scores.shape, dtype=bool)
    np.put_along_axis(sets, order, scores <= q, axis=1)
    return sets
