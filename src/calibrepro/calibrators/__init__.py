"""Post-hoc calibrators: fit on calibration-half logits, predict probabilities.

The five methods of the thesis (section 4, appendix columns) plus the identity:

=========================  ==================================================================
``uncalibrated``           softmax of the logits (float32, as the thesis's torch code)
``histogram_binning``      one-vs-rest equal-width binning (Zadrozny & Elkan 2001; Guo 2017)
``isotonic``               one-vs-rest isotonic regression (Zadrozny & Elkan 2002; scikit-learn)
``temperature_scaling``    ``softmax(a * z)``, one a = 1/T > 0 (Guo et al. 2017)
``vector_scaling``         ``softmax(w * z)``, per-class w (Guo et al. 2017)
``vector_scaling_bias``    ``softmax(w * z + b)`` (Guo et al. 2017; Kull et al. 2019)
=========================  ==================================================================

Beyond the thesis (:mod:`.dirichlet`, :mod:`.ensemble_scaling`):

================================  ===========================================================
``dirichlet_l2``                  ``softmax(W log p + b)``, L2 (Dir-L2; Kull et al. 2019)
``dirichlet_odir``                ``softmax(W log p + b)``, ODIR (Dir-ODIR; Kull et al. 2019)
``matrix_scaling_odir``           ``softmax(W z + b)``, ODIR (MS-ODIR; Kull et al. 2019)
``ensemble_temperature_scaling``  TS/uncalibrated/uniform mixture (ETS; Zhang et al. 2020)
================================  ===========================================================

One module per family: :mod:`.base` (interface, softmax, checks, the identity), :mod:`.binning`,
:mod:`.isotonic`, :mod:`.scaling` (NLL objective and the L-BFGS driver).  This module is the
registry: :data:`CALIBRATORS` maps each method name (the config's ``calibrators:`` entries, the
JSON's ``method``) to its class; the class carries its display names and reference, so a method
is declared in exactly one place.  A new family is a new module plus one line in
:data:`_CLASSES`.
"""

from __future__ import annotations

from calibrepro.calibrators.base import Calibrator, Uncalibrated, softmax
from calibrepro.calibrators.binning import HistogramBinning
from calibrepro.calibrators.dirichlet import DirichletL2, DirichletODIR, MatrixScalingODIR
from calibrepro.calibrators.ensemble_scaling import EnsembleTemperatureScaling
from calibrepro.calibrators.isotonic import IsotonicCalibration
from calibrepro.calibrators.scaling import TemperatureScaling, VectorScaling, VectorScalingBias

__all__ = [
    "CALIBRATORS",
    "Calibrator",
    "DirichletL2",
    "DirichletODIR",
    "EnsembleTemperatureScaling",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScalingODIR",
    "TemperatureScaling",
    "Uncalibrated",
    "UnknownCalibratorError",
    "VectorScaling",
    "VectorScalingBias",
    "calibrator_from_json",
    "make_calibrator",
    "softmax",
]

#: the registered calibrators, in the thesis's column order
_CLASSES: tuple[type[Calibrator], ...] = (
    Uncalibrated,
    HistogramBinning,
    IsotonicCalibration,
    TemperatureScaling,
    VectorScaling,
    VectorScalingBias,
    DirichletL2,  # beyond the thesis (issue 13)
    DirichletODIR,
    MatrixScalingODIR,
    EnsembleTemperatureScaling,
)
CALIBRATORS: dict[str, type[Calibrator]] = {cls.method: cls for cls in _CLASSES}


class UnknownCalibratorError(ValueError):
    """A method name that no registered calibrator has."""


def _class_of(method) -> type[Calibrator]:
    try:
        return CALIBRATORS[method]
    except (KeyError, TypeError):
        raise UnknownCalibratorError(
            f"unknown calibration method {method!r}; known: {', '.join(CALIBRATORS)}"
        ) from None


def make_calibrator(method: str, **options) -> Calibrator:
    """A new, unfitted calibrator for ``method`` (a key of :data:`CALIBRATORS`).

    ``options`` are hyperparameters shared by the whole run (e.g. ``bins=15``); each calibrator
    takes those of its ``__init__`` parameters (scikit-learn's ``get_params`` names) and ignores
    the rest, so one call site serves every method.
    """
    cls = _class_of(method)
    accepted = cls._get_param_names()
    return cls(**{key: value for key, value in options.items() if key in accepted})


def calibrator_from_json(data: dict) -> Calibrator:
    """Rebuild a fitted calibrator from :meth:`Calibrator.to_json` output (dispatch on ``method``)."""
    return _class_of(data.get("method")).from_json(data)
