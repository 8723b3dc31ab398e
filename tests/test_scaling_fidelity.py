"""Temperature and vector scaling fitted exactly as the thesis's measured reference (issue 10 sec. 1).

The references here are written independently of the library: plain ``torch.optim.LBFGS`` with
autograd on ``torch.nn.functional.cross_entropy`` in float64, torch's own defaults.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch
from scipy.optimize import minimize, minimize_scalar
from sklearn.model_selection import train_test_split

from calibrepro.calibrators import calibrator_from_json, make_calibrator, softmax
from calibrepro.calibrators.scaling import TORCH_LBFGS_DEFAULTS, TemperatureScaling, run_lbfgs
from servers import REALDATA as SHARED_REALDATA
from workflow_helpers import overconfident

REALDATA = SHARED_REALDATA / "logits" / "chenyaofo" / "cifar10"




def thesis_halves(model):
    """Calibration and test halves of a real CIFAR-10 model with the thesis's split."""
    path = REALDATA / f"{model}.npz"
    if not path.exists():
        pytest.skip(f"real logits not available ({path})")
    with np.load(path, allow_pickle=False) as archive:
        z, y = archive["logits"], archive["labels"]
    calib, test = train_test_split(np.arange(len(y)), test_size=0.5, random_state=0, stratify=y)
    return z[calib], y[calib], z[test], y[test]


def torch_reference(z, y, n_params, steps):
    """``softmax(theta * z)`` fitted by plain torch L-BFGS (autograd, float64, defaults) from 1.

    ``steps=None``: call ``step`` until the parameters stop changing or the gradient is <= 1e-7.
    """
    zt = torch.from_numpy(np.asarray(z, dtype=np.float64))
    yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
    theta = torch.ones(n_params, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([theta], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(zt * theta, yt)
        loss.backward()
        return loss

    for _ in range(steps or 500):
        before = theta.detach().clone()
        opt.step(closure)
        if steps is None and (torch.equal(before, theta.detach()) or theta.grad.abs().max() <= 1e-7):
            break
    return theta.detach().numpy().copy(), opt.state[theta]["n_iter"]


def exact_minimiser(z, y, w0):
    """Fully converged minimiser of the mean NLL of ``softmax(w * z)`` (scipy, gradient 1e-12)."""
    z64 = np.asarray(z, dtype=np.float64)
    onehot = np.eye(z.shape[1])[y]

    def fun(w):
        p = softmax(z64 * w, "float64")
        return -np.mean(np.log(p[np.arange(len(y)), y])), ((p - onehot) * z64).mean(0)

    res = minimize(fun, w0, jac=True, method="L-BFGS-B", options={"maxiter": 20000, "ftol": 0, "gtol": 1e-12})
    return res.x, res.fun


# ------------------------------------------------------------------------------------ settings
def test_settings_are_torch_lbfgs_defaults():
    defaults = {
        name: p.default
        for name, p in inspect.signature(torch.optim.LBFGS.__init__).parameters.items()
        if name in TORCH_LBFGS_DEFAULTS
    }
    expected = {**defaults, "max_eval": defaults["max_iter"] * 5 // 4, "line_search_fn": "strong_wolfe"}
    assert TORCH_LBFGS_DEFAULTS == expected
    assert TemperatureScaling.LBFGS_SETTINGS == expected


# ------------------------------------------------------------------------------------ temperature scaling
@pytest.mark.parametrize(("n", "k", "seed"), [(2000, 10, 1), (3000, 100, 2), (500, 3, 7)])
def test_temperature_scaling_equals_the_torch_reference(n, k, seed):
    z, y = overconfident(n, k, seed)
    cal = make_calibrator("temperature_scaling").fit(z, y)
    a_ref, n_iter = torch_reference(z, y, 1, steps=1)
    assert cal.inverse_temperature_ == pytest.approx(a_ref[0], rel=1e-12, abs=0)
    assert cal.diagnostics_["n_iter"] == n_iter and cal.diagnostics_["steps"] == 1
    assert cal.temperature_ == 1.0 / cal.inverse_temperature_


@pytest.mark.parametrize("model", ["resnet20", "vgg11_bn", "repvgg_a2", "shufflenetv2_x0_5"])
def test_real_temperature_scaling_equals_the_torch_reference(model):
    zc, yc, zt, _ = thesis_halves(model)
    cal = make_calibrator("temperature_scaling").fit(zc, yc)
    a_ref, n_iter = torch_reference(zc, yc, 1, steps=1)
    assert cal.inverse_temperature_ == pytest.approx(a_ref[0], rel=1e-12, abs=0)
    assert cal.diagnostics_["n_iter"] == n_iter
    # torch's defaults stop near, not at, the exact minimiser: that stopping point is the method
    z64 = zc.astype(np.float64)
    exact = minimize_scalar(
        lambda a: -np.mean(np.log(softmax(z64 * a, "float64")[np.arange(len(yc)), yc])),
        bracket=(0.4, 0.8),
        tol=1e-12,
    ).x
    assert abs(cal.inverse_temperature_ - exact) < 1e-4
    assert np.array_equal(cal.predict_proba(zt).argmax(1), softmax(zt).argmax(1))


def test_temperature_scaling_predicts_softmax_of_a_times_z_and_round_trips():
    z, y = overconfident(1500, 10, 3)
    cal = make_calibrator("temperature_scaling").fit(z[:1000], y[:1000])
    a = cal.inverse_temperature_
    probs = cal.predict_proba(z[1000:])
    assert np.array_equal(probs, softmax(z[1000:].astype(np.float64) * a, "float64"))
    saved = json.loads(json.dumps(cal.to_json()))
    assert saved["params"] == {"n_classes": 10, "inverse_temperature": a, "temperature": 1.0 / a}
    assert saved["diagnostics"]["settings"] == TORCH_LBFGS_DEFAULTS
    assert calibrator_from_json(saved).predict_proba(z[1000:]).tobytes() == probs.tobytes()


def test_temperature_scaling_never_changes_the_argmax_including_ties():
    z, y = overconfident(2000, 10, 5)
    z[::7, 3] = z[::7].max(axis=1)  # exact ties: the lowest index wins, before and after
    cal = make_calibrator("temperature_scaling").fit(z, y)
    assert cal.temperature_ > 1.0
    assert np.array_equal(cal.predict_proba(z).argmax(1), z.argmax(1))


def test_temperature_scaling_rejects_logits_without_signal():
    z, y = overconfident(500, 10, 6)
    with pytest.raises(ValueError, match="inverse temperature .* <= 0"):
        make_calibrator("temperature_scaling").fit(-z, y)  # the labels' logits are now the lowest


# ------------------------------------------------------------------------------------ vector scaling
@pytest.mark.parametrize(("n", "k", "seed"), [(2000, 10, 1), (3000, 100, 3)])
def test_plain_vector_scaling_equals_the_torch_reference_and_reaches_the_optimum(n, k, seed):
    z, y = overconfident(n, k, seed)
    cal = make_calibrator("vector_scaling").fit(z, y)
    assert cal.get_params() == {"optimizer": "plain"}
    d = cal.diagnostics_
    assert d["settings"] == TORCH_LBFGS_DEFAULTS and d["converged"]
    w_ref, n_iter = torch_reference(z, y, k, steps=None)
    assert np.abs(cal.weights_ - w_ref).max() < 1e-10
    assert d["n_iter"] == n_iter
    w_exact, loss_exact = exact_minimiser(z, y, np.ones(k))
    assert d["final_grad_max_abs"] < 1e-4
    assert 0 <= d["final_loss"] - loss_exact < 1e-8
    assert np.abs(cal.weights_ - w_exact).max() < 1e-3


@pytest.mark.parametrize("model", ["resnet56", "mobilenetv2_x1_4"])
def test_real_plain_vector_scaling_equals_the_torch_reference(model):
    zc, yc, _, _ = thesis_halves(model)
    cal = make_calibrator("vector_scaling").fit(zc, yc)
    w_ref, _ = torch_reference(zc, yc, 10, steps=None)
    assert np.abs(cal.weights_ - w_ref).max() < 1e-10


def test_vector_scaling_variants_share_the_optimum_not_the_stopping_point():
    z, y = overconfident(3000, 20, 8)
    plain = make_calibrator("vector_scaling").fit(z, y)
    rescaled = make_calibrator("vector_scaling", optimizer="rescaled").fit(z, y)
    w_exact, loss_exact = exact_minimiser(z, y, np.ones(20))
    dist = {name: np.abs(c.weights_ - w_exact).max() for name, c in [("plain", plain), ("rescaled", rescaled)]}
    assert dist["rescaled"] < dist["plain"] < 1e-3
    assert rescaled.diagnostics_["final_loss"] - loss_exact < 1e-12
    assert "stages" in rescaled.diagnostics_ and "stages" not in plain.diagnostics_
    # the hyperparameter travels with the JSON
    saved = json.loads(json.dumps(rescaled.to_json()))
    assert saved["hyperparameters"] == {"optimizer": "rescaled"}
    assert calibrator_from_json(saved).predict_proba(z).tobytes() == rescaled.predict_proba(z).tobytes()


def test_vector_scaling_bias_default_stays_rescaled_and_plain_is_available():
    z, y = overconfident(2000, 10, 9)
    assert make_calibrator("vector_scaling_bias").get_params() == {"optimizer": "rescaled"}
    plain = make_calibrator("vector_scaling_bias", optimizer="plain").fit(z, y)
    assert plain.diagnostics_["converged"] and plain.bias_.shape == (10,)


@pytest.mark.parametrize("method", ["vector_scaling", "vector_scaling_bias"])
def test_unknown_optimizer_is_rejected(method):
    z, y = overconfident(200, 4, 10)
    with pytest.raises(ValueError, match="optimizer must be 'plain' or 'rescaled', got 'newton'"):
        make_calibrator(method, optimizer="newton").fit(z, y)


# ------------------------------------------------------------------------------------ run_lbfgs
def _quadratic(theta):
    scales = np.arange(1.0, len(theta) + 1.0) ** 2  # condition number 400 at 20 parameters
    return 0.5 * float(np.sum(scales * (theta - 1.0) ** 2)), scales * (theta - 1.0)


def test_run_lbfgs_default_is_one_step_call():
    settings = {**TORCH_LBFGS_DEFAULTS, "max_iter": 3, "max_eval": 5}
    theta, info = run_lbfgs(np.zeros(20), _quadratic, settings)
    assert info["steps"] == 1 and info["n_iter"] == 3 and info["stop_reason"] == "max_iter"
    assert not info["converged"]
    assert info["final_loss"] == _quadratic(theta)[0]


def test_run_lbfgs_repeated_steps_go_on_past_max_iter():
    settings = {**TORCH_LBFGS_DEFAULTS, "max_iter": 3, "max_eval": 5}
    theta, info = run_lbfgs(np.zeros(20), _quadratic, settings, max_steps=200)
    assert info["steps"] > 1 and info["converged"]
    assert info["stop_reason"] in ("tolerance_grad", "no_progress")
    # no_progress: torch sees no descent direction steeper than tolerance_change (1e-9)
    assert info["final_loss"] < 1e-9 and np.abs(theta - 1.0).max() < 1e-4
