"""A calibrated model for deployment: a network and a fitted scaling calibrator as one ``torch.nn.Module``.

:class:`CalibratedModel` wraps a ``torch.nn.Module`` that outputs logits (N, K) and a fitted calibrator of
:mod:`calibrepro.calibrators` (or its JSON); its ``forward`` returns **calibrated logits**: ``softmax`` of them
is the calibrator's ``predict_proba`` of the network's logits. :func:`calibration_layer` is the calibrator alone,
a module from logits to calibrated logits:

================================  =================================================================
``uncalibrated``                  ``z`` itself (``nn.Identity``)
``temperature_scaling``           ``a z`` (``a = 1/T``)
``vector_scaling`` (``_bias``)    ``w * z`` (``+ b``)
``matrix_scaling_odir``           ``z W^T + b``
``dirichlet_l2``, ``_odir``       ``log_softmax(z) W^T + b``
``ensemble_temperature_scaling``  ``log(w_1 softmax(a z) + w_2 softmax(z) + w_3 / K)``: log-probabilities, the
                                  only honest output of a mixture of probabilities (no map of the logits
                                  alone gives it); they are logits too (softmax returns the mixture)
================================  =================================================================

Histogram binning and isotonic regression are no such layer (:class:`NotALogitLayerError` says why): they map
each class's probability through a fitted step function one class at a time and renormalise, so their
output is piecewise constant in the logits (no gradient) and holds exact zeros (no finite logit).

The fitted parameters are buffers of the layer, float64 as fitted: the layer computes in its buffers' dtype
(the network's float32 logits are widened exactly, as ``predict_proba`` widens them) and returns that dtype;
``softmax`` of its output equals ``predict_proba`` to about 1e-15 (``uncalibrated``: the logits unchanged, whose
float32 softmax is its ``predict_proba``).  ``.to(device)`` moves them with the network; ``.to(torch.float32)``
(or ``.float()``) computes in float32, for devices without float64.  Both modules are scriptable
(``torch.jit.script``, when the network is) and exportable (``torch.export.export``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

#: the methods :func:`calibration_layer` turns into a layer
LAYER_METHODS = ("uncalibrated", "temperature_scaling", "vector_scaling", "vector_scaling_bias", "dirichlet_l2",
                 "dirichlet_odir", "matrix_scaling_odir", "ensemble_temperature_scaling")


class NotALogitLayerError(ValueError):
    """A calibrator that no layer on logits computes (binning, isotonic regression, a regression recalibrator)."""


def _buffer(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.float64))


class TemperatureLayer(nn.Module):
    """Temperature scaling (Guo et al. 2017, sec. 4.2): ``a z`` with the fitted inverse temperature ``a = 1/T``."""

    def __init__(self, inverse_temperature: float):
        super().__init__()
        self.register_buffer("inverse_temperature", _buffer(inverse_temperature))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.to(self.inverse_temperature.dtype) * self.inverse_temperature


class VectorLayer(nn.Module):
    """Vector scaling (Guo et al. 2017, sec. 4.2): ``w * z + b`` per class (``b = 0`` without bias)."""

    def __init__(self, weights, bias):
        super().__init__()
        self.register_buffer("weights", _buffer(weights))
        self.register_buffer("bias", _buffer(bias))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.to(self.weights.dtype) * self.weights + self.bias


class MatrixLayer(nn.Module):
    """``x W^T + b`` of the Kull et al. (2019) methods: ``x = log_softmax(z)`` (Dirichlet calibration, their eq. 2)
    or ``x = z`` (matrix scaling)."""

    def __init__(self, weights, bias, log_probabilities: bool):
        super().__init__()
        self.register_buffer("weights", _buffer(weights))
        self.register_buffer("bias", _buffer(bias))
        self.log_probabilities = log_probabilities

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        x = logits.to(self.weights.dtype)
        if self.log_probabilities:
            x = torch.log_softmax(x, dim=-1)
        return x @ self.weights.T + self.bias


class EnsembleTemperatureLayer(nn.Module):
    """ETS (Zhang et al. 2020, sec. 3.1): the log of ``w_1 softmax(a z) + w_2 softmax(z) + w_3 / K``, computed
    as a log-sum-exp of the members' log-probabilities plus ``log w`` (a weight of 0 contributes nothing)."""

    def __init__(self, inverse_temperature: float, weights, classes: int):
        super().__init__()
        with np.errstate(divide="ignore"):
            log_weights = np.log(np.asarray(weights, dtype=np.float64))
        self.register_buffer("inverse_temperature", _buffer(inverse_temperature))
        self.register_buffer("log_weights", _buffer(log_weights))
        self.log_uniform = -math.log(classes)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        z = logits.to(self.inverse_temperature.dtype)
        members = torch.stack([
            torch.log_softmax(z * self.inverse_temperature, dim=-1) + self.log_weights[0],
            torch.log_softmax(z, dim=-1) + self.log_weights[1],
            torch.full_like(z, self.log_uniform) + self.log_weights[2],
        ])
        return torch.logsumexp(members, dim=0)


_WHY_NOT = {
    "histogram_binning": "it replaces each class's probability by its bin's calibration frequency, one class at a "
    "time, and renormalises: a step function of the logits (no gradient) whose probabilities can be exactly 0 (no "
    "finite logit)",
    "isotonic": "it maps each class's probability through a fitted monotone step function, one class at a time, and "
    "renormalises: piecewise constant in the logits (no gradient), with probabilities of exactly 0 (no finite logit)",
}


def calibration_layer(calibrator) -> nn.Module:
    """The module from logits to calibrated logits of a fitted calibrator (module docstring; a calibrator object,
    its ``to_json()`` dict or the path of its JSON file). Raises :class:`NotALogitLayerError` for the others."""
    calibrator = _calibrator(calibrator)
    method = getattr(calibrator, "method", type(calibrator).__name__)
    if method not in LAYER_METHODS or not hasattr(calibrator, "predict_proba"):
        why = (_WHY_NOT.get(method, "it is not a map of a classifier's logits") if hasattr(calibrator, "predict_proba")
               else "it recalibrates a regressor's predictive distributions, not a classifier's logits")
        raise NotALogitLayerError(
            f"{method} cannot be a logit layer: {why}. Apply it with its predict_proba to the network's logits "
            f"instead, or deploy a scaling method ({', '.join(LAYER_METHODS[1:])})"
        )
    calibrator._check_fitted()
    if method == "uncalibrated":
        return nn.Identity()
    if method == "temperature_scaling":
        return TemperatureLayer(calibrator.inverse_temperature_)
    if method in ("vector_scaling", "vector_scaling_bias"):
        bias = calibrator.bias_ if method == "vector_scaling_bias" else np.zeros(calibrator.n_classes_)
        return VectorLayer(calibrator.weights_, bias)
    if method == "ensemble_temperature_scaling":
        return EnsembleTemperatureLayer(calibrator.inverse_temperature_, calibrator.weights_, calibrator.n_classes_)
    return MatrixLayer(calibrator.weights_, calibrator.bias_, method != "matrix_scaling_odir")


def _calibrator(calibrator):
    from calibrepro.calibrators import calibrator_from_json

    if isinstance(calibrator, (str, Path)):
        from calibrepro.io import read_json

        calibrator = read_json(calibrator)
    return calibrator_from_json(calibrator) if isinstance(calibrator, dict) else calibrator


class CalibratedModel(nn.Module):
    """``model`` followed by the calibration layer of ``calibrator`` (:func:`calibration_layer`): ``forward`` returns
    calibrated logits (ETS: log-probabilities), ``softmax`` of which equals ``calibrator.predict_proba(model(x))``.

    ``calibrator``: a fitted calibrator, its ``to_json()`` dict or its JSON file (``calibrepro fit``, or the
    pipeline's ``results/<name>/calibrators/.../seed<seed>.json``).
    """

    def __init__(self, model: nn.Module, calibrator):
        super().__init__()
        self.model = model
        self.calibration = calibration_layer(calibrator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.calibration(self.model(x))
