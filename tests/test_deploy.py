"""calibrepro.deploy: a network and a fitted scaling calibrator as one torch module, equal to predict_proba."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError

from calibrepro.calibrators import make_calibrator
from calibrepro.deploy import LAYER_METHODS, CalibratedModel, NotALogitLayerError, calibration_layer
from calibrepro.io import write_json
from calibrepro.regression.recalibration import make_recalibrator

#: one grid point: no cross-validation, so the full-matrix fits take a fraction of a second
OPTIONS = {"lambdas": [0.1], "mus": [0.1]}


@pytest.fixture(scope="module")
def network():
    """A small overconfident classifier of 6 classes and a calibration set of its inputs and labels."""
    generator = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 6))
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 1.5)
    inputs = torch.randn(600, 8, generator=generator)
    with torch.no_grad():
        logits = net(inputs)
    noisy = torch.randint(0, 6, (600,), generator=generator)
    labels = torch.where(torch.rand(600, generator=generator) < 0.3, noisy, logits.argmax(1))
    return net.eval(), inputs, labels.numpy()


def fitted(method, network):
    net, inputs, labels = network
    with torch.no_grad():
        logits = net(inputs).numpy()
    return make_calibrator(method, **OPTIONS).fit(logits[:400], labels[:400])


@pytest.mark.parametrize("method", LAYER_METHODS)
def test_calibrated_model_gives_predict_proba(method, network):
    net, inputs, _ = network
    calibrator = fitted(method, network)
    model = CalibratedModel(net, calibrator)
    test = inputs[400:]
    with torch.no_grad():
        logits, calibrated = net(test), model(test)
    expected = calibrator.predict_proba(logits.numpy())
    assert np.abs(torch.softmax(calibrated, dim=-1).numpy() - expected).max() <= 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated in favour of torch.export
        scripted = torch.jit.script(model)
    exported = torch.export.export(model, (test,)).module()
    for other in (scripted, exported):
        with torch.no_grad():
            assert torch.allclose(other(test), calibrated, rtol=0, atol=1e-12)


def test_the_layer_is_the_papers_map(network):
    """Temperature scaling's layer multiplies by 1/T; Dir-ODIR's is W log p + b; ETS's is a log-probability."""
    net, inputs, _ = network
    with torch.no_grad():
        z = net(inputs[:5]).double()
    ts = fitted("temperature_scaling", network)
    assert torch.equal(calibration_layer(ts)(z), z * ts.inverse_temperature_)
    odir = fitted("dirichlet_odir", network)
    by_hand = torch.log_softmax(z, -1) @ torch.from_numpy(odir.weights_).T + torch.from_numpy(odir.bias_)
    assert torch.allclose(calibration_layer(odir)(z), by_hand, rtol=0, atol=1e-12)
    ets = calibration_layer(fitted("ensemble_temperature_scaling", network))(z)
    assert torch.allclose(torch.logsumexp(ets, dim=-1), torch.zeros(5, dtype=torch.float64), atol=1e-12)


def test_it_moves_with_to_and_computes_in_its_dtype(network, tmp_path):
    net, inputs, _ = network
    calibrator = fitted("vector_scaling_bias", network)
    write_json(tmp_path / "vs.json", calibrator.to_json())
    model = CalibratedModel(copy.deepcopy(net), tmp_path / "vs.json")  # from the calibrator's file, as deployed
    single = CalibratedModel(copy.deepcopy(net), calibrator).to(torch.float32)
    with torch.no_grad():
        output = single(inputs[:10])
        expected = calibrator.predict_proba(net(inputs[:10]).numpy())
    assert output.dtype == torch.float32 and single.calibration.weights.dtype == torch.float32
    assert np.abs(torch.softmax(output, -1).numpy() - expected).max() <= 1e-6
    meta = model.to("meta")
    assert {buffer.device.type for buffer in meta.buffers()} == {"meta"}
    assert meta(inputs[:3].to("meta")).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_it_runs_on_a_gpu(network):
    net, inputs, _ = network
    calibrator = fitted("dirichlet_l2", network)
    model = CalibratedModel(net, calibrator).to("cuda")
    with torch.no_grad():
        output = torch.softmax(model(inputs[400:].to("cuda")), dim=-1).cpu().numpy()
        expected = calibrator.predict_proba(net(inputs[400:]).numpy())
    assert np.abs(output - expected).max() <= 1e-6


@pytest.mark.parametrize("method, why", [
    ("histogram_binning", "histogram_binning cannot be a logit layer: it replaces each class's probability"),
    ("isotonic", "isotonic cannot be a logit layer: it maps each class's probability through a fitted monotone step"),
])
def test_binning_and_isotonic_say_why_they_are_no_layer(method, why, network):
    with pytest.raises(NotALogitLayerError) as error:
        CalibratedModel(network[0], fitted(method, network))
    assert why in str(error.value) and "predict_proba" in str(error.value)


def test_a_regression_recalibrator_or_an_unfitted_calibrator_is_refused(network):
    rng = np.random.default_rng(0)
    from calibrepro.regression.distributions import predictive_from_arrays

    predictive = predictive_from_arrays("gaussian", {"mean": rng.normal(size=50), "std": np.ones(50)})
    recalibrator = make_recalibrator("std_scaling").fit(predictive, rng.normal(size=50))
    with pytest.raises(NotALogitLayerError, match="recalibrates a regressor's predictive distributions"):
        calibration_layer(recalibrator)
    with pytest.raises(NotFittedError):
        calibration_layer(make_calibrator("temperature_scaling"))
