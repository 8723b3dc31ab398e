"""A base predictive composed with a recalibration map: ``G_t(y) = T(F_t(y))`` (Kuleshov et al. 2018).

T is continuous, strictly increasing and piecewise linear from (0, 0) to (1, 1); its inner knots lie
in ``[LEVEL_EPS, 1 - LEVEL_EPS]`` (:data:`calibrepro.regression.recalibration.LEVEL_EPS`, where they
are fitted).  Then G is a proper CDF for every base: continuous with a density ``T'(F) f`` where the base has one, a step
where the base is a point mass (T fixes 0 and 1, so a point mass stays that point mass), and its
moment of order k exists exactly where the base's does (T's end pieces have finite positive slopes,
so G's tails are the base's times a constant).
"""

from __future__ import annotations

import numpy as np

from calibrepro.regression.distributions.base import Predictive

#: end pieces of the recalibration map narrower than this in level take the tail's conditional
#: moments in the recalibrated moments (:meth:`RecalibratedDistribution._moments`)
NARROW_PIECE = 1e-5
#: recalibrated levels whose base level is within this of 1 are solved in the reflected base's lower
#: tail (:meth:`RecalibratedDistribution.ppf`), where the level's complement keeps its precision (above
#: it, ``1 - s`` holds s to 1e-6 relative; the reflected base costs a second quantile table)
_UPPER_TAIL = 1e-10


class RecalibratedDistribution(Predictive):
    """``G_t(y) = T(F_t(y))``: a base predictive composed with a piecewise-linear map T of [0, 1].

    ``knots_x`` / ``knots_y`` (K,) are strictly increasing from (0, 0) to (1, 1).  Then G_t is a
    continuous CDF with density ``T'(F_t(y)) f_t(y) > 0`` wherever f_t is, its quantile function is
    ``F_t^-1(T^-1(q))`` (q = 0 and 1 give -inf and inf), and its moments are
    ``sum_k slope_k int_{F^-1(x_k)}^{F^-1(x_k+1)} y^j f`` (:meth:`Predictive.partial_moments` of the
    base, exact).  Above the level 1/2 the CDF and the quantiles go through the complements
    ``1 - F = S`` and ``1 - T(1 - s)`` (the reflected base, :meth:`Predictive.reflected`): a level
    within 1e-16 of 1 keeps its precision there, where the map's top piece may stretch base levels
    by 1e12.  Rows where the base is a point mass keep its mean and variance.
    """

    kind = "recalibrated"

    def __init__(self, base: Predictive, knots_x, knots_y):
        self.base = base
        self.knots_x = np.asarray(knots_x, dtype=np.float64)
        self.knots_y = np.asarray(knots_y, dtype=np.float64)
        kx, ky = self.knots_x, self.knots_y
        if (
            kx.ndim != 1
            or kx.shape != ky.shape
            or kx.size < 2
            or kx[0] != 0
            or kx[-1] != 1
            or ky[0] != 0
            or ky[-1] != 1
            or (np.diff(kx) <= 0).any()
            or (np.diff(ky) <= 0).any()
        ):
            raise ValueError("knots must increase strictly from (0, 0) to (1, 1)")
        self.slopes = np.diff(ky) / np.diff(kx)

    def __len__(self):
        return len(self.base)

    def params(self):
        raise TypeError("a recalibrated distribution is stored as its base's parameters and its recalibrator's JSON")

    def take(self, index):
        return RecalibratedDistribution(self.base.take(index), self.knots_x, self.knots_y)

    def moment_exists(self, order):
        return self.base.moment_exists(order)

    def point_mass(self):
        return self.base.point_mass()

    def transform_levels(self, u) -> np.ndarray:
        """``T(u)``: base levels to recalibrated levels."""
        return np.interp(u, self.knots_x, self.knots_y)

    def inverse_levels(self, q) -> np.ndarray:
        """``T^-1(q)``: recalibrated levels to base levels."""
        return np.interp(q, self.knots_y, self.knots_x)

    def _complement(self, s, inverse: bool = False) -> np.ndarray:
        """``1 - T(1 - s)`` (or ``1 - T^-1(1 - q)`` with ``inverse``) from the complement s, without cancellation."""
        x, y = 1.0 - self.knots_x[::-1], 1.0 - self.knots_y[::-1]
        return np.interp(s, y, x) if inverse else np.interp(s, x, y)

    def _upper(self, u: np.ndarray) -> np.ndarray:
        """Where the complement path applies: base levels of 1/2 and above, except on point-mass rows
        (whose reflection moves the atom's level from 1 to 0)."""
        atom = self.base.point_mass()
        return (u >= 0.5) & ~(atom if u.ndim == 1 else atom[:, None])

    def cdf(self, y):
        u = self.base.cdf(y)
        upper = self._upper(u)
        if not upper.any():
            return self.transform_levels(u)
        survival = self.base.reflected().cdf(-np.asarray(y, dtype=np.float64))
        return np.where(upper, 1.0 - self._complement(survival), self.transform_levels(u))

    def logpdf(self, y):
        u = self.base.cdf(y)
        segment = np.clip(np.searchsorted(self.knots_x, u, side="right") - 1, 0, self.slopes.size - 1)
        return np.log(self.slopes[segment]) + self.base.logpdf(y)

    def ppf(self, q):
        """``F^-1(T^-1(q))``; where ``T^-1(q)`` is within :data:`_UPPER_TAIL` of 1, ``-R^-1(s)`` with R the
        reflected base and ``s = 1 - T^-1(q)`` from the complements (on the rows, and for (N, L) levels
        the columns, that hold such levels only)."""
        q = np.asarray(q, dtype=np.float64)
        tiny = np.finfo(np.float64).tiny  # a base level that underflows to 0 would give -inf
        u = np.maximum(self.inverse_levels(q), tiny)
        s = np.maximum(self._complement(1.0 - q, inverse=True), tiny)
        far = (s < _UPPER_TAIL) & (q < 1)
        out = self.base.ppf(np.where(far, 0.5, u))
        if far.any():
            rows = np.flatnonzero(far if far.ndim == 1 else far.any(axis=1))
            columns = (slice(None),) if far.ndim == 1 else (slice(None), np.flatnonzero(far.any(axis=0)))
            block = (rows[:, None], columns[1]) if far.ndim == 2 else (rows,)
            upper = -self.base.take(rows).reflected().ppf(np.where(far[block], s[block], 0.5))
            out[block] = np.where(far[block], upper, out[block])
        return np.where(q <= 0, -np.inf, np.where(q >= 1, np.inf, out))

    def _moments(self):
        """``E[Y^j] = sum_k slope_k (C_j(b_k+1) - C_j(b_k))``, ``b_k = F^-1(x_k)``, ``C_j`` the base's
        cumulative moments (j = 1, 2).  Where that difference would cancel (two calibration values almost
        equal: slopes reach 1e11 and multiply its rounding), the piece contributes ``dy_k`` times the
        mean of ``F^-1(u)^j`` over it instead: where ``b_k+1 - b_k <= 1e-6 (1 + |b_k|)`` the trapezoid
        rule ``(b_k^j + b_k+1^j) / 2`` (error below ``dy_k (b_k+1 - b_k)^2 |f'/f| / 12``), and for an
        end piece narrower than :data:`NARROW_PIECE` in level the tail's conditional moment:
        ``C_j(b_1) / C_0(b_1)`` below the first knot, and above the last the same of the reflected
        distribution (:meth:`Predictive.reflected`) at ``-b``, where nothing cancels.  Point-mass rows:
        the base's ``m^j``.  NaN (first moment) or inf (second) where the base's moment does not exist."""
        n, kx = len(self), self.knots_x
        b, c1, c2 = self.base.ppf_cumulative_moments(np.broadcast_to(kx, (n, kx.size)))
        dy = np.diff(self.knots_y)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            gap = np.diff(b, axis=1)
            close = np.isfinite(gap) & (np.abs(gap) <= 1e-6 * (1 + np.abs(b[:, :-1])))
            pieces = [np.where(close, dy * (b[:, :-1] ** j + b[:, 1:] ** j) / 2, np.diff(c, axis=1) * self.slopes)
                      for j, c in ((1, c1), (2, c2))]
            if kx[1] < NARROW_PIECE:  # (0, x_1): E[Y^j | Y <= b_1]
                c0, *cj = self.base.cumulative_moments(b[:, 1])
                for piece, c in zip(pieces, cj):
                    piece[:, 0] = dy[0] * c / c0
            if 1 - kx[-2] < NARROW_PIECE:  # (x_K-1, 1): E[Y^j | Y > b] = (-1)^j E[Z^j | Z < -b], Z = -Y
                c0, *cj = self.base.reflected().cumulative_moments(-b[:, -2])
                for j, (piece, c) in enumerate(zip(pieces, cj), 1):
                    piece[:, -1] = dy[-1] * (-1) ** j * c / c0
            m1, m2 = pieces[0].sum(axis=1), pieces[1].sum(axis=1)
        atom = self.base.point_mass()
        if atom.any():
            m1, m2 = np.where(atom, self.base.mean(), m1), np.where(atom, self.base.mean() ** 2, m2)
        m1 = np.where(self.base.moment_exists(1), m1, np.nan)
        return m1, np.where(self.base.moment_exists(2), m2, np.inf)

    def mean(self):
        return self._moments()[0]

    def var(self):
        return self.mean_var()[1]

    def mean_var(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance from one pass over the knots (what the metrics use); inf where the
        variance does not exist."""
        m1, m2 = self._moments()
        with np.errstate(invalid="ignore"):
            var = np.maximum(m2 - m1 * m1, 0.0)
        return m1, np.where(self.base.moment_exists(2), var, np.inf)

    def crps(self, y):
        """The numerical CRPS of :meth:`Predictive.crps`; inf where the base has no mean (the CRPS of a
        distribution without a first moment is infinite)."""
        return np.where(self.base.moment_exists(1), super().crps(y), np.inf)

    def scaled(self, s):
        raise TypeError("scale the base predictive before recalibrating it")
