"""Averaging the predictions of several networks or draws: the log of their mean softmax.

A deep ensemble (Lakshminarayanan et al. 2017, "Simple and scalable predictive uncertainty
estimation using deep ensembles": ``p(y|x) = 1/M sum_m p_m(y|x)``), MC-Dropout's passes (Gal &
Ghahramani 2016) and a Bayesian network's weight draws (Blundell et al. 2015) all predict the mean
of their members' softmax probabilities. Stored as logits, that mean is

    ``log(1/M sum_m softmax(z_m))`` = ``logsumexp_m(log_softmax(z_m)) - log M``,

computed in float64 (the logsumexp form is the same value without underflow to ``log 0``), so
that ``softmax`` of the result is the mean probability. Used by the ``ensemble`` source
(:mod:`calibrepro.zoo.ensemble`) and by the networks the pipeline trains (:mod:`calibrepro.training`).
"""

from __future__ import annotations

import numpy as np


def log_mean_softmax(members: list[np.ndarray]) -> np.ndarray:
    """float64 ``log(1/M sum_m softmax(z_m))`` of M (N, K) logits arrays (module docstring)."""
    from scipy.special import log_softmax, logsumexp

    stacked = np.stack([log_softmax(np.asarray(z, dtype=np.float64), axis=1) for z in members])
    return logsumexp(stacked, axis=0) - np.log(len(members))
