"""Predictive distributions of regressors: one distribution per test sample, vectorised.

A regressor with uncertainty gives every input ``x_t`` a predictive distribution with CDF ``F_t``;
calibration (Kuleshov et al. 2018) is about these CDFs.  Three families cover the seed's models:

* :class:`Gaussian` -- one network with a heteroscedastic (mean, sigma) output (Nix & Weigend
  1994; Kendall & Gal 2017), or any model summarised by a mean and a standard deviation.
* :class:`GaussianMixture` -- a deep ensemble (Lakshminarayanan et al. 2017, section 2.4: the
  uniform mixture of the members' Gaussians) and MC-Dropout (Gal & Ghahramani 2016, section 4:
  T stochastic passes, each a Gaussian with the model's noise variance ``1/tau``); the mixture
  is the predictive itself, not a Gaussian matched to its moments, so its CDF keeps the skew and
  the heavier tails of the T passes.
* :class:`StudentT` -- evidential regression (Amini et al. 2020, eq. 8): the Normal-Inverse-Gamma
  prior integrated over the mean and variance gives ``St(gamma, beta (1 + nu) / (nu alpha), 2 alpha)``.

Every family stores parameter arrays with a first axis of length N (samples) and answers
``cdf``/``pdf``/``logpdf`` at ``y`` of shape (N,) or (N, L) and ``ppf`` at levels of shape (N,) or
(N, L) (L values per sample, e.g. confidence levels: ``np.broadcast_to(levels, (N, L))``).
Each family is closed under ``Y -> m + s (Y - m)`` (:meth:`Predictive.scaled`, what standard-
deviation scaling needs) and gives partial moments over intervals in closed form
(:meth:`Predictive.partial_moments`, what the recalibrated distribution's mean and variance need).
Everything is float64; nothing loops over samples in Python.

Modules: :mod:`.base` (the interface), :mod:`.parametric` (Gaussian, Student-t), :mod:`.mixture`
(Gaussian mixture), :mod:`.recalibrated` (a base composed with a recalibration map).
"""

from __future__ import annotations

import inspect

from calibrepro.regression.distributions.base import Predictive
from calibrepro.regression.distributions.mixture import GaussianMixture
from calibrepro.regression.distributions.parametric import Gaussian, StudentT

__all__ = ["Gaussian", "GaussianMixture", "Predictive", "StudentT", "predictive_from_arrays"]

_KINDS = {cls.kind: cls for cls in (Gaussian, StudentT, GaussianMixture)}


def predictive_from_arrays(kind: str, arrays) -> Predictive:
    """Rebuild a distribution from its :attr:`Predictive.kind` and :meth:`Predictive.params` arrays."""
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown predictive kind {kind!r}; known: {', '.join(_KINDS)}") from None
    names = [name for name in inspect.signature(cls).parameters if name in arrays]
    return cls(**{name: arrays[name] for name in names})
