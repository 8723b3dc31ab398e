"""Comparing methods across models: mean ranks, Friedman test, Nemenyi critical difference.

Demšar (2006), "Statistical comparisons of classifiers over multiple data sets", JMLR 7, sec. 3.2:
rank the k methods within each of the N models (1 = best, ties share the average rank), compare
the mean ranks ``R_j`` with the Friedman test, and call two methods different when their mean
ranks differ by at least the Nemenyi critical difference ``CD = q_alpha sqrt(k (k + 1) / (6 N))``
with ``q_alpha`` the studentised range quantile over sqrt(2) (Demšar's table 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class RankTest:
    """Mean ranks of the methods over ``n_models`` models and the Friedman/Nemenyi results."""

    methods: list[str]
    mean_ranks: list[float]
    n_models: int
    statistic: float  # Friedman chi-square (NaN when not computable)
    p_value: float
    critical_difference: float
    alpha: float

    @property
    def too_few(self) -> bool:
        """Whether the test rests on too few models or methods to mean much.

        Demšar (2006, sec. 3.2.2): the Friedman statistic follows its chi-square approximation, and so
        the p-value and the Nemenyi CD are trustworthy, "as a rule of a thumb" only for more than 10
        data sets (here: models) and more than 5 methods.
        """
        return self.n_models <= 10 or len(self.methods) <= 5

    def cliques(self) -> list[tuple[int, int]]:
        """Maximal runs ``(first, last)`` of methods (sorted by mean rank) closer than the CD."""
        order = sorted(range(len(self.methods)), key=lambda j: self.mean_ranks[j])
        ranks = [self.mean_ranks[j] for j in order]
        runs = []
        for start in range(len(ranks)):
            end = start
            while end + 1 < len(ranks) and ranks[end + 1] - ranks[start] < self.critical_difference:
                end += 1
            if end > start and not any(s <= start and end <= e for s, e in runs):
                runs.append((start, end))
        return runs


def nemenyi_q(k: int, alpha: float) -> float:
    """``q_alpha`` of the Nemenyi test for k methods: studentised range quantile (df = inf) / sqrt(2)."""
    return float(stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2))


def critical_difference(k: int, n: int, alpha: float) -> float:
    """Nemenyi critical difference of mean ranks (Demšar 2006, eq. in sec. 3.2.2)."""
    return nemenyi_q(k, alpha) * math.sqrt(k * (k + 1) / (6.0 * n))


def rank_test(values: np.ndarray, methods: list[str], *, higher_is_better: bool, alpha: float = 0.05) -> RankTest:
    """Ranks and tests for ``values`` of shape (n_models, k_methods).

    The Friedman statistic is ``scipy.stats.friedmanchisquare`` (with its tie correction); it
    needs at least 3 methods and 2 models, otherwise statistic and p-value are NaN.
    """
    values = np.asarray(values, dtype=np.float64)
    n, k = values.shape
    ranks = stats.rankdata(-values if higher_is_better else values, axis=1)
    mean_ranks = [float(r) for r in ranks.mean(axis=0)]
    statistic = p_value = math.nan
    if k >= 3 and n >= 2:
        result = stats.friedmanchisquare(*values.T)
        statistic, p_value = float(result.statistic), float(result.pvalue)
    cd = critical_difference(k, n, alpha) if k >= 2 else math.nan
    return RankTest(list(methods), mean_ranks, n, statistic, p_value, cd, alpha)
