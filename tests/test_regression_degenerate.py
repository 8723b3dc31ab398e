"""Recalibration of overconfident and degenerate predictives (issue 31): PIT values piled at exactly 0 and 1
or tied, a spread of exactly 0, a Student-t with few degrees of freedom, a mixture of one component."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from calibrepro.steps import calibration as calibration_steps
from calibrepro.regression.distributions import Gaussian, GaussianMixture, StudentT
from calibrepro.regression.metrics import REGRESSION_METRICS, accuracy_curve, compute_regression_metrics
from calibrepro.regression.predictions import Predictions, part_of, save_predictions
from calibrepro.regression.recalibration import LEVEL_EPS, RECALIBRATORS, make_recalibrator

METHODS = list(RECALIBRATORS)


def overconfident(n, seed, noise=1e-3):
    """MC-Dropout without a proper noise term: 100 passes spread 0.05 around a centre, each with a tiny
    noise std, while the targets scatter 0.8 around it: most PIT values are exactly 0 or 1."""
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=n)
    passes = centre[:, None] + 0.05 * rng.normal(size=(n, 100))
    return GaussianMixture(passes, np.full((n, 100), noise)), centre + 0.8 * rng.normal(size=n)


def assert_proper(d, n_rows=5):
    """Non-decreasing CDF in [0, 1] from 0 at -inf to 1 at +inf; quantiles non-decreasing and inverting it."""
    one = d.take(np.arange(n_rows))
    y = np.linspace(-6, 6, 401)
    cdf = one.cdf(np.broadcast_to(y, (n_rows, y.size)))
    assert ((cdf >= 0) & (cdf <= 1)).all() and (np.diff(cdf, axis=1) >= 0).all()
    assert one.cdf(np.broadcast_to([-np.inf, np.inf], (n_rows, 2))).tolist() == [[0.0, 1.0]] * n_rows
    q = one.ppf(np.broadcast_to(np.linspace(0.01, 0.99, 99), (n_rows, 99)))
    assert np.isfinite(q).all() and (np.diff(q, axis=1) >= 0).all()


@pytest.mark.parametrize("noise", [1e-3, 1e-6])
def test_an_overconfident_mixture_with_pit_values_at_exactly_0_and_1_recalibrates_with_finite_metrics(noise):
    cal, y_cal = overconfident(300, 0, noise)
    test, y_test = overconfident(200, 1, noise)
    pit = cal.cdf(y_cal)
    assert (pit == 0).mean() > 0.3 and (pit == 1).mean() > 0.3 and pit.max() == 1.0  # never above 1
    for method in METHODS:
        recalibrator = make_recalibrator(method).fit(cal, y_cal)
        d = recalibrator.transform(test)
        values = compute_regression_metrics(d, y_test)
        assert np.isfinite(list(values.values())).all(), (method, values)
        assert_proper(d)
        if method.startswith("isotonic"):
            inner = recalibrator.knots_x_[1:-1]
            # the central bound 1 - 2 eps, mirrored, rounds to 0.99998 eps
            assert inner.min() >= 0.9999 * LEVEL_EPS and inner.max() <= 1 - LEVEL_EPS
            assert (np.diff(recalibrator.knots_y_) > 0).all()


def test_recalibration_repairs_an_overconfident_model_only_up_to_the_level_its_calibration_pits_reach():
    """The seed's observation: the two-sided map only reaches R(c) for the central levels c its calibration
    values take below 1 (about 0.15 here: most targets lie outside every central interval of the passes); the
    recalibrated central intervals of higher levels hold about that share of the calibration targets, no more."""
    cal, y_cal = overconfident(400, 2)
    r = make_recalibrator("isotonic_two_sided").fit(cal, y_cal)
    reach = 2 * r.knots_y_[-2] - 1  # R at the last inner knot, from T = 1/2 + R/2 above the median
    central = np.abs(2 * cal.cdf(y_cal) - 1)
    assert reach == pytest.approx((central <= 1 - 2 * LEVEL_EPS).sum() / (central.size + 1))
    after = accuracy_curve(r.transform(cal).cdf(y_cal), [0.5 * reach, 0.99], "two")
    assert after[0] == pytest.approx(0.5 * reach, abs=0.02)  # repaired below the reach
    assert after[1] < reach + 0.02  # not above it: the 99 % interval holds about `reach` of the targets


def test_tied_calibration_values_give_a_strictly_increasing_map():
    g = Gaussian(np.zeros(60), np.ones(60))
    y = np.repeat([-1.0, 0.0, 0.5], 20)  # three values, each 20 times
    for method in ("isotonic", "isotonic_two_sided"):
        r = make_recalibrator(method).fit(g, y)
        assert (np.diff(r.knots_x_) > 0).all() and (np.diff(r.knots_y_) > 0).all()
    two = make_recalibrator("isotonic_two_sided").fit(g, np.full(60, 1e-17))  # |2u - 1| rounds to ~1e-17
    assert (np.diff(two.knots_x_) > 0).all() and (np.diff(two.knots_y_) > 0).all()
    ones = make_recalibrator("isotonic").fit(g, np.full(60, 40.0))  # every PIT exactly 1: no knot, T = identity
    assert ones.knots_x_.tolist() == [0.0, 1.0] and ones.knots_y_.tolist() == [0.0, 1.0]


def test_a_spread_of_exactly_0_is_a_point_mass_that_every_recalibrator_keeps():
    rng = np.random.default_rng(3)
    mean = rng.normal(size=200)
    std = np.where(np.arange(200) % 4 == 0, 0.0, 0.5)  # a quarter of the rows: no spread at all
    g = Gaussian(mean, std)
    y = mean + rng.normal(size=200)
    atom = std == 0
    assert g.cdf(mean).tolist() == [1.0 if a else 0.5 for a in atom]  # the step is right-continuous
    assert g.crps(y)[atom] == pytest.approx(np.abs(y - mean)[atom])
    for method in METHODS:
        d = make_recalibrator(method).fit(g, y).transform(g)
        assert (d.mean()[atom] == mean[atom]).all() and (d.var()[atom] == 0).all()
        assert (d.ppf(np.full(200, 0.3))[atom] == mean[atom]).all()
        pit = d.cdf(y)
        assert set(pit[atom].tolist()) <= {0.0, 1.0}
        values = compute_regression_metrics(d, y)
        assert not np.isfinite(values["nll"]), method  # no density: said in the log, not written
        assert np.isfinite([v for k, v in values.items() if k != "nll"]).all(), (method, values)
    only = Gaussian(mean, np.zeros(200))  # a model with no spread anywhere
    for method in METHODS:
        d = make_recalibrator(method).fit(only, y).transform(only)
        np.testing.assert_array_equal(d.mean(), mean)
        assert compute_regression_metrics(d, y, ["msce", "crps"])["crps"] == pytest.approx(np.abs(y - mean).mean())
    assert make_recalibrator("std_scaling").fit(only, y).scale_ == 1.0  # no row says anything about the factor


@pytest.mark.parametrize("df", [0.5, 1.0, 1.5, 2.0, 2.5])
def test_a_student_t_with_few_degrees_of_freedom_recalibrates_and_says_which_moments_do_not_exist(df):
    rng = np.random.default_rng(4)
    t = StudentT(np.zeros(300), np.ones(300), np.full(300, df))
    y = stats.t.rvs(df, size=300, random_state=rng)
    for method in METHODS:
        d = make_recalibrator(method).fit(t.take(slice(0, 150)), y[:150]).transform(t.take(slice(150, None)))
        assert_proper(d)
        values = compute_regression_metrics(d, y[150:])
        finite = {k for k, v in values.items() if np.isfinite(v)}
        undefined = ({"rmse", "crps"} if df <= 1 else set()) | ({"sharpness"} if df <= 2 else set())
        assert finite == set(values) - undefined, (method, values)
        assert np.isnan(d.mean()).all() == (df <= 1) and np.isinf(d.var()).all() == (df <= 2)


def test_student_t_quantiles_stay_accurate_far_in_the_tails():
    for df in (1.5, 2.2, 30.0):
        t = StudentT(np.zeros(6), np.ones(6), np.full(6, df))
        levels = np.array([1e-300, 1e-200, 1e-100, 1e-12, 0.3, 1 - 1e-9])
        x = t.ppf(levels)
        assert (x[:-1] < 0).all() and np.isfinite(x).all()  # scipy's stdtrit gives +inf at 1e-300
        np.testing.assert_allclose(t.take(np.arange(1, 6)).cdf(x[1:]), levels[1:], rtol=1e-6)
        # at 1e-300 scipy's CDF underflows for heavy tails: the series' first term, in logs
        a = df / 2
        log_p = a * (np.log(df) - 2 * np.log(-x[0])) - np.log(2 * a) - special.betaln(a, 0.5)
        assert log_p == pytest.approx(np.log(1e-300), rel=1e-9)


def test_a_mixture_of_one_component_is_its_gaussian():
    rng = np.random.default_rng(5)
    mean, std = rng.normal(size=100), np.exp(rng.normal(size=100))
    y = mean + 1.5 * std * rng.normal(size=100)
    mixture, gaussian = GaussianMixture(mean[:, None], std[:, None]), Gaussian(mean, std)
    q = np.broadcast_to(np.linspace(0.001, 0.999, 9), (100, 9))
    np.testing.assert_allclose(mixture.ppf(q), gaussian.ppf(q), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mixture.crps(y), gaussian.crps(y), rtol=1e-12)
    for method in METHODS:
        ours = compute_regression_metrics(make_recalibrator(method).fit(mixture, y).transform(mixture), y)
        theirs = compute_regression_metrics(make_recalibrator(method).fit(gaussian, y).transform(gaussian), y)
        assert ours == pytest.approx(theirs, rel=1e-6), method


def test_the_evaluation_leaves_out_undefined_metrics_and_says_why_in_one_line_per_cell(tmp_path):
    """A Student-t with df = 1 (a Cauchy: no mean, no variance) and a point mass: no NaN in the files, one
    log line per data set, model, split and method naming the metrics and the reason."""
    rng = np.random.default_rng(6)
    n = 120
    y = rng.standard_cauchy(2 * n)
    params = {"loc": np.zeros(2 * n), "scale": np.ones(2 * n), "df": np.ones(2 * n)}
    halves = [part_of(y[i * n:(i + 1) * n], np.arange(i * n, (i + 1) * n), {k: v[i * n:(i + 1) * n]
                                                                             for k, v in params.items()})
              for i in (0, 1)]
    path = tmp_path / "split0.npz"
    save_predictions(path, Predictions("student_t", halves[1], halves[0], {}), np.zeros(n), np.ones(n))
    metrics = list(REGRESSION_METRICS)
    calibration_steps.evaluate_step(path, None, tmp_path / "eval.csv", tmp_path / "curves.json", task="regression",
                           calibrators=dict.fromkeys(METHODS), metrics=metrics, dataset="toy", model="cauchy", seed=0,
                           log=tmp_path / "eval.log")
    rows = pd.read_csv(tmp_path / "eval.csv")
    assert np.isfinite(rows.value).all()
    assert set(rows.metric) == set(metrics) - {"rmse", "crps", "sharpness"}
    log = (tmp_path / "eval.log").read_text()
    for method in METHODS:
        line = next(line for line in log.splitlines() if line.startswith(f"toy/cauchy/split 0/{method}: not written"))
        assert "rmse (the predictive mean does not exist" in line and "sharpness (the predictive variance" in line
    assert '"rmse": [\n        null' in (tmp_path / "curves.json").read_text()
