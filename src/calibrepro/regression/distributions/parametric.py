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
    """``N(mean_t, std_t^2)`` per sample: a heteroscedastic network's output, or a mean and a std.

    A std of exactly 0 is the point mass at the mean, the limit of ``N(m, s^2)`` as s -> 0 (a model
    whose T passes agree, MC-Dropout without dropout): its CDF is the step ``1(y >= m)`` (right-
    continuous), its quantiles are m for levels in (0, 1), its mean m and variance 0, its CRPS
    ``|y - m|``; it has no density (``logpdf`` is -inf off the atom, +inf on it), so its NLL is not finite.
    """

    kind = "gaussian"

    def __init__(self, mean, std):
        self.loc = _as_param(mean, "mean")
        self.scale = _as_param(std, "std")
        if (self.scale < 0).any():
            raise ValueError(f"std must be >= 0 (found {int((self.scale < 0).sum())} values < 0)")
        if self.scale.shape != self.loc.shape:
            raise ValueError(f"mean {self.loc.shape} and std {self.scale.shape} differ in shape")
        self._atom = self.scale == 0

    def __len__(self):
        return self.loc.shape[0]

    def params(self):
        return {"mean": self.loc, "std": self.scale}

    def point_mass(self):
        return self._atom.copy()

    def _z(self, y):
        """Standardised y; for a point mass +-inf, +inf at the atom itself (the CDF is right-continuous)."""
        y = _at(y, len(self))
        mu, sd = _col(self.loc, y), _col(self.scale, y)
        if not self._atom.any():
            return (y - mu) / sd, y
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (y - mu) / sd
        return np.where(_col(self._atom, y), np.where(y >= mu, np.inf, -np.inf), z), y

    def cdf(self, y):
        z, _ = self._z(y)
        return special.ndtr(z)

    def logpdf(self, y):
        z, y = self._z(y)
        atom = _col(self._atom, y)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = -0.5 * z * z - np.log(_col(self.scale, y)) - 0.5 * np.log(2 * np.pi)
        return np.where(atom, np.where(y == _col(self.loc, y), np.inf, -np.inf), out) if self._atom.any() else out

    def ppf(self, q):
        q = _at(q, len(self))
        with np.errstate(invalid="ignore"):  # 0 * -+inf at the levels 0 and 1 of a point mass
            x = _col(self.loc, q) + _col(self.scale, q) * special.ndtri(q)
        return np.where(q <= 0, -np.inf, np.where(q >= 1, np.inf, x))

    def mean(self):
        return self.loc.copy()

    def var(self):
        return self.scale**2

    def partial_moments(self, lo, hi):
        lo, hi = _at(lo, len(self)), _at(hi, len(self))
        mu, sd = _col(self.loc, lo), _col(self.scale, lo)
        m0, z1, z2 = _gauss_partial(self._z(lo)[0], self._z(hi)[0])
        return m0, mu * m0 + sd * z1, mu * mu * m0 + 2 * mu * sd * z1 + sd * sd * z2

    def scaled(self, s):
        return Gaussian(self.loc, self.scale * float(s))

    def reflected(self):
        return Gaussian(-self.loc, self.scale)

    def crps(self, y):
        """Closed form (Gneiting et al. 2005, eq. 5): ``sigma [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]``;
        ``|y - m|`` for a point mass (Gneiting & Raftery 2007, eq. 20 with a step CDF)."""
        z, y = self._z(y)
        with np.errstate(invalid="ignore"):
            out = self.scale * (z * (2 * special.ndtr(z) - 1) + 2 * _norm_pdf(z) - 1 / np.sqrt(np.pi))
        return np.where(self._atom, np.abs(y - self.loc), out)


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
        """``loc + scale t_nu^-1(q)``; in the tails (tail probability p below 1e-3) from
        ``P(|T| > t) = I_{nu / (nu + t^2)}(nu/2, 1/2)`` (Abramowitz & Stegun 26.7.1), i.e.
        ``t = sqrt(nu (1/x - 1))`` with ``x = I^-1(nu/2, 1/2; 2p)``, and where x would be below 1e-100
        (it underflows for heavy tails) from the series' first term ``I_x(a, 1/2) = x^a / (a B(a, 1/2))``
        (A&S 26.5.4; relative error O(x)), in logs.  scipy's ``stdtrit`` is inaccurate below p = 1e-150
        and returns +inf for lower-tail levels below about 1e-300 (scipy 1.14), where a recalibrated
        predictive's map may send levels."""
        q = _at(q, len(self))
        nu = np.broadcast_to(_col(self.df, q), q.shape)
        t = special.stdtrit(nu, q)
        p = np.minimum(q, 1.0 - q)
        tails = (p < 1e-3) & (p > 0)
        if tails.any():
            a, p = nu[tails] / 2, p[tails]
            with np.errstate(divide="ignore", over="ignore"):
                log_x = (np.log(2.0 * p) + np.log(a) + special.betaln(a, 0.5)) / a
                tail = np.where(log_x < -230.0, np.sqrt(2 * a) * np.exp(-0.5 * log_x),
                                np.sqrt(2 * a * (1.0 / special.betaincinv(a, 0.5, 2.0 * p) - 1.0)))
            t[tails] = np.sign(q[tails] - 0.5) * tail
        x = _col(self.loc, q) + _col(self.scale, q) * t
        return np.where(q <= 0, -np.inf, np.where(q >= 1, np.inf, x))  # scipy's stdtrit(df, 0) is +inf

    def moment_exists(self, order):
        return self.df > order

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
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # nu = 1: its NaN is replaced below
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

