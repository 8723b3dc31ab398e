"""How good are prediction sets: coverage, size, class-conditional coverage, over repeated conformal splits.

For one conformal split (a calibration part fixing the threshold, a test part scored), with ``C(x)`` the
set of a test sample, ``y`` its label and ``1 - alpha`` the coverage asked for:

* ``coverage``: the share of test samples with ``y`` in ``C(x)`` (marginal coverage; Vovk et al. 2005,
  Angelopoulos & Bates 2023, eq. 1: in ``[1 - alpha, 1 - alpha + 1/(n + 1)]`` in expectation for scores
  without ties, ``n`` calibration samples: :func:`coverage_bounds`);
* ``size``: the mean set size ``|C(x)|``; ``singleton``, ``empty``: the shares of sets with one and no label;
* ``covgap``: the class-conditional coverage gap, ``(1/K') sum_k |coverage_k - (1 - alpha)|`` over the
  ``K'`` classes with test samples, ``coverage_k`` the coverage among samples of class ``k`` (Ding et al.
  2023, "Class-conditional conformal prediction with many classes", NeurIPS, sec. 4; the measure of Dabah &
  Tirer 2025 and Xi et al. 2025);
* ``size_share_a-b`` and ``coverage_size_a-b``: the size distribution and the size-stratified coverage
  (Angelopoulos et al. 2021, sec. 4, "SSCV"): the share of sets whose size lies in ``[a, b]`` and the
  coverage among them, for the bins :data:`SIZE_BINS` that K reaches; a bin without sets in a repeat is
  left out of that repeat's mean;
* ``threshold``: the conformal threshold ``q``.

Each metric is computed on every repeat; :func:`summarise` gives the mean over the repeats and a 95 %
t-interval of that mean (``mean -+ t_{0.975, R-1} sd / sqrt(R)``). The repeats share the test half, so
the interval describes the split-to-split noise, not a confidence interval over new data.

:func:`evaluate_repeats` shares the sorting of each probability row across scores, repeats and alphas
(the sort depends on none of them); it gives the numbers of :class:`~calibrepro.conformal.predictors.
ConformalClassifier` fitted on each calibration part and applied to its test part, with the draws of
:func:`repeat_draws` (tests/test_conformal.py checks it).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np

from calibrepro.conformal.scores import RANDOMISABLE, RankTable, leading_sizes, rank_table, scores_at, threshold

#: size bins of the size distribution and the size-stratified coverage (Angelopoulos et al. 2021, sec. 4)
SIZE_BINS = ((0, 1), (2, 3), (4, 6), (7, 10), (11, 100), (101, 1000))
#: level of the intervals over the repeats
LEVEL = 0.95


def size_bins(n_classes: int) -> list[tuple[int, int]]:
    """The :data:`SIZE_BINS` a set of ``n_classes`` labels can fall into (the last one open to K)."""
    bins = [(low, high) for low, high in SIZE_BINS if low <= n_classes]
    return [*bins[:-1], (bins[-1][0], max(bins[-1][1], n_classes))]


def bin_name(low: int, high: int) -> str:
    return f"{low}-{high}"


def set_metrics(sizes: np.ndarray, covered: np.ndarray, labels: np.ndarray, alpha: float,
                n_classes: int) -> dict[str, float]:
    """The metrics of one repeat's test part (module docstring): ``sizes`` and ``covered`` per test sample."""
    counts = np.bincount(labels, minlength=n_classes)
    hits = np.bincount(labels, weights=covered, minlength=n_classes)
    present = counts > 0
    values = {
        "coverage": float(covered.mean()),
        "size": float(sizes.mean()),
        "singleton": float(np.mean(sizes == 1)),
        "empty": float(np.mean(sizes == 0)),
        "covgap": float(np.mean(np.abs(hits[present] / counts[present] - (1 - alpha)))),
    }
    for low, high in size_bins(n_classes):
        inside = (sizes >= low) & (sizes <= high)
        values[f"size_share_{bin_name(low, high)}"] = float(inside.mean())
        if inside.any():
            values[f"coverage_size_{bin_name(low, high)}"] = float(covered[inside].mean())
    return values


def coverage_bounds(n: int, alpha: float) -> dict[str, float]:
    """``bound_low``, ``bound_high``: the expected coverage's finite-sample range ``[1 - alpha, 1 - alpha + 1/(n + 1)]``
    with ``n`` calibration samples (Vovk et al. 2005; Angelopoulos & Bates 2023, Theorem 1 and its footnote)."""
    return {"bound_low": 1 - alpha, "bound_high": 1 - alpha + 1 / (n + 1)}


def repeat_draws(seed: int, repeat: int, score: str, n: int, randomized: bool) -> np.ndarray | None:
    """(n,) the uniform draws of one repeat and score (one per row of the test half), or None when not randomised.

    Every calibrator of a model gets the same draws (common random numbers: their differences are not
    the draws' noise)."""
    if not randomized or score not in RANDOMISABLE:
        return None
    return np.random.default_rng([int(seed), int(repeat), list(RANDOMISABLE).index(score)]).uniform(size=n)


def evaluate_repeats(probabilities: np.ndarray, labels: np.ndarray, calibration: np.ndarray, test: np.ndarray, *,
                     score: str, alphas: Sequence[float], randomized: bool = True, penalty: float = 0.01,
                     k_reg: int = 5, seed: int = 0, where: str = "the conformal calibration part",
                     table: RankTable | None = None) -> dict[float, list[dict[str, float]]]:
    """alpha -> one :func:`set_metrics` dict per repeat.

    ``probabilities`` (N, K) and ``labels`` (N,): the rows the repeats split; ``calibration`` (R, n) and
    ``test`` (R, m): each repeat's rows of them (:mod:`calibrepro.conformal.splits`). ``table``: the rows'
    :func:`~calibrepro.conformal.scores.rank_table` when the caller has it (one sort serves every score).
    A repeat costs O(N log K): the label's score of every row, and each test set's size by bisection.
    """
    table = table if table is not None else rank_table(probabilities, labels)
    rows = np.arange(len(labels))
    options = {"penalty": penalty, "k_reg": k_reg}
    results: dict[float, list] = {alpha: [] for alpha in alphas}
    for repeat, (cal, tst) in enumerate(zip(calibration, test)):
        u = repeat_draws(seed, repeat, score, len(labels), randomized)
        true = scores_at(table, rows, table.ranks, score, u, **options)
        for alpha in alphas:
            q = threshold(true[cal], alpha, where)
            sizes = leading_sizes(table, tst, score, None if u is None else u[tst], q, **options)
            values = set_metrics(sizes, true[tst] <= q, labels[tst], alpha, probabilities.shape[1])
            values["threshold"] = q
            results[alpha].append(values)
    return results


def summarise(repeats: Iterable[Mapping[str, float]], level: float = LEVEL) -> dict[str, float]:
    """metric -> mean over the repeats, and ``metric_low``, ``metric_high``: the t-interval of the mean (module
    docstring; the mean itself when there is one repeat). Metrics absent in a repeat are averaged over the others."""
    from scipy import stats

    collected: dict[str, list[float]] = {}
    for values in repeats:
        for name, value in values.items():
            collected.setdefault(name, []).append(value)
    out = {}
    for name, values in collected.items():
        mean = math.fsum(values) / len(values)
        half = 0.0
        if len(values) > 1:
            sd = float(np.std(values, ddof=1))
            half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * sd / math.sqrt(len(values))
        out[name] = mean
        out[f"{name}_low"], out[f"{name}_high"] = mean - half, mean + half
    return out


def temperature_sweep(logits: np.ndarray, labels: np.ndarray, calibration: np.ndarray, test: np.ndarray,
                      temperatures: Sequence[float], *, scores: Sequence[str], alphas: Sequence[float],
                      randomized: bool = True, penalty: float = 0.01, k_reg: int = 5, seed: int = 0
                      ) -> list[tuple[float, str, float, str, float]]:
    """``(temperature, score, alpha, metric, value)``: mean ``size`` and ``covgap`` over the repeats of the sets
    built on ``softmax(logits / T)`` for each temperature T (the figure of Dabah & Tirer 2025, Fig. 1, and
    Xi et al. 2025, Fig. 2)."""
    from calibrepro.calibrators.base import softmax

    rows, table = [], None
    for temperature in temperatures:
        probabilities = softmax(np.asarray(logits, np.float64) / temperature, "float64")
        table = rank_table(probabilities, labels, reuse=table)
        for score in scores:
            per_alpha = evaluate_repeats(probabilities, labels, calibration, test, score=score, alphas=alphas,
                                         randomized=randomized, penalty=penalty, k_reg=k_reg, seed=seed, table=table)
            for alpha, repeats in per_alpha.items():
                summary = summarise(repeats)
                rows += [(float(temperature), score, alpha, metric, summary[metric]) for metric in ("size", "covgap")]
    return rows
