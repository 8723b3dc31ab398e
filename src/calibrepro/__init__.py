"""Confidence-calibration experiments: calibrators, metrics, model zoo and report.

The library's public names are listed in :data:`__all__` and importable from here (``from calibrepro import
make_calibrator``); each is imported from its module on first use, so ``import calibrepro`` imports neither
torch nor scikit-learn. README.md, "Use as a library", shows them at work; docs/library.md says more.

* calibrators (:mod:`calibrepro.calibrators`): :data:`CALIBRATORS` (method name -> class), :func:`make_calibrator`,
  :func:`calibrator_from_json`, the classes (scikit-learn estimators: ``fit(logits, labels)``,
  ``predict_proba(logits)``, ``to_json()``), :func:`softmax`;
* metrics and their bootstrap intervals (:mod:`calibrepro.metrics`, :mod:`calibrepro.bootstrap`):
  :data:`METRICS`, :func:`compute_metrics`, :func:`metric_intervals`, :class:`MetricInterval`;
* files (:mod:`calibrepro.io`, :mod:`calibrepro.splits`): :func:`load_logits`, :func:`save_logits`,
  :class:`Logits`, :func:`make_split`, :func:`save_split`, :func:`load_split`;
* deployment (:mod:`calibrepro.deploy`): :class:`CalibratedModel`, :func:`calibration_layer`;
* conformal prediction sets (:mod:`calibrepro.conformal`): :func:`make_conformal`, :class:`ConformalClassifier`
  (``fit(probabilities, labels)``, ``predict(probabilities)`` -> (N, K) bool sets), :func:`conformal_from_json`;
* regression (:mod:`calibrepro.regression`): :data:`RECALIBRATORS`, :func:`make_recalibrator`,
  :func:`recalibrator_from_json`, :func:`predictive_from_arrays`;
* the command line's work on files (:mod:`calibrepro.commands`): :func:`fit_file`, :func:`apply_calibrator`,
  :func:`evaluate_file`.

Importing the package first pins the numerical libraries' kernels (:mod:`calibrepro.determinism`), before
anything of it imports NumPy or torch: the library computes the pipeline's bytes on every machine
(docs/reproducibility.md; ``CALIBREPRO_NATIVE_KERNELS=1`` keeps each library's own kernels).
"""

from __future__ import annotations

import importlib

from calibrepro.determinism import pin_kernels

pin_kernels()

#: public name -> the module that defines it
_PUBLIC = {
    **dict.fromkeys(
        ("CALIBRATORS", "Calibrator", "calibrator_from_json", "make_calibrator", "softmax", "Uncalibrated",
         "HistogramBinning", "IsotonicCalibration", "TemperatureScaling", "VectorScaling", "VectorScalingBias",
         "DirichletL2", "DirichletODIR", "MatrixScalingODIR", "EnsembleTemperatureScaling"),
        "calibrepro.calibrators",
    ),
    **dict.fromkeys(("METRICS", "compute_metrics"), "calibrepro.metrics"),
    **dict.fromkeys(("MetricInterval", "metric_intervals"), "calibrepro.bootstrap"),
    **dict.fromkeys(("Logits", "load_logits", "save_logits"), "calibrepro.io"),
    **dict.fromkeys(("load_split", "make_split", "save_split"), "calibrepro.splits"),
    **dict.fromkeys(("CalibratedModel", "calibration_layer"), "calibrepro.deploy"),
    **dict.fromkeys(("ConformalClassifier", "conformal_from_json", "make_conformal"), "calibrepro.conformal"),
    **dict.fromkeys(("RECALIBRATORS", "make_recalibrator", "recalibrator_from_json"),
                    "calibrepro.regression.recalibration"),
    "predictive_from_arrays": "calibrepro.regression.distributions",
    **dict.fromkeys(("apply_calibrator", "evaluate_file", "fit_file"), "calibrepro.commands"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
