"""Predictive distributions, recalibrators and metrics of the regression task (calibrepro.regression)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import integrate, stats

from calibrepro.regression import metrics as M
from calibrepro.regression.distributions import Gaussian, GaussianMixture, Predictive, StudentT, predictive_from_arrays
from calibrepro.regression.recalibration import (
    LEVEL_EPS,
    RECALIBRATORS,
    IsotonicRecalibration,
    RecalibratedDistribution,
    StdScaling,
    make_recalibrator,
    recalibrator_from_json,
)


def _families(n=40, seed=0):
    rng = np.random.default_rng(seed)
    mu, sd = rng.normal(size=n), np.exp(0.3 * rng.normal(size=n))
    return {
        "gaussian": Gaussian(mu, sd),
        "student_t": StudentT(mu, sd, rng.uniform(2.5, 30, size=n)),
        "mixture": GaussianMixture(
            mu[:, None] + 2 * rng.normal(size=(n, 7)), sd[:, None] * rng.uniform(0.2, 1, (n, 7))
        ),
    }


# --------------------------------------------------------------------------------------------
# distributions
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gaussian", "student_t", "mixture"])
def test_ppf_inverts_cdf_from_far_tails_to_centre(kind):
    d = _families()[kind]
    levels = np.array([1e-12, 1e-9, 1e-6, 1e-3, 0.02, 0.3, 0.5, 0.77, 0.99, 1 - 1e-6, 1 - 1e-9])
    q = np.broadcast_to(levels, (len(d), levels.size))
    x = d.ppf(q)
    assert np.isfinite(x).all()
    assert (np.diff(x, axis=1) > 0).all()
    u = d.cdf(x)
    lower = levels < 0.5
    np.testing.assert_allclose(u[:, lower], q[:, lower], rtol=1e-7)  # relative in the lower tail
    np.testing.assert_allclose(1 - u[:, ~lower], 1 - q[:, ~lower], rtol=2e-4, atol=1e-15)
    assert (d.ppf(np.zeros((len(d), 1))) == -np.inf).all() and (d.ppf(np.ones((len(d), 1))) == np.inf).all()


@pytest.mark.parametrize("kind", ["gaussian", "student_t", "mixture"])
def test_density_moments_and_partial_moments_agree_with_quadrature(kind):
    d = _families(n=4)[kind]
    for t in range(len(d)):
        one = d.take([t])

        def f(y):
            return float(one.pdf(np.array([y]))[0])

        mass = integrate.quad(f, -np.inf, np.inf, limit=200)[0]
        mean = integrate.quad(lambda y: y * f(y), -np.inf, np.inf, limit=200)[0]
        assert mass == pytest.approx(1, abs=1e-7)
        assert float(one.mean()[0]) == pytest.approx(mean, abs=1e-6)
        a, b = float(one.ppf(np.array([0.2]))[0]), float(one.ppf(np.array([0.7]))[0])
        m0, m1, m2 = (float(v[0, 0]) for v in one.partial_moments(np.array([[a]]), np.array([[b]])))
        assert m0 == pytest.approx(0.5, abs=1e-9)
        assert m1 == pytest.approx(integrate.quad(lambda y: y * f(y), a, b)[0], rel=1e-8, abs=1e-10)
        assert m2 == pytest.approx(integrate.quad(lambda y: y * y * f(y), a, b)[0], rel=1e-8)
        cum = one.cumulative_moments(np.array([[a, b]]))
        np.testing.assert_allclose([np.diff(c[0])[0] for c in cum], [m0, m1, m2], rtol=1e-9, atol=1e-12)
        full = one.partial_moments(np.array([[-np.inf]]), np.array([[np.inf]]))
        assert float(full[2][0, 0]) - float(full[1][0, 0]) ** 2 == pytest.approx(float(one.var()[0]), rel=1e-8)


@pytest.mark.parametrize("kind", ["gaussian", "student_t", "mixture"])
def test_fused_quantiles_and_cumulative_moments_match_the_separate_ones_at_tight_tolerance(kind):
    """ppf_cumulative_moments (for mixtures: C_j corrected from Newton's last iterate to second order) equals
    cumulative_moments at quantiles solved far beyond the default tolerance, levels 0 and 1 included."""
    d = _families()[kind]
    levels = np.concatenate([[0.0, 1e-9, 1e-4], np.linspace(0.001, 0.999, 41), [1 - 1e-4, 1.0]])
    q = np.broadcast_to(levels, (len(d), levels.size))
    x, c1, c2 = d.ppf_cumulative_moments(q)
    exact = d.ppf(q, tol=1e-20) if kind == "mixture" else d.ppf(q)
    _, e1, e2 = d.cumulative_moments(exact)
    np.testing.assert_array_equal(np.isfinite(x), np.isfinite(exact))
    np.testing.assert_allclose(c1, e1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c2, e2, rtol=0, atol=1e-11)


@pytest.mark.parametrize("kind", ["gaussian", "student_t", "mixture"])
def test_closed_form_crps_equals_the_numerical_quantile_integral(kind):
    d = _families()[kind]
    y = d.mean() + 1.3 * np.sqrt(d.var()) * np.linspace(-3, 3, len(d))
    closed = d.crps(y)
    numerical = Predictive.crps(d, y)
    np.testing.assert_allclose(numerical, closed, rtol=1e-2 if kind == "mixture" else 5e-3)
    assert float(np.mean(numerical)) == pytest.approx(float(np.mean(closed)), rel=3e-4)


def test_gaussian_crps_nll_and_toolbox_agree():
    uct = pytest.importorskip("uncertainty_toolbox")
    rng = np.random.default_rng(3)
    mu, sd = rng.normal(size=300), np.exp(rng.normal(size=300))
    y = mu + sd * rng.standard_t(4, size=300)
    g = Gaussian(mu, sd)
    assert M.crps(g.crps(y)) == pytest.approx(uct.crps_gaussian(mu, sd, y), rel=1e-12)
    assert M.nll(-g.logpdf(y)) == pytest.approx(uct.nll_gaussian(mu, sd, y), rel=1e-12)
    assert np.sqrt(M.sharpness(g.var())) == pytest.approx(uct.sharpness(sd), rel=1e-12)  # toolbox: sqrt(mean var)
    assert M.rmse((y - mu) ** 2) == pytest.approx(uct.metrics_accuracy.prediction_error_metrics(mu, y)["rmse"])


def test_student_t_from_nig_and_mixture_moments():
    t = StudentT.from_nig(np.array([1.0]), np.array([2.0]), np.array([3.0]), np.array([4.0]))
    # Amini et al. 2020, eq. 8: St(gamma, beta (1 + nu) / (nu alpha), 2 alpha)
    assert float(t.df[0]) == 6 and float(t.scale[0]) ** 2 == pytest.approx(4 * 3 / (2 * 3))
    assert float(t.var()[0]) == pytest.approx(2.0 * 6 / 4)
    mix = GaussianMixture([[0.0, 2.0]], [[1.0, 1.0]])
    assert float(mix.mean()[0]) == 1 and float(mix.var()[0]) == pytest.approx(2.0)  # 1 + (1 + 1) / 2
    draws = GaussianMixture.from_samples(np.array([[0.0, 2.0]]), np.array([1.0])).sample(200_000, seed=1)
    assert float(draws.mean()) == pytest.approx(1, abs=0.01) and float(draws.var()) == pytest.approx(2, abs=0.03)


@pytest.mark.parametrize("kind", ["gaussian", "student_t", "mixture"])
def test_arrays_round_trip_take_and_scaling(kind):
    d = _families()[kind]
    again = predictive_from_arrays(d.kind, {k: np.array(v) for k, v in d.params().items()})
    y = d.mean()
    np.testing.assert_array_equal(again.cdf(y), d.cdf(y))
    np.testing.assert_array_equal(d.take([3, 1]).cdf(y[[3, 1]]), d.cdf(y)[[3, 1]])
    s = d.scaled(1.7)
    assert type(s) is type(d)
    np.testing.assert_allclose(s.std(), 1.7 * d.std(), rtol=1e-12)
    np.testing.assert_allclose(s.mean(), d.mean(), rtol=1e-12, atol=1e-12)


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="std must be >= 0"):
        Gaussian([0.0, 1.0], [1.0, -1e-9])
    with pytest.raises(ValueError, match="stds must be > 0"):
        GaussianMixture([[0.0, 1.0]], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="mean contains NaN"):
        Gaussian([np.nan], [1.0])
    with pytest.raises(ValueError, match="unknown predictive kind"):
        predictive_from_arrays("laplace", {})


# --------------------------------------------------------------------------------------------
# recalibration: known answers
# --------------------------------------------------------------------------------------------
def _dispersed(factor, n=1500, seed=0):
    """Predictive N(mu, sd^2) while the targets are N(mu, (factor sd)^2): factor > 1 overconfident."""
    rng = np.random.default_rng(seed)
    mu, sd = rng.normal(size=2 * n), np.exp(0.5 * rng.normal(size=2 * n))
    y = mu + factor * sd * rng.normal(size=2 * n)
    g = Gaussian(mu, sd)
    return g.take(slice(0, n)), y[:n], g.take(slice(n, None)), y[n:]


@pytest.mark.parametrize("factor", [0.5, 2.5])
@pytest.mark.parametrize("method", ["isotonic", "isotonic_two_sided", "std_scaling"])
def test_recalibration_restores_coverage_of_a_mis_dispersed_gaussian(method, factor):
    cal, y_cal, test, y_test = _dispersed(factor)
    before = M.compute_regression_metrics(test, y_test, ["coverage_90", "coverage_95", "msce", "msce_two_sided"])
    assert abs(before["coverage_90"] - 0.9) > 0.09  # badly calibrated before
    after = M.compute_regression_metrics(make_recalibrator(method).fit(cal, y_cal).transform(test), y_test)
    n = y_test.size
    for level in (0.9, 0.95):  # within 4 binomial standard errors plus the 1/(T+1) of the fit
        assert abs(after[f"coverage_{int(level * 100)}"] - level) < 4 * np.sqrt(level * (1 - level) / n) + 2 / n
    assert after["msce"] < 2e-3 and after["msce_two_sided"] < 2e-3
    assert after["msce_two_sided"] < before["msce_two_sided"] / 20
    assert np.isfinite([after["rmse"], after["nll"], after["crps"], after["sharpness"]]).all()
    # the std of the recalibrated predictive is the true one, whatever the method
    assert after["sharpness"] == pytest.approx(factor**2 * float(np.mean(test.var())), rel=0.06)


@pytest.mark.parametrize("factor", [0.4, 1.0, 3.0])
def test_std_scaling_recovers_the_dispersion_factor(factor):
    cal, y_cal, _, _ = _dispersed(factor, n=20000, seed=1)
    s = StdScaling().fit(cal, y_cal).scale_
    assert s == pytest.approx(factor, rel=3 / np.sqrt(2 * 20000))  # sd of the estimate: factor / sqrt(2n)


@pytest.mark.parametrize("kind", ["gaussian", "student_t", "mixture"])
def test_std_scaling_recovers_the_factor_of_every_family(kind):
    d = _families(n=4000, seed=2)[kind]
    y = d.mean() + 2.0 * (d.sample(1, seed=3)[:, 0] - d.mean())  # twice the spread about the mean
    assert StdScaling().fit(d, y).scale_ == pytest.approx(2.0, rel=0.06)


def test_toolbox_known_answer_recalibration():
    """uncertainty-toolbox's tests/test_recalibration.py: MACE 0.2421 -> 0.0030, RMSCE 0.2874 -> 0.0040,
    miscalibration area 0.2443 -> 0.0030 on its 100-point set (two-sided, levels linspace(0, 1, 100))."""
    y_pred, y_std = np.arange(100) / 100.0, np.arange(1, 101) / 20.0
    y_true = y_pred + 0.5
    g = Gaussian(y_pred, y_std)
    levels = np.linspace(0, 1, 100)
    u = g.cdf(y_true)
    assert M.mean_absolute_calibration_error(u, levels, "two") == pytest.approx(0.24206060606060598, abs=1e-12)
    assert np.sqrt(M.msce(u, levels, "two")) == pytest.approx(0.28741418862839013, abs=1e-12)
    assert M.miscalibration_area(u) == pytest.approx(0.24426139657444004, abs=1e-3)  # exact area vs trapezoids
    v = make_recalibrator("isotonic_two_sided").fit(g, y_true).transform(g).cdf(y_true)
    assert M.mean_absolute_calibration_error(v, levels, "two") == pytest.approx(0.003035353535353514, abs=1e-2)
    assert np.sqrt(M.msce(v, levels, "two")) == pytest.approx(0.003981861230030349, abs=1e-2)
    assert M.miscalibration_area(v) == pytest.approx(0.0029569160997732057, abs=1e-2)


def test_toolbox_known_answer_std_scaling_factors():
    """The std-scaling factors 0.3322 (MACE criterion) and 0.3490 (RMSCE criterion), to about 1e-2."""
    y_pred, y_std = np.arange(5000) / 5000, np.arange(50, 5050) / 1000
    g = Gaussian(y_pred, y_std)
    y_true = y_pred + 0.5
    assert StdScaling("mace").fit(g, y_true).scale_ == pytest.approx(0.3322, abs=1e-2)
    assert StdScaling("rmsce").fit(g, y_true).scale_ == pytest.approx(0.3490, abs=1e-2)


def test_std_scaling_criteria_are_optimal_under_the_toolbox_own_metrics():
    uct = pytest.importorskip("uncertainty_toolbox")
    y_pred, y_std = np.arange(5000) / 5000, np.arange(50, 5050) / 1000
    y_true = y_pred + 0.5
    g = Gaussian(y_pred, y_std)
    for ours, theirs, published in [
        ("mace", uct.mean_absolute_calibration_error, 0.3322),
        ("rmsce", uct.root_mean_squared_calibration_error, 0.3490),
    ]:
        s = StdScaling(ours).fit(g, y_true).scale_
        assert theirs(y_pred, s * y_std, y_true) <= theirs(y_pred, published * y_std, y_true) + 1e-12


def test_recalibrated_student_t_quantiles_stay_finite_beyond_the_last_knot():
    """Regression test: levels above the last isotonic knot must not map to a base level of 1 (inf quantile)."""
    rng = np.random.default_rng(7)
    n = 200
    t = StudentT(np.zeros(n), np.ones(n), np.full(n, 2.2))
    y = -np.abs(rng.standard_t(2.2, size=n))  # every PIT below 1/2: the last knot's level is < 1/2
    for method in ("isotonic", "isotonic_two_sided"):
        d = make_recalibrator(method).fit(t, y).transform(t)
        levels = np.array([0.5, 0.9, 0.999, 1 - 1e-9, 1 - 1e-15, np.nextafter(1, 0)])
        q = d.ppf(np.broadcast_to(levels, (n, levels.size)))
        assert np.isfinite(q).all() and (np.diff(q, axis=1) >= 0).all()
        assert (d.inverse_levels(levels) <= 1).all()
        assert np.isfinite(d.ppf(np.full(n, np.nextafter(0, 1)))).all()
        top = d.ppf(np.full(n, np.nextafter(1, 0)))  # through the complements: the level keeps its precision
        np.testing.assert_allclose(1 - d.cdf(top), 1 - np.nextafter(1, 0), rtol=1e-6)
        got = M.compute_regression_metrics(d, rng.standard_t(2.2, size=n))
        assert np.isfinite(list(got.values())).all(), got


def test_recalibrated_distribution_is_a_proper_cdf_with_consistent_moments():
    cal, y_cal, test, y_test = _dispersed(2.0, n=300)
    for method in ("isotonic", "isotonic_two_sided"):
        d = make_recalibrator(method).fit(cal, y_cal).transform(test.take(slice(0, 5)))
        assert isinstance(d, RecalibratedDistribution)
        for t in range(5):
            one = d.take([t])
            # the density is the derivative of the CDF (central differences away from the knots)
            y = one.ppf(np.linspace(0.001, 0.999, 999)[None, :])
            h = 1e-5 * float(one.std()[0])
            left, right = one.cdf(y - h), one.cdf(y + h)
            same = np.searchsorted(d.knots_y, left, "right") == np.searchsorted(d.knots_y, right, "right")
            assert same.sum() > 500
            np.testing.assert_allclose(((right - left) / (2 * h))[same], one.pdf(y)[same], rtol=1e-3)
            assert one.cdf(np.array([[-np.inf, np.inf]])).tolist() == [[0.0, 1.0]]
            draws = one.sample(100_000, seed=t)[0]
            assert float(one.mean()[0]) == pytest.approx(float(draws.mean()), abs=4 * float(one.std()[0]) / 300)
            assert float(one.std()[0]) == pytest.approx(float(draws.std()), rel=0.02)
        x = np.linspace(-10, 10, 41)
        assert (np.diff(d.cdf(np.broadcast_to(x, (5, 41))), axis=1) >= 0).all()


@pytest.mark.parametrize("kind", ["gaussian", "mixture"])
def test_recalibrated_moments_stay_exact_with_extreme_and_nearly_equal_calibration_values(kind):
    """Calibration PITs of 1 - 1e-14, 1e-13 (knots at the bounds LEVEL_EPS and 1 - LEVEL_EPS) and two almost
    equal ones make pieces of the map with slopes up to 1e11; the moments still equal the sum of the pieces'
    integrals, each by quadrature."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=300)
    y[:4] = [7.6, -7.4, 0.3, 0.3 + 1e-12]
    base = Gaussian(np.zeros(300), np.ones(300))
    if kind == "mixture":  # a two-component mixture whose CDF is nearly the standard normal's
        base = GaussianMixture(np.stack([np.full(300, -1e-3), np.full(300, 1e-3)], 1), np.ones((300, 2)))
    r = make_recalibrator("isotonic").fit(base, y)
    assert r.knots_x_[1] == LEVEL_EPS and r.knots_x_[-2] == 1 - LEVEL_EPS and np.diff(r.knots_x_).min() < 1e-12
    d = r.transform(base.take(slice(0, 2)))
    mean, var = d.mean_var()
    one = base.take([0])
    b = one.ppf(r.knots_x_[None, :])[0]
    slopes = np.diff(r.knots_y_) / np.diff(r.knots_x_)
    moments = []
    for j in (1, 2):
        def integrand(t, j=j):
            return t**j * float(one.pdf(np.array([t]))[0])

        moments.append(sum(s * integrate.quad(integrand, lo, hi, epsabs=0, epsrel=1e-12)[0]
                           for s, lo, hi in zip(slopes, b[:-1], b[1:])))
    assert float(mean[0]) == pytest.approx(moments[0], rel=1e-8, abs=1e-10)
    assert float(var[0]) == pytest.approx(moments[1] - moments[0] ** 2, rel=1e-8)


@pytest.mark.parametrize("method", list(RECALIBRATORS))
def test_json_round_trip_is_bit_identical(method):
    cal, y_cal, test, y_test = _dispersed(1.5, n=300)
    r = make_recalibrator(method, criterion="nll", unused_option=3).fit(cal, y_cal)
    again = recalibrator_from_json(json.loads(json.dumps(r.to_json())))
    a, b = r.transform(test), again.transform(test)
    np.testing.assert_array_equal(a.cdf(y_test), b.cdf(y_test))
    q = np.broadcast_to(np.linspace(0.01, 0.99, 7), (len(test), 7))
    np.testing.assert_array_equal(a.ppf(q), b.ppf(q))
    assert again.get_params() == r.get_params()
    with pytest.raises(ValueError, match="unknown recalibration method"):
        recalibrator_from_json({**r.to_json(), "method": "nope"})
    with pytest.raises(ValueError, match="'isotonic_twosided' \\(did you mean 'isotonic_two_sided'\\?\\)"):
        make_recalibrator("isotonic_twosided")


def test_isotonic_is_kuleshovs_empirical_cdf_of_the_pit_values():
    g = Gaussian(np.zeros(4), np.ones(4))
    y = stats.norm.ppf([0.1, 0.4, 0.4, 0.8])
    r = IsotonicRecalibration().fit(g, y)
    np.testing.assert_allclose(r.knots_x_, [0, 0.1, 0.4, 0.8, 1])
    np.testing.assert_allclose(r.knots_y_, [0, 1 / 5, 3 / 5, 4 / 5, 1])  # #{u <= v} / (T + 1)
    two = make_recalibrator("isotonic_two_sided").fit(g, y)  # |2u - 1| = .8, .2, .2, .6
    np.testing.assert_allclose(two.knots_x_, [0, 0.1, 0.2, 0.4, 0.5, 0.6, 0.8, 0.9, 1])
    np.testing.assert_allclose(two.knots_y_, [0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 1])  # 1/2 -+ R(c)/2
    thin = IsotonicRecalibration(max_knots=12).fit(Gaussian(np.zeros(1000), np.ones(1000)), np.linspace(-3, 3, 1000))
    assert thin.knots_x_.size == 12 and (np.diff(thin.knots_y_) > 0).all()
    with pytest.raises(ValueError, match="max_knots"):
        IsotonicRecalibration(max_knots=2).fit(g, y)


# --------------------------------------------------------------------------------------------
def test_msce_by_hand():
    pit = np.array([0.1, 0.2, 0.6, 0.9])
    levels = [0.25, 0.5, 0.75]
    # one-sided accuracy 2/4, 2/4, 3/4; two-sided |2u - 1| = .8, .6, .2, .8 -> 1/4, 1/4, 2/4
    assert M.msce(pit, levels) == pytest.approx(0.25**2 / 3)
    assert M.msce(pit, levels, "two") == pytest.approx(2 * 0.25**2 / 3)
    np.testing.assert_allclose(M.accuracy_curve(pit, levels), [0.5, 0.5, 0.75])
    assert M.coverage(pit, 0.6) == 0.5 and M.coverage(pit, 0.59) == 0.25
    assert M.msce(np.full(7, 0.5), M.LEVELS) == pytest.approx(np.mean((M.LEVELS - (M.LEVELS >= 0.5)) ** 2))


def test_miscalibration_area_closed_forms():
    assert M.miscalibration_area(np.full(5, 0.5), sided="one") == pytest.approx(0.25)
    assert M.miscalibration_area(np.full(5, 0.5), sided="two") == pytest.approx(0.5)
    u = (np.arange(1000) + 0.5) / 1000  # a perfectly uniform PIT: area 1/(4 * 1000)
    assert M.miscalibration_area(u, sided="one") == pytest.approx(1 / 4000)


def test_weights_equal_duplicated_samples():
    rng = np.random.default_rng(2)
    g = Gaussian(rng.normal(size=50), np.exp(rng.normal(size=50)))
    y = rng.normal(size=50)
    w = rng.integers(0, 4, size=50)
    idx = np.repeat(np.arange(50), w)
    terms = M.sample_terms(g, y)
    dup = M.sample_terms(g.take(idx), y[idx])
    for key, metric in M.REGRESSION_METRICS.items():
        assert metric.value(terms, weights=w) == pytest.approx(metric.value(dup), rel=1e-12, abs=1e-15), key


def test_gaussian_metrics_by_hand():
    g = Gaussian([0.0, 0.0], [1.0, 2.0])
    y = np.array([0.0, 2.0])
    got = M.compute_regression_metrics(g, y)
    assert got["rmse"] == pytest.approx(np.sqrt(2))
    assert got["sharpness"] == pytest.approx(2.5)
    assert got["nll"] == pytest.approx(0.5 * np.log(2 * np.pi) + (np.log(2) + 0.5) / 2)
    assert got["crps"] == pytest.approx(
        np.mean(
            [
                (2 * stats.norm.pdf(0) - 1 / np.sqrt(np.pi)),
                2 * (1 * (2 * stats.norm.cdf(1) - 1) + 2 * stats.norm.pdf(1) - 1 / np.sqrt(np.pi)),
            ]
        )
    )
    with pytest.raises(ValueError, match="unknown regression metric"):
        M.compute_regression_metrics(g, y, ["r2"])


def test_calibration_metrics_match_the_toolbox():
    uct = pytest.importorskip("uncertainty_toolbox")
    rng = np.random.default_rng(11)
    mu, sd = rng.normal(size=700), np.exp(rng.normal(size=700) * 0.4)
    y = mu + 1.6 * sd * rng.normal(size=700)
    g = Gaussian(mu, sd)
    levels = np.linspace(0, 1, 100)
    u = g.cdf(y)
    assert M.mean_absolute_calibration_error(u, levels, "two") == pytest.approx(
        uct.mean_absolute_calibration_error(mu, sd, y), abs=1e-12
    )
    assert np.sqrt(M.msce(u, levels, "two")) == pytest.approx(
        uct.root_mean_squared_calibration_error(mu, sd, y), abs=1e-12
    )
    # the toolbox's "quantile" proportions count the upper tail: equal to ours on mirrored targets
    mirrored = g.cdf(2 * mu - y)
    assert M.msce(mirrored, levels) == pytest.approx(
        uct.root_mean_squared_calibration_error(mu, sd, y, prop_type="quantile") ** 2, abs=1e-12
    )
    # exact step-curve area vs the toolbox's trapezoids on 100 levels
    assert M.miscalibration_area(u) == pytest.approx(uct.miscalibration_area(mu, sd, y), abs=5e-3)


def test_regression_metrics_have_their_own_namespace_in_the_metric_registry():
    """``nll`` is both a classification and a regression metric: each task finds its own spec."""
    from calibrepro import metrics as classification
    from calibrepro.bootstrap import interval_method

    assert classification.spec("nll", "regression") is M.REGRESSION_METRICS["nll"]
    assert classification.spec("nll") is classification.METRICS["nll"]
    assert classification.spec("msce") is None and classification.spec("ece", "regression") is None
    assert interval_method("nll", "auto", "regression") == M.REGRESSION_METRICS["nll"].interval
    assert interval_method("nll", "auto") == classification.METRICS["nll"].interval
    assert interval_method("msce", "basic", "regression") == "basic"
    with pytest.raises(ValueError, match="already registered for regression"):
        classification.register(M.RegressionMetric("nll", M.nll), "regression")


def test_every_metric_on_a_block_of_bootstrap_counts_equals_it_on_the_resampled_samples():
    from calibrepro.bootstrap import resample_counts

    rng = np.random.default_rng(11)
    n = 60
    d = StudentT(rng.normal(size=n), np.exp(0.3 * rng.normal(size=n)), rng.uniform(3, 9, size=n))
    y = rng.normal(size=n) * 1.7
    counts = resample_counts(n, 6, seed=2)
    terms = M.sample_terms(d, y)
    for name, metric in M.REGRESSION_METRICS.items():
        block = metric.value(terms, counts)
        assert block.shape == (6,)
        for r in range(6):
            rows = np.repeat(np.arange(n), counts[r])
            direct = M.compute_regression_metrics(d.take(rows), y[rows], [name])[name]
            assert block[r] == pytest.approx(direct, rel=1e-12, abs=1e-15), (name, r)
