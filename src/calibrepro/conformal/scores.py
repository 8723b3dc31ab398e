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

For each row every score grows with the rank (``rho(y) + u p_y <= rho(y) + p_y = rho(y')`` for the next label
``y'``), so every prediction set is the top of the ranking: :func:`prediction_sets` marks the labels whose
score is at most the threshold (LAC needs no ranking for it, :func:`score_order`), and
:func:`leading_sizes` finds a set's size by bisection over the ranks of a :class:`RankTable` sorted once
for many thresholds (the pipeline's repeats).

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
#: RAPS's regularisation lambda and k_reg: the commonly used fixed values. Angelopoulos et al. (2021, sec. 2.3)
#: tune both on held-out data; they are fixed here so that no calibration sample goes to tuning
RAPS_PENALTY = 0.01
RAPS_K_REG = 5


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


#: how far a probability row's sum may be from 1: float32 softmax rows of K = 1000 classes sum to 1 within ~1e-5
SUM_TOLERANCE = 1e-4


def check_probabilities(probabilities, where: str = "probabilities", tolerance: float = SUM_TOLERANCE) -> np.ndarray:
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
            f"{where}: row {bad[0]} is no probability vector (sum {sums[bad[0]]:.8g}, smallest entry "
            f"{p[bad[0]].min():.6g}); give softmax probabilities or logits"
        )
    return p


def rank_order(probabilities: np.ndarray) -> np.ndarray:
    """(N, K) class indices of each row, most probable first (stable: ties keep the class order)."""
    return np.argsort(-probabilities, axis=1, kind="stable")


def score_order(probabilities: np.ndarray, score: str) -> np.ndarray | None:
    """The column order :func:`sorted_scores` needs: :func:`rank_order`, or None for LAC, whose score needs no
    ranking (its sets are counted and marked in class order)."""
    return None if score == "lac" else rank_order(probabilities)


def sorted_scores(probabilities: np.ndarray, order: np.ndarray | None, score: str, u: np.ndarray | None, *,
                  penalty: float = 0.0, k_reg: int = 0) -> np.ndarray:
    """(N, K) scores of every row's labels in rank order (column j: the label ranked j + 1), module docstring;
    ``order`` None (LAC only): in class order.

    ``u``: (N,) uniform draws of the randomised APS and RAPS, or None for ``u = 1`` (non-randomised); LAC
    ignores it. ``penalty`` and ``k_reg``: RAPS's lambda and k_reg.
    """
    ranked = probabilities if order is None else np.take_along_axis(probabilities, order, axis=1)
    if score == "lac":
        return 1.0 - ranked
    scores = np.cumsum(ranked, axis=1)  # rho(y) + p_y
    if u is not None:
        scores -= (1.0 - u)[:, None] * ranked  # rho(y) + u p_y
    if score == "raps":
        ranks = np.arange(1, ranked.shape[1] + 1)
        scores += penalty * np.maximum(ranks - k_reg, 0)
    return scores


def label_ranks(order: np.ndarray | None, labels: np.ndarray) -> np.ndarray:
    """(N,) 0-based rank of each row's label in ``order`` (its column: the label itself when ``order`` is None)."""
    if order is None:
        return np.asarray(labels)
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


class RankTable:
    """Rows ranked once for many thresholds and draws (the pipeline's repeats): the probabilities in rank order, their
    cumulative sums and the rank of each row's label.

    Only the values are sorted (``np.sort``, NumPy's vectorised quicksort: several times faster than the stable
    ``argsort`` of :func:`rank_order`, and no gathering of the rows by an index array). Tied probabilities are equal
    numbers, so any order among them gives the same ranked values and cumulative sums as the stable sort; the one
    place the tie order matters, the label's rank, is counted as the stable sort puts it: the labels with a larger
    probability, plus the tied ones of a lower class index. So every number equals that of :func:`sorted_scores` on
    :func:`rank_order` (tests/test_conformal.py checks it, ties included). ``reuse``: :func:`rank_table`.
    """

    def __init__(self, probabilities: np.ndarray, labels: np.ndarray, reuse: "RankTable | None" = None):
        self.labels = np.asarray(labels)
        n, self.k = probabilities.shape
        if reuse is not None and reuse.ranked is not None and reuse.ranked.shape == (n, self.k):  # no new pages
            self.ranked, self.cumulative = reuse.ranked, reuse.cumulative
            reuse.ranked = reuse.cumulative = None
        else:
            self.ranked, self.cumulative = np.empty((n, self.k)), np.empty((n, self.k))
        np.negative(probabilities, out=self.ranked)
        self.ranked.sort(axis=1)  # ascending -p: descending p
        np.negative(self.ranked, out=self.ranked)
        np.cumsum(self.ranked, axis=1, out=self.cumulative)
        own = probabilities[np.arange(n), self.labels][:, None]
        self.ranks = np.count_nonzero(probabilities > own, axis=1)
        tied = np.flatnonzero(np.count_nonzero(probabilities == own, axis=1) > 1)
        if tied.size:  # the stable sort ranks a tied label after the tied ones of lower class index
            lower = np.arange(self.k) < self.labels[tied, None]
            self.ranks[tied] += np.count_nonzero((probabilities[tied] == own[tied]) & lower, axis=1)

    def values(self, rows: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(p, cumulative p)`` at the ranks ``columns + 1`` of ``rows`` (``take`` on the flat arrays: a few times
        faster than two-dimensional fancy indexing)."""
        flat = np.asarray(rows, dtype=np.int64) * self.k + columns
        return self.ranked.reshape(-1).take(flat), self.cumulative.reshape(-1).take(flat)


def rank_table(probabilities: np.ndarray, labels: np.ndarray, reuse: RankTable | None = None) -> RankTable:
    """The :class:`RankTable` of ``probabilities``; ``reuse``: a table of the same shape that is no longer needed, whose
    arrays this one overwrites (a table of K = 1000 and 25,000 rows takes 400 MB: writing into fresh memory costs
    more than the sort itself, so the pipeline's job reuses one for all its calibrators)."""
    return RankTable(probabilities, labels, reuse)


def scores_at(table: RankTable, rows: np.ndarray, columns: np.ndarray, score: str, u: np.ndarray | None, *,
              penalty: float = 0.0, k_reg: int = 0) -> np.ndarray:
    """The scores of the labels ranked ``columns + 1`` of ``rows`` (``u``: those rows' draws), with the arithmetic of
    :func:`sorted_scores`, element by element: the same numbers."""
    ranked, values = table.values(rows, columns)
    if score == "lac":
        return 1.0 - ranked
    if u is not None:
        values = values - (1.0 - u) * ranked
    if score == "raps":
        values = values + penalty * np.maximum(columns + 1 - k_reg, 0)
    return values


def leading_sizes(table: RankTable, rows: np.ndarray, score: str, u: np.ndarray | None, q: float, *,
                  penalty: float = 0.0, k_reg: int = 0) -> np.ndarray:
    """(len(rows),) set sizes: the number of leading ranks whose score is at most ``q``, found by bisection (binary
    lifting: ceil(log2(K + 1)) steps of one score per row, every row at once), not K.

    The scores grow with the rank (module docstring) in floating point too: the cumulative sum does not decrease
    and ``(1 - u) p`` does not increase along a sorted row, and rounding keeps both orders; so the bisection
    counts exactly the labels that :func:`prediction_sets` marks.
    """
    rows = np.asarray(rows, dtype=np.int64)
    size = np.zeros(len(rows), dtype=np.int64)
    step = 1 << (table.k.bit_length() - 1)  # the largest power of two <= K
    while step:
        longer = size + step
        fits = longer <= table.k
        inside = scores_at(table, rows, np.minimum(longer, table.k) - 1, score, u, penalty=penalty, k_reg=k_reg) <= q
        size = np.where(fits & inside, longer, size)  # rank `longer` is in the set: so are all before it
        step >>= 1
    return size


def prediction_sets(scores: np.ndarray, order: np.ndarray | None, q: float) -> np.ndarray:
    """(N, K) bool: label ``y`` of row ``i`` is in its set (``s(x_i, y) <= q``), in class order."""
    if order is None:
        return scores <= q
    sets = np.zeros(scores.shape, dtype=bool)
    np.put_along_axis(sets, order, scores <= q, axis=1)
    return sets
