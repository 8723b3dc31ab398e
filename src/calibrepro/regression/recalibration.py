"""Recalibrators of predictive distributions: fit on a calibration split, transform test predictives.

=======================  ======================================================================
``uncalibrated``         the model's predictive unchanged
``isotonic``             Kuleshov et al. 2018, Algorithm 1: ``R(F_t(y))``, R isotonic on PIT values
``isotonic_two_sided``   the same on central intervals (the seed): ``R`` maps ``|2 F_t(y) - 1|``
``std_scaling``          every standard deviation times one factor ``s`` fitted by Gaussian NLL
                         (Levi et al. 2019; Laves et al. 2020)
=======================  ======================================================================

The conventions are the classification calibrators' (:mod:`calibrepro.calibrators.base`):
scikit-learn estimators (hyperparameters are ``__init__`` keywords stored unchanged, fitted state in
attributes ending in ``_``), ``fit(predictive, y)`` returns ``self``, and ``to_json`` /
``from_json`` serialise the fitted state so that a round trip reproduces :meth:`transform` bit for
bit (``{"method", "hyperparameters", "params", "diagnostics"}``; floats are float64 and JSON
writes them with ``repr``, which parses back exactly).

Both isotonic methods give a :class:`RecalibratedDistribution` ``G_t = T(F_t)`` with T a continuous,
strictly increasing, piecewise-linear map of [0, 1] onto itself (its knots are the fitted state):
a proper CDF with a density everywhere, quantiles ``F_t^-1(T^-1(q))``, and mean and variance in
closed form from the base family's partial moments.  Standard-deviation scaling returns the base
family itself, scaled about its mean (:meth:`Predictive.scaled`): the recalibrated predictive has
calibrated standard deviations, which isotonic recalibration cannot give (the seed's open question).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from calibrepro.calibrators.base import FittedState
from calibrepro.regression.distributions import Predictive
from calibrepro.regression.distributions.recalibrated import RecalibratedDistribution
from calibrepro.suggestions import closest_name

__all__ = [
    "LEVEL_EPS",
    "RECALIBRATORS",
    "IsotonicRecalibration",
    "RecalibratedDistribution",
    "Recalibrator",
    "StdScaling",
    "TwoSidedIsotonicRecalibration",
    "Uncalibrated",
    "make_recalibrator",
    "recalibrator_title",
    "recalibrator_from_json",
]


def _check_y(y, n: int) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) like the predictive, got {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError("y contains NaN or infinite values")
    return y


class Recalibrator(FittedState, BaseEstimator):
    """``fit(predictive, y) -> self``; ``transform(predictive) -> Predictive``; the calibrators' JSON round
    trip (:class:`calibrepro.calibrators.base.FittedState`), its ``params`` the calibration size ``n_fit``
    and a subclass's :meth:`_state`."""

    display_names: ClassVar[dict[str, str]] = {}
    reference: ClassVar[str] = ""

    def fit(self, predictive: Predictive, y) -> "Recalibrator":
        raise NotImplementedError

    def transform(self, predictive: Predictive) -> Predictive:
        raise NotImplementedError

    def fit_transform(self, predictive: Predictive, y) -> Predictive:
        return self.fit(predictive, y).transform(predictive)

    def _state(self) -> dict:
        raise NotImplementedError

    def _set_state(self, params: dict) -> None:
        raise NotImplementedError

    def _fitted_params(self) -> dict:
        return {"n_fit": self.n_fit_, **self._state()}

    def _set_fitted_params(self, params: dict) -> None:
        self.n_fit_ = int(params["n_fit"])
        self._set_state(params)

    def _check_fitted(self) -> None:
        check_is_fitted(self, "n_fit_")


class Uncalibrated(Recalibrator):
    """The model's own predictive (the "before" column)."""

    method = "uncalibrated"
    display_names = {"ru": "До калибровки", "en": "Uncalibrated"}
    reference = "the model's predictive distribution"

    def fit(self, predictive, y):
        _check_y(y, len(predictive))
        self.n_fit_ = len(predictive)
        self.diagnostics_ = {}
        return self

    def transform(self, predictive):
        self._check_fitted()
        return predictive

    def _state(self):
        return {}

    def _set_state(self, params):
        pass


#: the inner knots of a recalibration map lie in ``[LEVEL_EPS, 1 - LEVEL_EPS]``: a calibration value
#: nearer 0 or 1 (a target far in a tail, at the limit of double precision there) counts at the
#: nearest of these (:func:`_ecdf_knots`)
LEVEL_EPS = 1e-12


def _ecdf_knots(values: np.ndarray, max_knots: int, eps: float = LEVEL_EPS) -> tuple[np.ndarray, np.ndarray]:
    """Kuleshov's recalibration map: the empirical CDF of the calibration values, anchored at (0, 0), (1, 1).

    Kuleshov et al. (2018), Algorithm 1, pairs each calibration value ``v_t`` (a PIT value, or a
    central level ``|2 u_t - 1|``) with the fraction of values at or below it and fits an isotonic
    regression to the pairs; the fractions already increase with ``v_t``, so the fit is the pairs
    themselves and the map is the empirical CDF, interpolated linearly.  Three choices keep it a
    proper, strictly increasing CDF transform with a bounded cost, whatever the values:

    * the fraction is ``#{s : v_s <= v} / (T + 1)`` (Weibull's plotting position, within 1/(T + 1)
      of Kuleshov's ``/ T``), so the last knot stays below (1, 1): with ``/ T`` the top piece would be
      flat, a zero density and an infinite NLL for a test value above every calibration value;
    * the knots' levels lie in ``[eps, 1 - eps]``: a value nearer 0 or 1 (exactly 0 or 1 where the
      model gives the target probability 0 or 1 beyond it: an overconfident model's usual case) moves
      to the nearest bound, and its fraction counts the values at or below that bound.  So a share
      ``a`` of values at or below ``eps`` gives the knot ``(eps, a)``: the recalibrated predictive puts
      that mass in the base's tail below its eps-quantile, shaped as that tail; a share ``b`` above
      ``1 - eps`` leaves ``1 - b`` as the last knot's level at most: the mass b goes to the base's
      tail above its (1 - eps)-quantile.  No knot lands where double precision cannot place a
      quantile, and levels above the last knot are "repaired" only by that tail (the seed's
      observation on an overconfident model);
    * a knot whose fraction equals the previous one's (tied values merged by the clipping) is
      dropped, so T is strictly increasing (no flat piece, no zero density); with no value at or
      below ``1 - eps`` the map is the identity;
    * at most ``max_knots`` knots, at equally spaced ranks (the map then deviates from the full
      empirical CDF by at most about 1/max_knots in level): the recalibrated predictive's moments
      and quantiles cost one base quantile per knot and sample, whatever the calibration size.
    """
    v = np.sort(np.clip(values, 0.0, 1.0))
    t = v.size
    ranks = np.unique(np.round(np.linspace(1, t, min(t, max_knots - 2))).astype(np.int64))
    x = np.unique(np.clip(v[ranks - 1], eps, 1.0 - eps))
    y = np.searchsorted(v, x, side="right") / (t + 1.0)
    return _strictly_increasing(np.concatenate([[0.0], x, [1.0]]), np.concatenate([[0.0], y, [1.0]]))


def _strictly_increasing(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The knots (x increasing, y non-decreasing, anchors first and last) that rise in both x and y
    over the last one kept; the anchor (1, 1) is always kept (it rises over every inner knot)."""
    keep = np.ones(x.size, dtype=bool)
    last = 0
    for i in range(1, x.size):  # K <= max_knots iterations
        keep[i] = x[i] > x[last] and y[i] > y[last]
        last = i if keep[i] else last
    return x[keep], y[keep]


def _check_knots(max_knots) -> int:
    if isinstance(max_knots, bool) or not isinstance(max_knots, (int, np.integer)) or max_knots < 3:
        raise ValueError(f"max_knots of isotonic recalibration must be an integer >= 3, got {max_knots!r}")
    return int(max_knots)


class _KnotsRecalibrator(Recalibrator):
    """Shared state of the isotonic recalibrators: the knots of T (at most ``max_knots``), fitted to the
    calibration PIT values by :meth:`_knots`."""

    def __init__(self, max_knots: int = 200):
        self.max_knots = max_knots

    def fit(self, predictive, y):
        y = _check_y(y, len(predictive))
        self.knots_x_, self.knots_y_ = self._knots(predictive.cdf(y), _check_knots(self.max_knots))
        self.n_fit_ = int(y.size)
        self.diagnostics_ = {"knots": int(self.knots_x_.size)}
        return self

    def _knots(self, pit: np.ndarray, max_knots: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def transform(self, predictive):
        self._check_fitted()
        return RecalibratedDistribution(predictive, self.knots_x_, self.knots_y_)

    def _state(self):
        return {"knots_x": self.knots_x_.tolist(), "knots_y": self.knots_y_.tolist()}

    def _set_state(self, params):
        self.knots_x_ = np.asarray(params["knots_x"], dtype=np.float64)
        self.knots_y_ = np.asarray(params["knots_y"], dtype=np.float64)

    def parameters(self) -> dict[str, int]:
        """``knots``: the knots of the fitted map T, the anchors (0, 0) and (1, 1) included (:func:`_ecdf_knots`)."""
        self._check_fitted()
        return {"knots": int(self.knots_x_.size)}


class IsotonicRecalibration(_KnotsRecalibrator):
    """Kuleshov et al. (2018), Algorithm 1: ``G_t(y) = R(F_t(y))`` with R the isotonic fit of the
    empirical CDF of the calibration PIT values ``F_t(y_t)``, at most ``max_knots`` knots (one-sided
    intervals ``(-inf, G^-1(p)]`` then hold a fraction p of the calibration targets, up to
    1/(T + 1) and 1/max_knots; :func:`_ecdf_knots`)."""

    method = "isotonic"
    display_names = {"ru": "Изотоническая", "en": "Isotonic"}
    reference = "Kuleshov, Fenner & Ermon 2018, Algorithm 1"

    def _knots(self, pit, max_knots):
        return _ecdf_knots(pit, max_knots)


def _mirrored(v: np.ndarray) -> np.ndarray:
    """Knots of R on [0, 1] -> those of T on [0, 1], mirrored about 1/2: ``1/2 -+ v/2``."""
    return np.concatenate([0.5 - v[::-1] / 2, 0.5 + v[1:] / 2])


class TwoSidedIsotonicRecalibration(_KnotsRecalibrator):
    """Isotonic recalibration of central intervals (the seed's two-sided variant).

    The central interval of level p, ``[F^-1((1-p)/2), F^-1((1+p)/2)]``, holds y exactly when
    ``c = |2 F(y) - 1| <= p``; R is fitted to the empirical CDF of the calibration ``c_t`` as in
    :class:`IsotonicRecalibration`, and the recalibrated CDF is
    ``G(y) = 1/2 + sign(F(y) - 1/2) R(|2 F(y) - 1|) / 2``: symmetric about the base median, with
    central intervals of level p equal to the base's of level ``R^-1(p)``.  G = T(F) with T the
    mirror image of R about (1/2, 1/2), so it is again a :class:`RecalibratedDistribution`.
    """

    method = "isotonic_two_sided"
    display_names = {"ru": "Изотоническая (двусторонняя)", "en": "Isotonic (two-sided)"}
    reference = "Kuleshov et al. 2018, Algorithm 1, on central intervals (seed 002)"

    def _knots(self, pit, max_knots):
        # central levels in [2 eps, 1 - 2 eps]: mirrored, the base levels in [eps, 1 - eps] as one-sided
        cx, cy = _ecdf_knots(np.abs(2.0 * pit - 1.0), max_knots // 2 + 1, 2 * LEVEL_EPS)  # at most max_knots in all
        return _strictly_increasing(_mirrored(cx), _mirrored(cy))  # 1/2 -+ c/2 may round two c's together


#: criteria of :class:`StdScaling` besides the Gaussian NLL: uncertainty-toolbox's
#: ``optimize_recalibration_ratio`` criteria (two-sided, levels ``linspace(0, 1, 100)``)
_CAL_CRITERIA = ("mace", "rmsce", "miscalibration_area")


class StdScaling(Recalibrator):
    """One factor s on every standard deviation (Levi et al. 2019, section 4; Laves et al. 2020, sigma scaling).

    The predictive is scaled about its mean, ``Y' = m + s (Y - m)`` (:meth:`Predictive.scaled`), so
    its standard deviation becomes ``s * std``: calibrated standard deviations, not only calibrated
    probabilities.  With ``criterion="nll"`` (default) s minimises the Gaussian NLL of
    ``N(m_t, s^2 std_t^2)`` on the calibration split,
    ``sum_t [log(s std_t) + (y_t - m_t)^2 / (2 s^2 std_t^2)]``, whose minimiser is closed form:
    ``s^2 = (1/T) sum_t ((y_t - m_t) / std_t)^2``; m_t and std_t are the predictive's mean and
    standard deviation (for a mixture or a Student-t: its moments).  ``criterion`` "mace",
    "rmsce" or "miscalibration_area" instead minimise that two-sided calibration error over
    ``s in [1e-2, 1e2]`` (uncertainty-toolbox's ``optimize_recalibration_ratio``; bounded search in
    log s after a grid of 201 points, the error being a step function of s).  Rows whose mean or
    variance does not exist (a Student-t with ``df <= 2``) or whose spread is 0 (a point mass: any s
    leaves it unchanged) say nothing about s and are left out of the NLL; with no row left, s = 1.
    """

    method = "std_scaling"
    display_names = {"ru": "Масштабирование σ", "en": "Std scaling"}
    reference = "Levi et al. 2019; Laves et al. 2020"

    def __init__(self, criterion: str = "nll"):
        self.criterion = criterion

    def fit(self, predictive, y):
        y = _check_y(y, len(predictive))
        self.diagnostics_ = {}
        if self.criterion == "nll":
            mean, var = _mean_var(predictive)
            usable = np.isfinite(mean) & np.isfinite(var) & (var > 0)
            if usable.any():
                self.scale_ = float(np.sqrt(np.mean((y[usable] - mean[usable]) ** 2 / var[usable])))
            else:
                self.scale_ = 1.0
            if not usable.all():
                self.diagnostics_["rows_without_finite_positive_variance"] = int((~usable).sum())
        elif self.criterion in _CAL_CRITERIA:
            self.scale_ = _search_scale(predictive, y, self.criterion)
        else:
            raise ValueError(f"criterion must be 'nll' or one of {', '.join(_CAL_CRITERIA)}, got {self.criterion!r}")
        if not np.isfinite(self.scale_) or self.scale_ <= 0:
            raise ValueError(
                f"std scaling found no positive finite factor (got {self.scale_}); check the predictive's std"
            )
        self.n_fit_ = int(y.size)
        self.diagnostics_["scale"] = self.scale_
        return self

    def transform(self, predictive):
        self._check_fitted()
        return predictive.scaled(self.scale_)

    def _state(self):
        return {"scale": self.scale_}

    def _set_state(self, params):
        self.scale_ = float(params["scale"])

    def parameters(self) -> dict[str, float]:
        """``scale``: the factor s on every standard deviation (the class docstring; Levi et al. 2019, sec. 4)."""
        self._check_fitted()
        return {"scale": self.scale_}


def _mean_var(predictive: Predictive) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(predictive, RecalibratedDistribution):
        return predictive.mean_var()
    return predictive.mean(), predictive.var()


def _search_scale(predictive, y, criterion) -> float:
    from calibrepro.regression import metrics

    levels = np.linspace(0.0, 1.0, 100)
    error = {
        "mace": lambda u: metrics.mean_absolute_calibration_error(u, levels, sided="two"),
        "rmsce": lambda u: np.sqrt(metrics.msce(u, levels, sided="two")),
        "miscalibration_area": lambda u: metrics.miscalibration_area(u, sided="two"),
    }[criterion]

    def objective(log_s):
        return error(predictive.scaled(np.exp(log_s)).cdf(y))

    grid = np.linspace(np.log(1e-2), np.log(1e2), 201)
    values = [objective(g) for g in grid]
    best = int(np.argmin(values))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
    found = minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
    return float(np.exp(found.x if found.fun <= values[best] else grid[best]))


#: method name -> class, in the column order of the tables
RECALIBRATORS: dict[str, type[Recalibrator]] = {
    cls.method: cls for cls in (Uncalibrated, IsotonicRecalibration, TwoSidedIsotonicRecalibration, StdScaling)
}


def recalibrator_title(method: str, language: str) -> tuple[str, str]:
    """A recalibrator's display name and the paper it comes from (the parameters tables' headings); an unknown
    method is its own name."""
    cls = RECALIBRATORS.get(method)
    return (cls.display_names.get(language, method), cls.reference) if cls is not None else (method, "")


def make_recalibrator(method: str, **options) -> Recalibrator:
    """A new recalibrator; ``options`` not among its hyperparameters are ignored (as ``make_calibrator``)."""
    try:
        cls = RECALIBRATORS[method]
    except KeyError:
        close = closest_name(method, RECALIBRATORS)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise ValueError(f"unknown recalibration method {method!r}{hint}; known: {', '.join(RECALIBRATORS)}") from None
    accepted = cls._get_param_names()
    return cls(**{key: value for key, value in options.items() if key in accepted})


def recalibrator_from_json(data: dict) -> Recalibrator:
    """Rebuild a fitted recalibrator from :meth:`Recalibrator.to_json` output."""
    method = data.get("method")
    if method not in RECALIBRATORS:
        raise ValueError(f"unknown recalibration method {method!r}; known: {', '.join(RECALIBRATORS)}")
    return RECALIBRATORS[method].from_json(data)
