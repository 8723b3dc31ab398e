"""Split-conformal classifiers: a scikit-learn estimator that turns probabilities into prediction sets.

``ConformalClassifier(score, alpha).fit(probabilities, labels)`` computes the conformity scores of a
calibration set and their threshold (:mod:`calibrepro.conformal.scores`: LAC, APS, RAPS; the
``ceil((n + 1)(1 - alpha))``-th smallest score); ``predict(probabilities)`` returns the (N, K) boolean
sets. Its inputs are probabilities, not logits: those of any calibrator (``predict_proba``) or the
softmax of a model, so that the same conformal step follows every calibrator.

As the calibrators (:mod:`calibrepro.calibrators.base`), it follows scikit-learn's conventions
(hyperparameters are the ``__init__`` keywords, fitted state in attributes ending in ``_``) and
``to_json`` / :func:`conformal_from_json` round-trip it exactly: the threshold is a float64 that JSON
writes as its shortest repr, which parses back to the same number.

**Randomised by default** (APS and RAPS). Romano et al. (2020, Theorem 1 and sec. 2.2) and
Angelopoulos et al. (2021, Theorem 1) give coverage in ``[1 - alpha, 1 - alpha + 1/(n + 1)]`` for the
randomised scores, whose ties are broken by the uniform draw; the non-randomised APS (``u = 1``) keeps
the lower bound only and over-covers, by several points on confident models (its sets hold every label
up to and including the one that crosses the threshold). MAPIE and TorchCP randomise by default for
the same reason. ``randomized=False`` gives the deterministic sets (TorchCP's ``randomized=False``, MAPIE's
``include_last_label=False``); LAC is deterministic either way. The draws are seeded by ``random_state``
(one stream for the calibration scores, another for each ``predict``), so a prediction is the same on
every call and every machine; randomised sets may be empty (the guarantee needs it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from calibrepro.calibrators.base import FittedState
from calibrepro.conformal.scores import (
    RANDOMISABLE, RAPS_K_REG, RAPS_PENALTY, ConformalError, check_alpha, check_probabilities, check_score, label_ranks,
    prediction_sets, score_order, sorted_scores, threshold,
)

#: the random streams of one ``random_state``: the calibration scores' draws, and each prediction's
_FIT_STREAM, _PREDICT_STREAM = 0, 1


def uniform_draws(random_state: int, stream: int, n: int) -> np.ndarray:
    """(n,) U(0, 1) draws of stream ``stream`` of seed ``random_state`` (NumPy's PCG64, the same on every machine)."""
    return np.random.default_rng([int(random_state), stream]).uniform(size=n)


class ConformalClassifier(FittedState, BaseEstimator):
    """Split-conformal prediction sets of a classifier's probabilities (module docstring).

    ``score``: ``lac``, ``aps`` or ``raps``; ``alpha``: the miscoverage level (sets hold the label with
    probability at least ``1 - alpha``); ``randomized``: the randomised APS/RAPS (default, see above);
    ``penalty``, ``k_reg``: RAPS's lambda and k_reg; ``random_state``: the seed of the uniform draws.
    """

    method: ClassVar[str] = "conformal"

    def __init__(self, score: str = "aps", alpha: float = 0.1, randomized: bool = True,
                 penalty: float = RAPS_PENALTY, k_reg: int = RAPS_K_REG, random_state: int = 0):
        self.score = score
        self.alpha = alpha
        self.randomized = randomized
        self.penalty = penalty
        self.k_reg = k_reg
        self.random_state = random_state

    def _draws(self, stream: int, n: int) -> np.ndarray | None:
        return uniform_draws(self.random_state, stream, n) if self.randomized and self.score in RANDOMISABLE else None

    def _scores(self, p: np.ndarray, stream: int) -> tuple[np.ndarray, np.ndarray]:
        """``(order, scores)``: every row's labels by rank and their scores in that order."""
        order = score_order(p, self.score)
        scores = sorted_scores(p, order, self.score, self._draws(stream, len(p)), penalty=self.penalty,
                               k_reg=self.k_reg)
        return order, scores

    def fit(self, probabilities, labels, where: str = "the calibration set") -> "ConformalClassifier":
        """Compute the threshold from calibration ``probabilities`` (N, K) and their integer ``labels`` (N,).

        Raises :class:`~calibrepro.conformal.scores.ConformalError` (naming ``where``) for a bad score or alpha,
        probabilities that are not, labels of one class only, or too few samples for ``alpha``.
        """
        check_score(self.score)
        alpha = check_alpha(self.alpha)
        if self.penalty < 0 or int(self.k_reg) != self.k_reg or self.k_reg < 0:
            raise ConformalError(f"RAPS needs penalty >= 0 and an integer k_reg >= 0, got {self.penalty!r}, "
                                 f"{self.k_reg!r}")
        p = check_probabilities(probabilities, where)
        y = np.asarray(labels)
        if y.shape != (len(p),) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= p.shape[1]:
            raise ConformalError(f"{where}: labels must be {len(p)} integers in [0, {p.shape[1] - 1}]")
        if np.unique(y).size < 2:
            raise ConformalError(f"{where}: every label is {int(y[0])}; a calibration set needs samples of at "
                                 "least two classes")
        order, scores = self._scores(p, _FIT_STREAM)
        true_scores = scores[np.arange(len(y)), label_ranks(order, y)]
        self.threshold_ = threshold(true_scores, alpha, where)
        self.n_classes_ = int(p.shape[1])
        self.n_calibration_ = int(len(y))
        self.diagnostics_ = {}
        return self

    def predict(self, probabilities, where: str = "probabilities") -> np.ndarray:
        """(N, K) bool prediction sets of new ``probabilities``."""
        self._check_fitted()
        p = check_probabilities(probabilities, where)
        if p.shape[1] != self.n_classes_:
            raise ConformalError(f"{where}: {p.shape[1]} classes, the conformal classifier was fitted on "
                                 f"{self.n_classes_}")
        order, scores = self._scores(p, _PREDICT_STREAM)
        return prediction_sets(scores, order, self.threshold_)

    def parameters(self) -> dict[str, int | float]:
        """``threshold``: q, the ``ceil((n + 1)(1 - alpha))``-th smallest calibration score; ``n_calibration``: n."""
        self._check_fitted()
        return {"threshold": self.threshold_, "n_calibration": self.n_calibration_}

    def _fitted_params(self) -> dict:
        return {"threshold": self.threshold_, "n_classes": self.n_classes_, "n_calibration": self.n_calibration_}

    def _set_fitted_params(self, params: dict) -> None:
        self.threshold_ = float(params["threshold"])
        self.n_classes_ = int(params["n_classes"])
        self.n_calibration_ = int(params["n_calibration"])

    def _check_fitted(self) -> None:
        check_is_fitted(self, "threshold_")


def make_conformal(score: str = "aps", alpha: float = 0.1, **options) -> ConformalClassifier:
    """A new, unfitted :class:`ConformalClassifier` (``options``: ``randomized``, ``penalty``, ``k_reg``,
    ``random_state``); the score and alpha are checked here."""
    unknown = sorted(set(options) - {"randomized", "penalty", "k_reg", "random_state"})
    if unknown:
        raise ConformalError(f"a conformal classifier has no option {', '.join(map(repr, unknown))}; its options: "
                             "randomized, penalty, k_reg, random_state")
    return ConformalClassifier(score=check_score(score), alpha=check_alpha(alpha), **options)


def conformal_from_json(data: dict) -> ConformalClassifier:
    """Rebuild a fitted :class:`ConformalClassifier` from its ``to_json()``."""
    return ConformalClassifier.from_json(data)
