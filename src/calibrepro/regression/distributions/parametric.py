"""The closed-form families: :class:`Gaussian` (a mean and a standard deviation) and :class:`StudentT`
(evidential regression's predictive)."""

from __future__ import annotations

import numpy as np
from scipy import special

from calibrepro.regression.distributions.base import (
    Predictive,
    _as_param,
    _at,
    _col,
    _gauss_partial,
    _norm_pdf,
    _positive,
)


class Gaussian(Predictive):
    """``N(mean_t, std_t^2)`` per sample: a heteroscedastic network's output, or a mean and a std."""

    kind = "gaussian"

    def __init__(self, mean, std):
        self.loc = _as_param(mean, "mean")
        self.scale = _positive(_as_param(std, "std"), "std")
        if self.scale.shape != self.loc.shape:
            raise ValueError(f"mean {self.loc.shape} and std {self.scale.shape} differ in shape")

    def __len__(self):
        return self.loc.shape[0]

    def params(self):
        return {"mean": self.loc, "std": self.scale}

    def _z(self, y):
        y = _at(y, len(self))
        return (y - _col(self.loc, y)) / _col(self.scale, y), y

    def cdf(self, y):
        z, _ = self._z(y)
        return special.ndtr(z)

    def logpdf(self, y):
        z, y = self._z(y)
        return -0.5 * z * z - np.log(_col(self.scale, y)) - 0.5 * np.log(2 * np.pi)

    def ppf(self, q):
        q = _at(q, len(self))
        return _col(self.loc, q) + _col(self.scale, q) * special.ndtri(q)

    def mean(self):
        return self.loc.copy()

    def var(self):
        return self.scale**2

    def partial_moments(self, lo, hi):
        lo, hi = _at(lo, len(self)), _at(hi, len(self))
        mu, sd = _col(self.loc, lo), _col(self.scale, lo)
        m0, z1, z2 = _gauss_partial((lo - mu) / sd, (hi - mu) / sd)
        return m0, mu * m0 + sd * z1, mu * mu * m0 + 2 * mu * sd * z1 + sd * sd * z2

    def scaled(self, s):
        return Gaussian(self.loc, self.scale * float(s))

    def reflected(self):
        return Gaussian(-self.loc, self.scale)

    def crps(self, y):
        """Closed form (Gneiting et al. 2005, eq. 5): ``sigma [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]``."""
        z, _ = self._z(y)
        return self.scale * (z * (2 * special.ndtr(z) - 1) + 2 * _norm_pdf(z) - 1 / np.sqrt(np.pi))


class StudentT(Predictive):
    """Location-scale Student-t ``St(loc_t, scale_t, df_t)``: evidential regression's predictive.

    Amini et al. (2020, eq. 8) integrate the Normal-Inverse-Gamma evidence
    ``NIG(gamma, nu, alpha, beta)`` over the Gaussian's mean and variance; the marginal of y is a
    Student-t with ``2 alpha`` degrees of freedom, location ``gamma`` and squared scale
    ``beta (1 + nu) / (nu alpha)`` (:meth:`from_nig`).  Its variance is finite for ``df > 2``
    (``inf`` otherwise, and so are the mean-squared quantities that need it).
    """

    kind = "student_t"

    def __init__(self, loc, scale, df):
        self.loc = _as_param(loc, "loc")
        self.scale = _positive(_as_param(scale, "scale"), "scale")
        self.df = _positive(_as_param(df, "df"), "df")
        if not self.loc.shape == self.scale.shape == self.df.shape:
            raise ValueError("loc, scale and df must have the same shape")

    @classmethod
    def from_nig(cls, gamma, nu, alpha, beta) -> "StudentT":
        """The predictive of NIG evidence (Amini et al. 2020, eq. 8)."""
        nu, alpha, beta = (np.asarray(a, dtype=np.float64) for a in (nu, alpha, beta))
        return cls(gamma, np.sqrt(beta * (1 + nu) / (nu * alpha)), 2 * alpha)

    def __len__(self):
        return self.loc.shape[0]

    def params(self):
        return {"loc": self.loc, "scale": self.scale, "df": self.df}

    def _z(self, y):
        y = _at(y, len(self))
        return (y - _col(self.loc, y)) / _col(self.scale, y), y

    def cdf(self, y):
        z, y = self._z(y)
        return special.stdtr(_col(self.df, y), z)

    def logpdf(self, y):
        z, y = self._z(y)
        nu = _col(self.df, y)
        return (
            special.gammaln((nu + 1) / 2)
            - special.gammaln(nu / 2)
            - 0.5 * np.log(nu * np.pi)
            - np.log(_col(self.scale, y))
            - (nu + 1) / 2 * np.log1p(z * z / nu)
        )

    def ppf(self, q):
        q = _at(q, len(self))
        x = _col(self.loc, q) + _col(self.scale, q) * special.stdtrit(_col(self.df, q), q)
        return np.where(q <= 0, -np.inf, np.where(q >= 1, np.inf, x))  # scipy's stdtrit(df, 0) is +inf

    def mean(self):
        return np.where(self.df > 1, self.loc, np.nan)

    def var(self):
        with np.errstate(divide="ignore"):
            return np.where(self.df > 2, self.scale**2 * self.df / np.maximum(self.df - 2, 1e-300), np.inf)

    def partial_moments(self, lo, hi):
        """Closed forms: ``int z f_nu = -(nu + z^2) f_nu(z) / (nu - 1)`` and, for nu > 2,
        ``int z^2 f_nu = nu (nu-1)/(nu-2) F_{nu-2}(z sqrt((nu-2)/nu)) - nu F_nu(z)`` (from
        ``z^2 f_nu(z) = nu (1 + z^2/nu) f_nu(z) - nu f_nu(z)``); NaN/inf where they diverge."""
        lo, hi = _at(lo, len(self)), _at(hi, len(self))
        mu, sd, nu = _col(self.loc, lo), _col(self.scale, lo), _col(self.df, lo)
        a, b = (lo - mu) / sd, (hi - mu) / sd
        m0 = special.stdtr(nu, b) - special.stdtr(nu, a)

        def first(z):
            with np.errstate(invalid="ignore", over="ignore"):
                f = np.exp(self._logpdf_std(z, nu))
                out = -(nu + z * z) * f / (nu - 1)
            return np.where(np.isfinite(z), out, 0.0)

        def second(z):
            with np.errstate(invalid="ignore", divide="ignore"):
                w = z * np.sqrt(np.maximum(nu - 2, 0) / nu)
                return nu * (nu - 1) / (nu - 2) * special.stdtr(np.maximum(nu - 2, 1e-300), w) - nu * special.stdtr(
                    nu, z
                )

        z1 = np.where(nu > 1, first(b) - first(a), np.nan)
        z2 = np.where(nu > 2, second(b) - second(a), np.inf)
        return m0, mu * m0 + sd * z1, mu * mu * m0 + 2 * mu * sd * z1 + sd * sd * z2

    @staticmethod
    def _logpdf_std(z, nu):
        return (
            special.gammaln((nu + 1) / 2)
            - special.gammaln(nu / 2)
            - 0.5 * np.log(nu * np.pi)
            - (nu + 1) / 2 * np.log1p(z * z / nu)
        )

    def scaled(self, s):
        return StudentT(self.loc, self.scale * float(s), self.df)

    def reflected(self):
        return StudentT(-self.loc, self.scale, self.df)

    def crps(self, y):
        """Closed form for ``df > 1`` (Jordan, Krueger & Lerch 2019, scoringRules, section on the t):

        ``sigma [z (2 F_nu(z) - 1) + 2 f_nu(z) (nu + z^2) / (nu - 1)
        - 2 sqrt(nu) B(1/2, nu - 1/2) / ((nu - 1) B(1/2, nu/2)^2)]``; ``inf`` for ``df <= 1``.
        """
        z, y = self._z(y)
        nu = self.df
        with np.errstate(invalid="ignore", divide="ignore"):
            f = np.exp(self._logpdf_std(z, nu))
            bterm = 2 * np.sqrt(nu) * np.exp(special.betaln(0.5, nu - 0.5) - 2 * special.betaln(0.5, nu / 2)) / (nu - 1)
            out = self.scale * (z * (2 * special.stdtr(nu, z) - 1) + 2 * f * (nu + z * z) / (nu - 1) - bterm)
        return np.where(nu > 1, out, np.inf)

