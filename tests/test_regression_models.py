"""The torch regressors of calibrepro.regression.models: seeded, in the target's units, the papers' losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from calibrepro.regression.models import KINDS, RegressorError, fit_predict, nig_loss, options_for
from calibrepro.regression.predictions import rows_of

FAST = {"epochs": 30, "hidden": 16}


def heteroscedastic_data(n=600, seed=0):
    """y = 2 x0 - x1 + noise whose std grows with |x0| (0.2 ... 1.2), in units of 1000 around 5000."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 3))
    noise = 0.2 + np.abs(x[:, 0])
    y = 2 * x[:, 0] - x[:, 1] + noise * rng.normal(size=n)
    return x, 5000 + 1000 * y, 1000 * noise


def moments(predicted):
    """Mean and std of each row: mixture moments (law of total variance), or the Student-t's."""
    p = rows_of(predicted.params)
    if predicted.family == "student_t":
        return p["loc"], p["scale"] * np.sqrt(p["df"] / (p["df"] - 2))
    mean = p["means"].mean(axis=1)
    return mean, np.sqrt((p["stds"] ** 2 + (p["means"] - mean[:, None]) ** 2).mean(axis=1))


def options(kind):
    extra = {"passes": 10} if kind in ("mc_dropout", "aleatoric") else {"members": 2} if kind == "ensemble" else {}
    return {**FAST, **extra}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_seeded_and_in_target_units(kind):
    x, y, noise = heteroscedastic_data()
    first = fit_predict(kind, x[:400], y[:400], x[400:], options(kind), seed=3)
    again = fit_predict(kind, x[:400], y[:400], x[400:], options(kind), seed=3)
    other = fit_predict(kind, x[:400], y[:400], x[400:], options(kind), seed=4)
    assert first.params.keys() == again.params.keys()
    assert all(np.array_equal(first.params[k], again.params[k]) for k in first.params)  # byte-identical rerun
    assert not all(np.array_equal(first.params[k], other.params[k]) for k in first.params)
    mean, std = moments(first)
    assert mean.shape == std.shape == (200,)
    # standardisation is undone: the mean is near the targets (units of 1000 around 5000), the std in the noise's range
    assert np.sqrt(np.mean((mean - y[400:]) ** 2)) < 1300
    assert 100 < np.median(std) < 3000
    assert first.info["kind"] == kind and first.info["train_samples"] == 400


def test_heteroscedastic_kinds_learn_where_the_noise_is():
    x, y, noise = heteroscedastic_data(n=1000)
    for kind in ("aleatoric", "ensemble", "evidential"):
        predicted = fit_predict(kind, x[:700], y[:700], x[700:], {**options(kind), "epochs": 50}, seed=0)
        std = moments(predicted)[1]
        noisy = noise[700:] > 800
        assert std[noisy].mean() > 1.25 * std[~noisy].mean(), kind


def test_time_series_targets_give_one_row_per_sample_and_hour():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(120, 10)), rng.normal(size=(120, 10))
    predicted = fit_predict("evidential", x[:100], y[:100], x[100:], FAST, seed=0)
    assert predicted.params["loc"].shape == (20, 10)
    assert rows_of(predicted.params)["loc"].shape == (200,)
    mixture = fit_predict("ensemble", x[:100], y[:100], x[100:], {**FAST, "members": 3}, seed=0)
    assert mixture.params["means"].shape == (20, 10, 3)
    assert rows_of(mixture.params)["means"].shape == (200, 3)


def test_nig_loss_without_regulariser_is_the_student_t_nll():
    """Amini et al. 2020, eq. 8: the NIG NLL is -log St(y; gamma, beta (1 + nu) / (nu alpha), 2 alpha)."""
    gamma, nu, alpha, beta = (torch.tensor([v], dtype=torch.float64) for v in (0.3, 2.0, 3.0, 1.5))
    y = torch.tensor([1.1], dtype=torch.float64)
    scale = math.sqrt(1.5 * 3.0 / (2.0 * 3.0))
    expected = -stats.t.logpdf(1.1, df=6.0, loc=0.3, scale=scale)
    assert float(nig_loss(gamma, nu, alpha, beta, y, 0.0)) == pytest.approx(expected, rel=1e-12)
    # the evidence regulariser adds lambda |y - gamma| (2 nu + alpha) (eq. 9-10)
    assert float(nig_loss(gamma, nu, alpha, beta, y, 0.1)) == pytest.approx(expected + 0.1 * 0.8 * 7.0, rel=1e-12)


def test_mc_dropout_noise_precision_from_the_config():
    x, y, _ = heteroscedastic_data(n=300)
    predicted = fit_predict("mc_dropout", x[:200], y[:200], x[200:], {**options("mc_dropout"), "tau": 4.0}, seed=0)
    # 1/tau is the noise variance of the standardised target: std 0.5 in target units is 0.5 * std(y_train)
    assert np.allclose(predicted.params["stds"], 0.5 * y[:200].std())


def test_the_seed_s_mc_dropout_has_no_noise_term_and_is_overconfident():
    """noise: none is a Gaussian with the T passes' mean and std (ddof 0): the same network and passes as
    the fitted-noise model (the same seed), whose mixture adds Gal's 1/tau to the passes' spread."""
    x, y, _ = heteroscedastic_data(n=400)
    seed_s = fit_predict("mc_dropout", x[:300], y[:300], x[300:], {**options("mc_dropout"), "noise": "none"}, seed=1)
    fitted = fit_predict("mc_dropout", x[:300], y[:300], x[300:], options("mc_dropout"), seed=1)
    assert seed_s.family == "gaussian" and set(seed_s.params) == {"mean", "std"} and seed_s.info["noise"] == "none"
    passes = fitted.params["means"][:, 0, :]
    np.testing.assert_allclose(seed_s.params["mean"][:, 0], passes.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(seed_s.params["std"][:, 0], passes.std(axis=1), rtol=1e-9)
    spread = moments(fitted)[1]
    assert np.median(seed_s.params["std"]) < 0.5 * np.median(spread)  # the noise term dominates the spread
    named = fit_predict("seed_mc_dropout", x[:300], y[:300], x[300:], {"kind": "mc_dropout", **options("mc_dropout"),
                                                                       "noise": "none"}, seed=1)
    assert named.info["kind"] == "mc_dropout" and np.array_equal(named.params["std"], seed_s.params["std"])
    without = fit_predict("mc_dropout", x[:300], y[:300], x[300:], {**options("mc_dropout"), "noise": "none",
                                                                    "dropout": 0.0}, seed=1)
    assert (without.params["std"] == 0).all()  # every pass the same: a point mass


def test_bad_options_name_the_kind_and_key():
    with pytest.raises(RegressorError, match="with noise: none leave tau out"):
        options_for("mc_dropout", {"noise": "none", "tau": 4.0})
    with pytest.raises(RegressorError, match="noise must be one of fitted, none"):
        options_for("mc_dropout", {"noise": "aleatoric"})
    with pytest.raises(RegressorError, match="unknown regressor 'gp'"):
        options_for("gp", {})
    with pytest.raises(RegressorError, match=r"mc_dropout: unknown option\(s\) \['members'\]"):
        options_for("mc_dropout", {"members": 3})
    if not torch.cuda.is_available():
        x, y, _ = heteroscedastic_data(n=50)
        with pytest.raises(RegressorError, match="torch sees no GPU"):
            fit_predict("evidential", x[:40], y[:40], x[40:], {"device": "cuda"})
