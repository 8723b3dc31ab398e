"""Dirichlet calibration, MS-ODIR and ensemble temperature scaling (issue 13)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.base import clone

from calibrepro.calibrators import (
    CALIBRATORS,
    UnknownCalibratorError,
    VectorScaling,
    calibrator_from_json,
    make_calibrator,
    softmax,
)
from calibrepro.calibrators.dirichlet import CalibrationCostError, log_softmax64
from calibrepro.calibrators.ensemble_scaling import simplex_least_squares
from calibrepro.io import save_logits
from calibrepro.steps.calibration import fit_step, split_step

NEW = ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir", "ensemble_temperature_scaling"]
SMALL_GRID = {"lambdas": [0.01, 1.0], "mus": [0.01, 1.0], "folds": 3, "device": "cpu"}


def sample_labels(scores: np.ndarray, rng) -> np.ndarray:
    """One label per row drawn from softmax(scores)."""
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random(len(p))[:, None]
    return np.minimum((p.cumsum(axis=1) < u).sum(axis=1), p.shape[1] - 1)


def overconfident(n=600, k=5, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k)) * 3
    return z.astype(np.float32), sample_labels(z / 2.5, rng)


def test_registered_with_paper_names():
    names = {m: CALIBRATORS[m].display_names["en"] for m in NEW}
    assert names == {
        "dirichlet_l2": "Dir-L2",
        "dirichlet_odir": "Dir-ODIR",
        "matrix_scaling_odir": "MS-ODIR",
        "ensemble_temperature_scaling": "ETS",
    }


def test_matrix_scaling_recovers_known_parameters():
    """Labels drawn from softmax(W z + b): with N large and no regularisation the fit finds W, b."""
    rng = np.random.default_rng(3)
    n, k = 40000, 4
    w_true = np.eye(k) * 0.6 + rng.normal(size=(k, k)) * 0.2
    b_true = rng.normal(size=k) * 0.5
    z = rng.normal(size=(n, k)) * 2
    y = sample_labels(z @ w_true.T + b_true, rng)
    cal = make_calibrator("matrix_scaling_odir", lambdas=[0.0], mus=[0.0], device="cpu").fit(z, y)
    # softmax is invariant to W + 1 c^T and b + d: compare column/entry-centred values
    centred = lambda a: a - a.mean(axis=0)  # noqa: E731
    np.testing.assert_allclose(centred(cal.weights_), centred(w_true), atol=0.05)
    np.testing.assert_allclose(cal.bias_ - cal.bias_.mean(), b_true - b_true.mean(), atol=0.05)
    assert cal.diagnostics_["converged"] and cal.diagnostics_["cross_validation"] is None


def test_dirichlet_on_log_probabilities_recovers_known_parameters():
    rng = np.random.default_rng(4)
    n, k = 40000, 3
    z = rng.normal(size=(n, k)) * 2
    w_true = np.array([[1.5, -0.3, 0.0], [0.2, 0.8, 0.1], [0.0, 0.4, 1.2]])
    b_true = np.array([0.3, -0.2, 0.1])
    y = sample_labels(log_softmax64(z) @ w_true.T + b_true, rng)
    cal = make_calibrator("dirichlet_odir", lambdas=[0.0], mus=[0.0], device="cpu").fit(z, y)
    centred = lambda a: a - a.mean(axis=0)  # noqa: E731
    np.testing.assert_allclose(centred(cal.weights_), centred(w_true), atol=0.06)


def test_strong_odir_is_vector_scaling():
    """lambda, mu -> infinity forces W diagonal and b = 0: MS-ODIR becomes vector scaling."""
    z, y = overconfident(1500, 4, seed=5)
    ms = make_calibrator("matrix_scaling_odir", lambdas=[1e9], mus=[1e9], device="cpu").fit(z, y)
    vs = VectorScaling().fit(z, y)
    np.testing.assert_allclose(np.diag(ms.weights_), vs.weights_, atol=2e-3)
    assert np.abs(ms.weights_ - np.diag(np.diag(ms.weights_))).max() < 1e-4
    assert np.abs(ms.bias_).max() < 1e-4


def test_strong_l2_tends_to_its_centre():
    """lambda -> infinity: Dir-L2 centred on the identity gives the uncalibrated model, centred on 0 uniform 1/K."""
    z, y = overconfident(500, 4, seed=6)
    identity = make_calibrator("dirichlet_l2", lambdas=[1e9], device="cpu").fit(z, y)
    np.testing.assert_allclose(identity.predict_proba(z), softmax(z, "float64"), atol=1e-4)
    zero = make_calibrator("dirichlet_l2", lambdas=[1e9], shrink_towards="zero", device="cpu").fit(z, y)
    np.testing.assert_allclose(zero.predict_proba(z), 0.25, atol=1e-4)
    with pytest.raises(ValueError, match=r"dirichlet_l2\.shrink_towards = 'ones'.*'identity'"):
        make_calibrator("dirichlet_l2", lambdas=[1.0], shrink_towards="ones", device="cpu").fit(z, y)


def test_penalised_objective_is_minimised():
    """Regularised optimum: the gradient of the paper's ODIR objective vanishes (checked independently)."""
    z, y = overconfident(400, 3, seed=7)
    lam, mu = 0.5, 0.2
    cal = make_calibrator("matrix_scaling_odir", lambdas=[lam], mus=[mu], device="cpu").fit(z, y)
    x, k = z.astype(np.float64), 3

    def objective(theta):
        w, b = theta[:9].reshape(3, 3), theta[9:]
        s = x @ w.T + b
        nll = np.mean(np.log(np.exp(s).sum(1)) - s[np.arange(len(y)), y])
        off = w - np.diag(np.diag(w))
        return nll + lam * (off**2).sum() / (k * (k - 1)) + mu * (b**2).sum() / k

    ours = objective(np.concatenate([cal.weights_.ravel(), cal.bias_]))
    ref = minimize(objective, np.concatenate([np.eye(3).ravel(), np.zeros(3)]), method="BFGS", tol=1e-12)
    assert ours <= ref.fun + 1e-9
    assert abs(cal.diagnostics_["final_loss"] - ours) < 1e-12


@pytest.mark.parametrize("method", NEW)
def test_json_round_trip_is_bit_exact(method):
    z, y = overconfident(300, 4, seed=8)
    cal = make_calibrator(method, **SMALL_GRID, bins=15).fit(z, y)
    data = json.loads(json.dumps(cal.to_json()))
    again = calibrator_from_json(data)
    assert np.array_equal(cal.predict_proba(z), again.predict_proba(z))
    assert clone(cal).get_params() == cal.get_params()
    p = cal.predict_proba(z)
    assert p.dtype == np.float64 and np.allclose(p.sum(axis=1), 1.0)


def test_cross_validation_is_recorded_and_deterministic():
    z, y = overconfident(400, 4, seed=9)
    a = make_calibrator("dirichlet_odir", **SMALL_GRID).fit(z, y)
    b = make_calibrator("dirichlet_odir", **SMALL_GRID).fit(z, y)
    cv = a.diagnostics_["cross_validation"]
    assert [(g["lambda"], g["mu"]) for g in cv["grid"]] == [(0.01, 0.01), (0.01, 1.0), (1.0, 0.01), (1.0, 1.0)]
    fitted = [g for g in cv["grid"] + cv["extension"] if g["cv_nll"] is not None]
    best = min(fitted, key=lambda g: g["cv_nll"])
    assert (a.reg_lambda_, a.reg_mu_) == (best["lambda"], best["mu"])
    assert a.diagnostics_["search_capped"] is cv["search"]["capped"]
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())


def test_fit_step_never_sees_the_test_half(tmp_path):
    """Perturbing the test half's logits and labels leaves every fitted parameter (and the CV) unchanged."""
    z, y = overconfident(600, 4, seed=10)
    save_logits(tmp_path / "a.npz", z, y)
    split_step(tmp_path / "a.npz", 0.5, 0, tmp_path / "split_a.npz", dataset="d")
    with np.load(tmp_path / "split_a.npz") as split:
        calibration, test = split["calibration"], split["test"]
    z2, y2 = z.copy(), y.copy()
    rng = np.random.default_rng(0)
    z2[test] = rng.normal(size=(len(test), 4)).astype(np.float32) * 10
    y2[test] = (y2[test] + 1) % 4
    save_logits(tmp_path / "b.npz", z2, y2)
    # the same halves, with the perturbed labels (the pipeline checks a split against its data set's labels)
    np.savez(tmp_path / "split_b.npz", calibration=calibration, test=test, labels=y2)
    outputs_a = {method: tmp_path / f"{method}_a.json" for method in NEW}
    outputs_b = {method: tmp_path / f"{method}_b.json" for method in NEW}
    options = {method: SMALL_GRID for method in NEW}
    fit_step(tmp_path / "a.npz", tmp_path / "split_a.npz", outputs_a, bins=15, options=options)
    fit_step(tmp_path / "b.npz", tmp_path / "split_b.npz", outputs_b, bins=15, options=options)
    for method in NEW:
        a, b = outputs_a[method], outputs_b[method]
        assert a.read_bytes() == b.read_bytes(), method
        assert json.loads(a.read_text())["calibration_samples"] == len(calibration)


def test_unknown_method_is_a_clear_error():
    with pytest.raises(UnknownCalibratorError, match="dirichlet_l2"):
        make_calibrator("dirichlet")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lambdas": []}, r"calibrator_options\.dirichlet_odir\.lambdas: the regularisation grid is empty"),
        ({"mus": [0.1, -1.0]}, r"calibrator_options\.dirichlet_odir\.mus: .* >= 0, got \[-1\.0\]"),
        ({"lambdas": [float("nan")]}, r"finite"),
        ({"folds": 1000}, r"calibrator_options\.dirichlet_odir\.folds = 1000"),
        ({"max_extensions": -1}, r"calibrator_options\.dirichlet_odir\.max_extensions = -1: give 0"),
    ],
)
def test_bad_options_name_the_config_key(options, message):
    z, y = overconfident(100, 3)
    with pytest.raises(ValueError, match=message):
        make_calibrator("dirichlet_odir", **{"device": "cpu", **options}).fit(z, y)


def test_cpu_budget_fails_fast_with_advice():
    z, y = overconfident(200, 5)
    cal = make_calibrator("matrix_scaling_odir", device="cpu", cpu_flop_budget=1e6)
    with pytest.raises(CalibrationCostError, match=r"cpu_flop_budget.*GPU.*single value"):
        cal.fit(z, y)


@pytest.mark.parametrize("method", ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir"])
def test_cpu_budget_refuses_hours_not_an_imagenet_model(method):
    """K = 1000 with ImageNet's 25,000 calibration samples: each method's default CV fits the budget (23-35
    CPU-minutes measured); the same on ImageNet's 1.28 million training images is refused."""
    import torch

    cpu = torch.device("cpu")
    cal = make_calibrator(method)
    cal._check_budget(25_000, 1000, cal.expected_fits(), cpu)
    with pytest.raises(CalibrationCostError, match=rf"{method}: fitting on the CPU would take about .* 1000x1000 fits"):
        cal._check_budget(1_281_167, 1000, cal.expected_fits(), cpu)
    cal._check_budget(1_281_167, 1000, cal.expected_fits(), torch.device("cuda"))  # a GPU has no limit


def test_cost_model_expects_the_early_stop_and_sizes_jobs_for_the_full_search():
    """The plan and the budget count the 3 strongest lambdas' fits and one of mu's extension; a Slurm job's
    runtime every grid point and the whole extension (11 lambdas, 2 mus, 4 values beyond each end)."""
    from calibrepro.calibrators.cost import expected_fit_seconds

    odir, l2 = make_calibrator("dirichlet_odir"), make_calibrator("dirichlet_l2")
    assert (odir.expected_fits(), odir.planned_fits()) == (1 + 5 * (3 * 2 + 1), 1 + 5 * (11 * 2 + 4 * (2 + 1)))
    assert (l2.expected_fits(), l2.planned_fits()) == (1 + 5 * 3, 1 + 5 * (11 + 4))
    assert make_calibrator("dirichlet_l2", early_stop=False).expected_fits() == 1 + 5 * 11
    assert make_calibrator("dirichlet_l2", max_extensions=0).planned_fits() == 1 + 5 * 11
    assert make_calibrator("dirichlet_l2", lambdas=[1.0]).expected_fits() == 1
    assert make_calibrator("dirichlet_odir", lambdas=[1.0], mus=[1.0]).planned_fits() == 1
    shape = (10_000, 100)
    expected = expected_fit_seconds(shape, "dirichlet_odir", {}, calibration_fraction=0.5)
    worst = expected_fit_seconds(shape, "dirichlet_odir", {}, calibration_fraction=0.5, worst_case=True)
    assert worst / expected == pytest.approx(171 / 36)


@pytest.mark.parametrize("method", NEW)
def test_class_absent_from_calibration_half_gives_finite_probabilities(method):
    z, y = overconfident(400, 4, seed=11)
    y = np.where(y == 3, 0, y)  # class 3 never occurs
    cal = make_calibrator(method, **SMALL_GRID).fit(z, y)
    p = cal.predict_proba(z)
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0)


def test_simplex_least_squares_matches_a_general_solver():
    rng = np.random.default_rng(12)
    for _ in range(20):
        a = rng.normal(size=(6, 3))
        gram, linear = a.T @ a, rng.normal(size=3)
        w, value = simplex_least_squares(gram, linear)
        assert w.min() >= 0 and abs(w.sum() - 1) < 1e-12
        ref = minimize(
            lambda v: v @ gram @ v - 2 * linear @ v,
            np.full(3, 1 / 3),
            method="SLSQP",
            bounds=[(0, 1)] * 3,
            constraints={"type": "eq", "fun": lambda v: v.sum() - 1},
            options={"ftol": 1e-14},
        )
        assert value <= ref.fun + 1e-9


def test_ets_weights_follow_the_data():
    # labels unrelated to the logits: its temperature scaling stops with a clear error, not a flipped argmax
    rng = np.random.default_rng(13)
    z = rng.normal(size=(2000, 5)) * 4
    with pytest.raises(ValueError, match="no usable signal"):
        make_calibrator("ensemble_temperature_scaling").fit(z, rng.integers(0, 5, 2000))
    # labels drawn from softmax(z / 2): the temperature-scaled member dominates, T close to 2
    y = sample_labels(z / 2, rng)
    ets = make_calibrator("ensemble_temperature_scaling").fit(z, y)
    assert ets.weights_[0] > 0.8 and abs(1 / ets.inverse_temperature_ - 2) < 0.2
    assert np.array_equal(ets.predict_proba(z).argmax(1), z.argmax(1))


def frequency_problem(k=4, distinct=40, seed=14):
    """Samples whose features are the log of their labels' empirical frequencies (issue 18).

    Every distinct feature vector ``log q_j`` occurs with label i exactly ``counts_ji`` times, where
    ``q_j = counts_j / sum(counts_j)``: the NLL is minimised by ``softmax(W x + b) = q_j``, i.e. by
    ``W = I, b = 0``, which the ODIR penalty (no weight on the diagonal) leaves the unique optimum.
    """
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 9, size=(distinct, k))
    q = counts / counts.sum(axis=1, keepdims=True)
    rows = [(j, i) for j in range(distinct) for i in range(k) for _ in range(counts[j, i])]
    order = rng.permutation(len(rows))
    x = np.log(q)[[rows[r][0] for r in order]]
    y = np.array([rows[r][1] for r in order])
    return x, y


@pytest.mark.parametrize("step", ["formed-hessian", "cg-sampled-blocks", "cg-diagonal-rank-one"])
def test_newton_converges_to_a_known_optimum(step, monkeypatch):
    from calibrepro.calibrators import newton
    from calibrepro.calibrators.newton import SoftmaxRegression, penalty_weights

    dense = step == "formed-hessian"
    if not dense:
        monkeypatch.setattr(newton, "_DENSE_MAX", 0)
    if step == "cg-diagonal-rank-one":
        monkeypatch.setattr(newton, "_SAMPLED_BLOCKS", False)

    x, y = frequency_problem()
    k = x.shape[1]
    cw, cb = penalty_weights("odir", k, 0.5, 0.5)
    start_w = np.random.default_rng(0).normal(size=(k, k))  # far from the optimum
    w, b, info = SoftmaxRegression(x, y).fit(cw, cb, start_w, np.ones(k), tolerance=1e-9, max_iter=100)
    assert info["converged"] and info["final_grad_max_abs"] <= 1e-9, info["stop_reason"]
    np.testing.assert_allclose(w, np.eye(k), atol=1e-7)
    np.testing.assert_allclose(b, 0.0, atol=1e-7)
    assert info["final_loss"] < info["initial_loss"]
    assert (info["n_hessp"] == 0) == dense


def test_a_fit_stopped_by_max_iter_says_so():
    z, y = overconfident(400, 5, seed=15)
    cal = make_calibrator("dirichlet_odir", lambdas=[0.01], mus=[0.01], device="cpu", max_iter=1).fit(z, y)
    d = cal.diagnostics_
    assert d["converged"] is False and d["refit_converged"] is False
    assert "max_iter = 1" in d["stop_reason"] and d["final_grad_max_abs"] > 1e-6


@pytest.mark.parametrize("method", ["dirichlet_l2", "matrix_scaling_odir"])
def test_path_chooses_like_independent_cold_start_fits(method):
    """The warm-started path scores every grid point as separate fits from the identity would (the grid alone)."""
    from sklearn.model_selection import StratifiedKFold

    z, y = overconfident(500, 4, seed=16)
    grid = {"lambdas": [0.01, 1.0, 100.0], "mus": [0.01, 10.0], "folds": 3, "seed": 2, "device": "cpu", "max_extensions": 0}
    cal = make_calibrator(method, **grid, early_stop=False).fit(z, y)
    splits = StratifiedKFold(3, shuffle=True, random_state=2).split(z, y)
    cold = {}
    for train, held in splits:
        for point in cal.diagnostics_["cross_validation"]["grid"]:
            one = make_calibrator(method, lambdas=[point["lambda"]], mus=[point["mu"]], device="cpu").fit(z[train], y[train])
            nll = -np.log(one.predict_proba(z[held])[np.arange(len(held)), y[held]]).sum()
            cold[point["lambda"], point["mu"]] = cold.get((point["lambda"], point["mu"]), 0.0) + nll / len(y)
    for point in cal.diagnostics_["cross_validation"]["grid"]:
        assert point["converged"]
        assert abs(point["cv_nll"] - cold[point["lambda"], point["mu"]]) < 1e-6
    assert (cal.reg_lambda_, cal.reg_mu_) == min(cold, key=cold.get)
    # stopping the path where the CV score rises (weaker lambdas skipped) keeps the choice here
    stopped = make_calibrator(method, **grid).fit(z, y)
    assert (stopped.reg_lambda_, stopped.reg_mu_) == (cal.reg_lambda_, cal.reg_mu_)
    assert np.array_equal(stopped.weights_, cal.weights_)


def test_rank_one_preconditioner_is_the_exact_inverse_of_its_blocks():
    """Per class, diagonal plus the intercept penalty's rank one, ``D_i + cb a a^T``, inverted exactly."""
    from calibrepro.calibrators.newton import SoftmaxRegression, penalty_weights

    rng = np.random.default_rng(21)
    n, k = 300, 6
    x = log_softmax64(rng.normal(size=(n, k)) * 3)  # Dirichlet features: large column means m
    problem = SoftmaxRegression(x, rng.integers(0, k, n))
    cw, cb = penalty_weights("odir", k, 0.5, 30.0)
    p = rng.dirichlet(np.ones(k), n)
    precondition = problem._diagonal_rank_one(p.astype(np.float32), cw, cb)
    rw, rc = rng.normal(size=(k, k)), rng.normal(size=k)
    zw, zc = precondition(rw, rc)
    xc, v, a = x - x.mean(axis=0), p * (1 - p), np.append(-x.mean(axis=0), 1.0)
    for i in range(k):
        diagonal = np.append((v[:, i : i + 1] * xc**2).mean(axis=0) + cw[i], v[:, i].mean())
        exact = np.linalg.solve(np.diag(diagonal) + cb * np.outer(a, a), np.append(rw[i], rc[i]))
        np.testing.assert_allclose(np.append(zw[i], zc[i]), exact, rtol=1e-5)


@pytest.mark.parametrize("penalty", ["odir", "l2"])
def test_sampled_block_preconditioner_is_the_exact_inverse_of_its_blocks(penalty, monkeypatch):
    """Per class, ``D_i + U_i^T U_i``: the heaviest samples' rows and the intercept penalty exactly, the rest's diagonal."""
    from calibrepro.calibrators import newton
    from calibrepro.calibrators.newton import SoftmaxRegression, penalty_weights

    monkeypatch.setattr(newton, "_SAMPLED_ROWS", 7)
    rng = np.random.default_rng(24)
    n, k = 200, 6
    x = log_softmax64(rng.normal(size=(n, k)) * 3)
    problem = SoftmaxRegression(x, rng.integers(0, k, n))
    cw, cb = penalty_weights(penalty, k, 0.5, 30.0)
    p32 = rng.dirichlet(np.ones(k) * 0.3, n).astype(np.float32)
    zw, zc = problem._sampled_blocks(p32, cw, cb)(rw := rng.normal(size=(k, k)), rc := rng.normal(size=k))
    xt = np.hstack([x - x.mean(axis=0), np.ones((n, 1))])
    v, a = (p32 * (1 - p32)).astype(np.float64), np.append(-x.mean(axis=0), 1.0)
    for i in range(k):
        heavy = np.argsort(-v[:, i], kind="stable")[:7]
        rest = np.setdiff1d(np.arange(n), heavy)
        whole = (v[:, i : i + 1] * xt**2).mean(axis=0)
        diagonal = np.maximum((v[rest, i : i + 1] * xt[rest] ** 2).sum(axis=0) / n, 1e-3 * whole)
        diagonal += np.append(cw[i], 0.0)
        block = np.diag(diagonal) + (xt[heavy].T * v[heavy, i]) @ xt[heavy] / n + cb * np.outer(a, a)
        exact = np.linalg.solve(block, np.append(rw[i], rc[i]))
        np.testing.assert_allclose(np.append(zw[i], zc[i]), exact, rtol=1e-4, atol=1e-8 * np.abs(exact).max())


@pytest.mark.parametrize("penalty, mu", [("odir", 0.3), ("l2", 0.0), ("odir", 0.0)])
def test_shift_correction_inverts_the_hessian_on_the_softmax_flat_directions(penalty, mu):
    """``Z (Z^T H Z)^+ Z^T`` with ``Z`` the shifts of every class's parameters by one vector, H from its products."""
    from calibrepro.calibrators.newton import SoftmaxRegression, penalty_weights

    rng = np.random.default_rng(23)
    n, k = 300, 5
    problem = SoftmaxRegression(log_softmax64(rng.normal(size=(n, k)) * 3), rng.integers(0, k, n))
    cw, cb = penalty_weights(penalty, k, 0.5, mu)
    p32 = rng.dirichlet(np.ones(k), n).astype(np.float32)
    columns = []
    for unit in np.eye(k * (k + 1)):
        hw, hc = problem.hessp(p32, unit.reshape(k, k + 1)[:, :k], unit.reshape(k, k + 1)[:, k], cw, cb)
        columns.append(np.hstack([hw, hc[:, None]]).reshape(-1))
    z = np.kron(np.ones((k, 1)), np.eye(k + 1))
    r = rng.normal(size=(k, k + 1))
    exact = z @ np.linalg.pinv(z.T @ np.array(columns).T @ z, rcond=1e-6, hermitian=True) @ z.T @ r.reshape(-1)
    uw, uc = problem._shift_correction(cw, cb)(r[:, :k], r[:, k])
    got = np.hstack([np.broadcast_to(uw, (k, k)), np.broadcast_to(uc, (k,))[:, None]]).reshape(-1)
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-6 * np.abs(exact).max())


@pytest.mark.parametrize("method", ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir"])
def test_rank_one_and_sampled_block_preconditioners_reach_the_same_fit(method, monkeypatch):
    """The preconditioner only chooses the CG directions: both stop at the optimum within the tolerance."""
    from calibrepro.calibrators import newton

    z, y = overconfident(600, 12, seed=22)
    options = {"lambdas": [1.0], "mus": [10.0], "device": "cpu", "tolerance": 1e-9}
    monkeypatch.setattr(newton, "_DENSE_MAX", 0)
    sampled = make_calibrator(method, **options).fit(z, y)
    monkeypatch.setattr(newton, "_SAMPLED_BLOCKS", False)
    rank_one = make_calibrator(method, **options).fit(z, y)
    for fit in (sampled, rank_one):
        assert fit.diagnostics_["converged"] and fit.diagnostics_["n_hessp"] > 0
    np.testing.assert_allclose(rank_one.weights_, sampled.weights_, atol=1e-6)
    np.testing.assert_allclose(rank_one.bias_, sampled.bias_, atol=1e-6)
    assert abs(rank_one.diagnostics_["final_loss"] - sampled.diagnostics_["final_loss"]) < 1e-12


@pytest.mark.parametrize("k", [5, 40, 0], ids=["formed-hessian", "cg-sampled-blocks", "cg-diagonal-rank-one"])
def test_fits_are_identical_for_any_thread_count(k, monkeypatch):
    from calibrepro.calibrators import newton

    if k == 0:  # the GPU's preconditioner, here at K = 40 on the CPU
        monkeypatch.setattr(newton, "_SAMPLED_BLOCKS", False)
        k = 40
    z, y = overconfident(400, k, seed=17)
    fitted = [make_calibrator("dirichlet_odir", **SMALL_GRID, threads=t).fit(z, y).to_json() for t in (1, 2, 3)]
    assert k < 40 or fitted[0]["diagnostics"]["n_hessp"] > 0
    for data in fitted:
        data["hyperparameters"].pop("threads")
    assert json.dumps(fitted[0]) == json.dumps(fitted[1]) == json.dumps(fitted[2])


def test_torch_backend_matches_numpy():
    """The GPU's code path (torch tensors; run here on torch's CPU device) finds the numpy fit's optimum."""
    import torch

    from calibrepro.calibrators.newton import SoftmaxRegression, _Torch, penalty_weights

    rng = np.random.default_rng(18)
    x, y = rng.normal(size=(500, 6)) * 2, rng.integers(0, 6, 500)
    cw, cb = penalty_weights("odir", 6, 0.5, 0.5)
    fits = [
        SoftmaxRegression(x, y, ops).fit(cw, cb, np.eye(6), np.zeros(6), tolerance=1e-8, max_iter=100)
        for ops in (None, _Torch(torch.device("cpu")))
    ]
    assert fits[0][2]["converged"] and fits[1][2]["converged"] and fits[1][2]["n_hessp"] > 0
    np.testing.assert_allclose(fits[1][0], fits[0][0], atol=1e-8)
    np.testing.assert_allclose(fits[1][1], fits[0][1], atol=1e-8)


def test_a_fit_that_did_not_converge_is_marked_in_the_tables(tmp_path):
    """fit_step -> evaluate_step -> table: the non-converged fit's cell carries the mark (issue 18)."""
    from calibrepro.steps.calibration import evaluate_step
    from calibrepro.steps.reports import table_step

    z, y = overconfident(400, 5, seed=19)
    save_logits(tmp_path / "a.npz", z, y)
    split_step(tmp_path / "a.npz", 0.5, 0, tmp_path / "split.npz", dataset="d")
    fits = {m: tmp_path / f"{m}.json" for m in ("temperature_scaling", "dirichlet_odir")}
    options = {"dirichlet_odir": {"lambdas": [0.01], "mus": [0.01], "device": "cpu", "max_iter": 1}}
    fit_step(tmp_path / "a.npz", tmp_path / "split.npz", fits, bins=15, options=options)
    evaluate_step(tmp_path / "a.npz", tmp_path / "split.npz", tmp_path / "eval.csv", tmp_path / "rel.json",
                  calibrators=fits, metrics=["ece", "nll"], bins=15, dataset="d", model="m", seed=0,
                  convergence_output=tmp_path / "fits.csv")
    assert "fit_not_converged" not in (tmp_path / "eval.csv").read_text()  # metrics only
    assert "d,m,dirichlet_odir,0,0,1,0.01,0.01," in (tmp_path / "fits.csv").read_text()  # one Newton iteration
    table_step(tmp_path / "eval.csv", "nll", tmp_path / "t.md", tmp_path / "t.tex", language="en", bins=15,
               convergence_csv=tmp_path / "fits.csv")
    row = [c.strip() for c in (tmp_path / "t.md").read_text().splitlines()[-1].strip("|").split("|")]
    assert row[2:] and not row[2].endswith("‡") and row[3].endswith("‡"), row


@pytest.mark.parametrize("device, k, expected", [("auto", 10, "cpu"), ("auto", 320, "cpu"), ("auto", 321, "auto"),
                                                 ("cuda", 10, "cuda"), ("cpu", 1000, "cpu")])
def test_auto_takes_a_gpu_only_for_many_classes(device, k, expected):
    """``device: auto`` fits CIFAR-sized problems on the CPU even where a GPU is present (same bits everywhere)."""
    assert make_calibrator("dirichlet_odir", device=device)._device_spec(k) == expected


def test_an_extreme_penalty_converges_at_the_gradient_s_rounding_error():
    """Dir-L2 at lambda = 1e9 (K = 10; the default grid's top): b = c - W m's rounding, times the penalty, keeps the
    gradient above 1e-6; the fit stops there, converged, and says why (the demo's overconfident MLP, issue 33)."""
    from calibrepro.calibrators.newton import SoftmaxRegression, penalty_weights

    rng = np.random.default_rng(22)
    z = rng.normal(size=(360, 10)) * 12  # log-probabilities down to about -60, as an overconfident network's
    y = sample_labels(z / 3, rng)
    x = log_softmax64(z)
    cw, cb = penalty_weights("l2", 10, 1e9, 0.0)
    w, b, info = SoftmaxRegression(x, y).fit(cw, cb, np.eye(10), np.zeros(10), tolerance=1e-6, max_iter=20, centre=np.eye(10))
    assert info["converged"] and info["n_iter"] <= 3, info["stop_reason"]
    assert info["final_grad_max_abs"] > 1e-6 and "rounding error" in info["stop_reason"]
    assert np.abs(w - np.eye(10)).max() < 1e-6 and np.abs(b).max() < 1e-6
