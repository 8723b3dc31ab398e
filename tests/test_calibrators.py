"""Calibrators: conventions, properties, exactness against scikit-learn, JSON, determinism."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.isotonic import IsotonicRegression

from calibrepro import calibrators as C
from calibrepro.calibrators import CALIBRATORS, calibrator_from_json, make_calibrator, softmax
from calibrepro.calibrators import isotonic as isotonic_module
from calibrepro.metrics.bins import bin_index
from calibrepro.metrics.scores import nll
from servers import REALDATA as SHARED_REALDATA
from workflow_helpers import overconfident

REALDATA = SHARED_REALDATA / "logits" / "chenyaofo" / "cifar10"
METHODS = list(CALIBRATORS)
#: the full-matrix methods with one regularisation value, i.e. one fit instead of a cross-validated grid:
#: they take part in the generic properties here; their grid search is tested in test_calibrators_dirichlet.py
ONE_FIT = {
    "dirichlet_l2": {"lambdas": [0.01], "device": "cpu"},
    "dirichlet_odir": {"lambdas": [0.01], "mus": [0.01], "device": "cpu"},
    "matrix_scaling_odir": {"lambdas": [0.01], "mus": [0.01], "device": "cpu"},
}


def make(method, **options):
    """``make_calibrator`` with :data:`ONE_FIT`'s options for the full-matrix methods."""
    return make_calibrator(method, **{**ONE_FIT.get(method, {}), **options})
SCALING = ["temperature_scaling", "vector_scaling", "vector_scaling_bias"]




@pytest.fixture(scope="module")
def data10():
    z, y = overconfident(4000, 10, seed=1)
    return z[:2000], y[:2000], z[2000:], y[2000:]


def real(model="resnet20"):
    path = REALDATA / f"{model}.npz"
    if not path.exists():
        pytest.skip(f"real logits not available ({path})")
    archive = np.load(path)
    return archive["logits"], archive["labels"]


# ------------------------------------------------------------------------------------ registry
def test_registry_and_factory():
    assert METHODS == [
        "uncalibrated",
        "histogram_binning",
        "isotonic",
        "temperature_scaling",
        "vector_scaling",
        "vector_scaling_bias",
        "dirichlet_l2",
        "dirichlet_odir",
        "matrix_scaling_odir",
        "ensemble_temperature_scaling",
    ]
    for name, cls in CALIBRATORS.items():
        assert cls.method == name
        assert type(make_calibrator(name)) is cls
    assert make_calibrator("histogram_binning", bins=7).bins == 7
    with pytest.raises(ValueError, match="uncalibrated, histogram_binning, isotonic"):
        make_calibrator("platt")
    with pytest.raises(C.UnknownCalibratorError, match="'temprature' \\(did you mean 'temperature_scaling'\\?\\)"):
        make_calibrator("temprature")
    with pytest.raises(ValueError, match="unknown calibration method"):
        calibrator_from_json({"method": "platt", "params": {}})


def test_softmax_single_definition():
    z = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32) * 5
    p32 = softmax(z)
    assert p32.dtype == np.float32
    assert np.array_equal(p32, torch.softmax(torch.from_numpy(z), dim=1).numpy())
    p64 = softmax(z, "float64")
    assert p64.dtype == np.float64
    assert np.allclose(p64.sum(1), 1, atol=1e-15)
    assert np.allclose(p64, p32, atol=1e-6)
    with pytest.raises(ValueError):
        softmax(z, "float16")


# ------------------------------------------------------------------------------------ all methods
@pytest.mark.parametrize("method", METHODS)
def test_outputs_are_probabilities(method, data10):
    zc, yc, zt, _ = data10
    cal = make(method).fit(zc, yc)
    probs = cal.predict_proba(zt)
    assert probs.shape == zt.shape and probs.dtype == np.float64
    assert (probs >= 0).all() and (probs <= 1).all()
    tol = 1e-6 if method == "uncalibrated" else 1e-12  # float32 softmax rows vs float64
    assert np.allclose(probs.sum(axis=1), 1.0, atol=tol, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_json_round_trip_is_bit_exact(method, data10):
    zc, yc, zt, _ = data10
    cal = make(method).fit(zc, yc)
    # the pipeline writes with indent/sort_keys/allow_nan=False
    text = json.dumps(cal.to_json(), indent=2, sort_keys=True, allow_nan=False)
    data = json.loads(text)
    assert data["method"] == method and "params" in data and "diagnostics" in data
    again = calibrator_from_json(data)
    assert type(again) is type(cal)
    assert again.predict_proba(zt).tobytes() == cal.predict_proba(zt).tobytes()
    assert CALIBRATORS[method].from_json(data).to_json() == data
    with pytest.raises(ValueError, match="JSON is for method"):
        CALIBRATORS["isotonic" if method != "isotonic" else "uncalibrated"].from_json(data)


@pytest.mark.parametrize("method", METHODS)
def test_refit_is_bit_identical(method, data10):
    zc, yc, zt, _ = data10
    a = make(method).fit(zc, yc).predict_proba(zt)
    b = make(method).fit(zc.copy(), yc.copy()).predict_proba(zt)
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("method", METHODS)
def test_input_errors(method, data10):
    zc, yc, zt, _ = data10
    cal = make(method)
    with pytest.raises(NotFittedError, match="not fitted"):
        cal.predict_proba(zt)
    with pytest.raises(ValueError, match="lie in"):
        cal.fit(zc, np.full_like(yc, 10))
    bad = zc.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cal.fit(bad, yc)
    cal.fit(zc, yc)
    with pytest.raises(ValueError, match="classes"):
        cal.predict_proba(zt[:, :5])


def test_thread_count_does_not_change_results():
    # K=100 with 3000 samples: several row blocks, so the worker pool is really used
    z, y = overconfident(3000, 100, seed=3)
    before = torch.get_num_threads()
    out = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out[threads] = {
                m: make(m).fit(z, y).predict_proba(z).tobytes()
                for m in ["uncalibrated", "isotonic", *SCALING]
            }
    finally:
        torch.set_num_threads(before)
    for method in out[1]:
        assert out[1][method] == out[2][method], method


def test_concurrent_fits_in_threads_match_serial_fits(data10):
    # the pipeline runs cheap jobs in threads of one process: no shared state between fits
    from concurrent.futures import ThreadPoolExecutor

    zc, yc, zt, _ = data10

    def job(method):
        return make(method).fit(zc, yc).predict_proba(zt).tobytes()

    serial = {m: job(m) for m in METHODS}
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(job, METHODS * 2))
    assert parallel == [serial[m] for m in METHODS * 2]


# ------------------------------------------------------------------------------------ uncalibrated
def test_uncalibrated_is_float32_torch_softmax(data10):
    zc, yc, zt, _ = data10
    probs = make_calibrator("uncalibrated").fit(zc, yc).predict_proba(zt)
    assert np.array_equal(probs, torch.softmax(torch.from_numpy(zt), 1).numpy().astype(np.float64))


# ------------------------------------------------------------------------------------ histogram binning
def _naive_binning(p, y, bins):
    """Reference one-vs-rest binning with explicit float64 edges, loops over classes and bins."""
    n, k = p.shape
    edges = np.arange(bins + 1) / bins
    values = np.full((k, bins), np.nan)
    for j in range(k):
        pj = p[:, j].astype(np.float64)
        for m in range(bins):
            inb = (pj > edges[m]) & (pj <= edges[m + 1]) if m else (pj <= edges[1])
            if inb.any():
                values[j, m] = np.mean(y[inb] == j)
    return values


def _naive_apply(values, p, bins):
    edges = np.arange(bins + 1) / bins
    q = p.astype(np.float64).copy()
    for j in range(p.shape[1]):
        pj = p[:, j].astype(np.float64)
        for m in range(bins):
            inb = (pj > edges[m]) & (pj <= edges[m + 1]) if m else (pj <= edges[1])
            if not np.isnan(values[j, m]):
                q[inb, j] = values[j, m]
    total = q.sum(1, keepdims=True)
    return np.where(total > 0, q / np.where(total > 0, total, 1), 1 / p.shape[1])


@pytest.mark.parametrize("bins", [15, 4])
def test_histogram_binning_matches_naive_reference(bins, data10):
    zc, yc, zt, _ = data10
    cal = make_calibrator("histogram_binning", bins=bins).fit(zc, yc)
    values = _naive_binning(softmax(zc), yc, bins)
    assert np.array_equal(np.isnan(cal.values_), np.isnan(values))
    assert np.array_equal(cal.values_[~np.isnan(values)], values[~np.isnan(values)])
    assert cal.counts_.sum() == zc.size
    expected = _naive_apply(values, softmax(zt), bins)
    assert np.allclose(cal.predict_proba(zt), expected, rtol=1e-15, atol=1e-15)


def test_histogram_binning_empty_bin_leaves_probability_unchanged():
    # two classes; the calibration probabilities of class 0 only reach bins 1 and 15
    zc = np.array([[4.0, 0.0], [0.0, 4.0], [5.0, 0.0], [0.0, 5.0]], dtype=np.float32)
    yc = np.array([0, 1, 1, 1])
    cal = make_calibrator("histogram_binning").fit(zc, yc)
    assert np.isnan(cal.values_[0, 7])  # (7/15, 8/15] received nothing
    zt = np.array([[0.1, 0.0]], dtype=np.float32)  # p = (0.525, 0.475): bin 8 for both classes
    p = softmax(zt)[0].astype(np.float64)
    assert bin_of(p[0]) == 7 and bin_of(p[1]) == 7
    assert np.array_equal(cal.predict_proba(zt)[0], p / p.sum())  # both bins empty: unchanged


def test_histogram_binning_float32_edges_compare_exactly():
    # float32(1/15) lies above the real 1/15: it belongs to the second bin, not the first
    x = np.float32(1 / 15)
    p = np.array([[x, 1 - x], [np.nextafter(x, np.float32(0)), 0.5]], dtype=np.float32)
    small, rows, cols, _, b = make_calibrator("histogram_binning")._split(p)
    assert small.tolist() == [[False, False], [True, False]]
    assert list(zip(rows.tolist(), cols.tolist(), b.tolist(), strict=True)) == [(0, 0, 1), (0, 1, 14), (1, 1, 7)]


def bin_of(value, bins=15):
    return int(bin_index(np.array([value]), bins)[0])


def test_all_zero_rows_become_uniform():
    # histogram binning: every bin the test row falls into holds only negatives
    zc = np.log(np.array([[0.9, 0.1, 1e-6], [1e-6, 0.9, 0.1], [0.1, 1e-6, 0.9]])).astype(np.float32)
    yc = np.array([1, 2, 0])
    cal = make_calibrator("histogram_binning").fit(zc, yc)
    zt = np.log(np.array([[0.9, 0.05, 0.05], [0.1, 1e-6, 0.9]])).astype(np.float32)
    probs = cal.predict_proba(zt)
    assert [bin_of(v) for v in softmax(zt)[0]] == [13, 0, 0]
    assert np.array_equal(probs[0], np.full(3, 1 / 3))
    assert probs[1].tolist() == [1.0, 0.0, 0.0]  # bins (1/15, 2/15], [0, 1/15], (13/15, 14/15]
    # isotonic: a calibrator that maps everything to 0
    q = C.IsotonicCalibration()
    q.n_classes_ = 3
    q.x_thresholds_ = [np.array([0.0, 1.0], np.float32)] * 3
    q.y_thresholds_ = [np.array([0.0, 0.0], np.float32)] * 3
    assert np.array_equal(q.predict_proba(np.zeros((2, 3), np.float32)), np.full((2, 3), 1 / 3))


# ------------------------------------------------------------------------------------ isotonic
def _sklearn_isotonic(zc, yc, zt):
    pc, pt = softmax(zc), softmax(zt)
    models, cols = [], []
    for j in range(zc.shape[1]):
        ir = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(pc[:, j], yc == j)
        models.append(ir)
        cols.append(ir.predict(pt[:, j]))
    q = np.stack(cols, 1).astype(np.float64)
    return models, q / q.sum(1, keepdims=True)


@pytest.mark.parametrize("k, n, seed", [(10, 3000, 0), (100, 2000, 1), (3, 500, 2)])
def test_isotonic_is_bit_identical_to_sklearn(k, n, seed):
    z, y = overconfident(2 * n, k, seed=seed)
    zc, yc, zt = z[:n], y[:n], z[n:]
    cal = make_calibrator("isotonic").fit(zc, yc)
    models, expected = _sklearn_isotonic(zc, yc, zt)
    for j, ir in enumerate(models):
        assert np.array_equal(cal.x_thresholds_[j], ir.X_thresholds_), j
        assert np.array_equal(cal.y_thresholds_[j], ir.y_thresholds_), j
        assert cal.x_thresholds_[j].dtype == np.float32
    assert np.array_equal(cal.predict_proba(zt), expected)


def test_isotonic_merges_float32_values_closer_than_1e6():
    # a dense run of values spaced 4e-7 apart: scikit-learn merges greedily from each group start
    base = np.float32(0.3)
    values = base + np.arange(40, dtype=np.float32) * np.float32(4e-7)
    s = np.sort(values)[None, :]
    starts = isotonic_module._unique_groups(s)
    expected = [0]
    for i, v in enumerate(s[0]):
        if v - s[0][expected[-1]] >= np.float32(1e-6):
            expected.append(i)
    assert starts.tolist() == expected


def test_isotonic_outputs_are_monotone_per_class(data10):
    zc, yc, _, _ = data10
    cal = make_calibrator("isotonic").fit(zc, yc)
    grid = np.sort(np.random.default_rng(0).uniform(0, 1, 5000).astype(np.float32))
    for j in range(10):
        out = isotonic_module._interp_f32(grid, cal.x_thresholds_[j], cal.y_thresholds_[j])
        # SciPy >= 1.18 interpolates by a convex combination, which can step back by float32 rounding
        assert (np.diff(out.astype(np.float64)) >= -np.spacing(np.float32(1))).all(), j
        assert out.min() >= 0 and out.max() <= 1


def test_isotonic_json_is_compact_and_exact(data10):
    zc, yc, _, _ = data10
    cal = make_calibrator("isotonic").fit(zc, yc)
    text = json.dumps(cal.to_json())
    numbers = json.loads(text)["params"]["x_thresholds"][0]
    assert max(len(repr(v)) for v in numbers) <= 16  # shortest float32 digits, not 17-digit float64s
    again = calibrator_from_json(json.loads(text))
    for a, b in zip(again.x_thresholds_ + again.y_thresholds_, cal.x_thresholds_ + cal.y_thresholds_, strict=True):
        assert a.dtype == np.float32 and np.array_equal(a, b)


# ------------------------------------------------------------------------------------ scaling methods
def test_temperature_scaling_never_changes_argmax(data10):
    zc, yc, zt, _ = data10
    cal = make_calibrator("temperature_scaling").fit(zc, yc)
    assert cal.temperature_ > 0
    assert np.array_equal(cal.predict_proba(zt).argmax(1), zt.argmax(1))
    assert cal.diagnostics_["converged"] and cal.diagnostics_["n_iter"] < 100


def test_temperature_scaling_is_the_nll_minimiser(data10):
    zc, yc, _, _ = data10
    cal = make_calibrator("temperature_scaling").fit(zc, yc)
    z64 = zc.astype(np.float64)

    def loss(t):
        return nll(softmax(z64 / t, "float64"), yc)

    t = cal.temperature_
    assert loss(t) <= loss(t * 1.001) and loss(t) <= loss(t / 1.001)
    assert cal.diagnostics_["final_loss"] == pytest.approx(loss(t), rel=1e-12)
    # torch's default tolerances stop on the loss-change test, near (not at) the minimiser
    assert cal.diagnostics_["final_grad_max_abs"] < 1e-4


def test_identity_parameters_give_plain_softmax(data10):
    zc, _, zt, _ = data10
    k = zc.shape[1]
    params = {"n_classes": k, "weights": [1.0] * k, "bias": [0.0] * k}
    vs = calibrator_from_json({"method": "vector_scaling_bias", "params": params})
    assert np.array_equal(vs.predict_proba(zt), softmax(zt, "float64"))
    v = calibrator_from_json({"method": "vector_scaling", "params": {"n_classes": k, "weights": [1.0] * k}})
    assert np.array_equal(v.predict_proba(zt), softmax(zt, "float64"))
    ts = calibrator_from_json({"method": "temperature_scaling", "params": {"n_classes": k, "inverse_temperature": 1.0}})
    assert np.array_equal(ts.predict_proba(zt), softmax(zt, "float64"))


def test_scaling_family_ordering_of_calibration_nll(data10):
    zc, yc, _, _ = data10
    fitted = {m: make(m).fit(zc, yc) for m in SCALING}
    loss = {m: c.diagnostics_["final_loss"] for m, c in fitted.items()}
    # nested models: VS contains TS (all w equal), VS+b contains VS (b = 0)
    assert loss["vector_scaling"] <= loss["temperature_scaling"] + 1e-12
    assert loss["vector_scaling_bias"] <= loss["vector_scaling"] + 1e-12
    for m, c in fitted.items():
        d = c.diagnostics_
        assert d["converged"], m
        assert d["final_loss"] < d["initial_loss"], m
        assert d["optimizer"] == "torch.optim.LBFGS" and d["settings"]["line_search_fn"] == "strong_wolfe"


def test_vector_scaling_bias_reaches_the_optimum():
    z, y = overconfident(3000, 10, seed=4)
    cal = make_calibrator("vector_scaling_bias").fit(z, y)
    z64 = z.astype(np.float64)
    onehot = np.eye(10)[y]

    def fun(theta):  # plain-coordinate NLL, fully converged with scipy
        s = z64 * theta[:10] + theta[10:]
        s -= s.max(1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(1, keepdims=True)
        loss = -np.mean(np.log(p[np.arange(len(y)), y]))
        g = p - onehot
        return loss, np.concatenate([(g * z64).mean(0), g.mean(0)])

    ref = minimize(
        fun,
        np.r_[np.ones(10), np.zeros(10)],
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 20000, "ftol": 0, "gtol": 1e-12, "maxcor": 50},
    )
    s = z64 * ref.x[:10] + ref.x[10:]
    p_ref = softmax(s, "float64")
    assert cal.diagnostics_["final_loss"] - ref.fun < 1e-10
    assert np.abs(cal.predict_proba(z) - p_ref).max() < 1e-4
    # b is defined up to a constant (softmax invariance): reported mean-centred
    assert abs(cal.bias_.sum()) < 1e-12


def test_vector_scaling_without_bias_has_no_bias():
    z, y = overconfident(1000, 5, seed=6)
    cal = make_calibrator("vector_scaling").fit(z, y)
    assert not hasattr(cal, "bias_") and "bias" not in cal.to_json()["params"]
    assert cal.weights_.shape == (5,)


# ------------------------------------------------------------------------------------ real logits
@pytest.fixture(scope="module")
def real_halves():
    z, y = real()
    return z[:5000], y[:5000], z[5000:], y[5000:]


def test_real_temperature_scaling_cools_an_overconfident_net(real_halves):
    zc, yc, zt, yt = real_halves
    cal = make_calibrator("temperature_scaling").fit(zc, yc)
    assert cal.temperature_ > 1.0
    before = nll(make_calibrator("uncalibrated").fit(zc, yc).predict_proba(zt), yt)
    after = nll(cal.predict_proba(zt), yt)
    assert after < before


def test_real_isotonic_matches_sklearn_and_binning_is_valid(real_halves):
    zc, yc, zt, _ = real_halves
    cal = make_calibrator("isotonic").fit(zc, yc)
    _, expected = _sklearn_isotonic(zc, yc, zt)
    assert np.array_equal(cal.predict_proba(zt), expected)
    hb = make_calibrator("histogram_binning").fit(zc, yc).predict_proba(zt)
    assert np.allclose(hb.sum(1), 1, atol=1e-12) and (hb >= 0).all()
    assert np.array_equal(hb, _naive_apply(_naive_binning(softmax(zc), yc, 15), softmax(zt), 15))


@pytest.mark.parametrize("model", ["resnet56", "vgg11_bn", "mobilenetv2_x0_5"])
def test_real_all_methods_valid(model):
    z, y = real(model)
    for method in METHODS:
        probs = make(method).fit(z[:5000], y[:5000]).predict_proba(z[5000:])
        assert np.isfinite(probs).all() and np.allclose(probs.sum(1), 1, atol=1e-6), method


@pytest.mark.parametrize("method", METHODS)
def test_scikit_learn_estimator_conventions(method, data10):
    """Hyperparameters through get_params/set_params, clone gives an unfitted twin that fits the same."""
    zc, yc, zt, _ = data10
    cal = make(method, bins=10, unknown_option=1)  # options a method does not take are ignored
    params = cal.get_params()
    defaults = type(cal)().get_params()  # e.g. the regularisation grids of the full-matrix methods
    assert params == ({"bins": 10} if method == "histogram_binning" else {**defaults, **ONE_FIT.get(method, {})})
    assert {key: params[key] for key in params.keys() & {"optimizer"}} == (
        {"optimizer": "plain"} if method == "vector_scaling" else
        {"optimizer": "rescaled"} if method == "vector_scaling_bias" else {}
    )
    twin = clone(cal)
    assert twin.get_params() == params and not hasattr(twin, "n_classes_")
    cal.fit(zc, yc)
    assert cal.to_json()["hyperparameters"] == params
    assert clone(cal).fit(zc, yc).predict_proba(zt).tobytes() == cal.predict_proba(zt).tobytes()


def test_registry_declares_each_method_once():
    """The registry key is the class's ``method``; every class names itself in both report languages."""
    for method, cls in CALIBRATORS.items():
        assert cls.method == method
        assert set(cls.display_names) == {"ru", "en"} and cls.reference
    with pytest.raises(C.UnknownCalibratorError, match="unknown calibration method 'platt'; known: uncalibrated"):
        make_calibrator("platt")
