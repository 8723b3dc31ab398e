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
JSON's ``method``) to its class, which carries its display names and reference.  A new family is
a new module plus one line in :data:`_REGISTERED`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from calibrepro.suggestions import closest_name

#: the registered calibrators, in the thesis's column order: method name -> ``module:Class`` in this
#: package.  The one place a method name is declared: each class receives its ``method`` from here
#: (``Calibrator.__init_subclass__``).  A class is imported when first asked for, so reading the
#: names (config validation, report labels: every start of the workflow) imports neither
#: scikit-learn nor torch (about 1.3 s).
_REGISTERED = {
    "uncalibrated": "base:Uncalibrated",
    "histogram_binning": "binning:HistogramBinning",
    "isotonic": "isotonic:IsotonicCalibration",
    "temperature_scaling": "scaling:TemperatureScaling",
    "vector_scaling": "scaling:VectorScaling",
    "vector_scaling_bias": "scaling:VectorScalingBias",
    "dirichlet_l2": "dirichlet:DirichletL2",  # beyond the thesis (issue 13)
    "dirichlet_odir": "dirichlet:DirichletODIR",
    "matrix_scaling_odir": "dirichlet:MatrixScalingODIR",
    "ensemble_temperature_scaling": "ensemble_scaling:EnsembleTemperatureScaling",
}

#: the methods whose fits take seconds to hours (full-matrix, cross-validated grid; issue 18): the
#: workflow fits each in a job of its own, so that a killed fit keeps the other methods' files
OWN_JOB = ("dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir")

#: what this package exports from its modules (imported on first access, as the registry's classes)
_EXPORTS = {
    **{location.split(":")[1]: location for location in _REGISTERED.values()},
    "Calibrator": "base:Calibrator",
    "softmax": "base:softmax",
}


def _load(location: str):
    module, name = location.split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


class _Registry(Mapping):
    """Method name -> calibrator class, importing each class's module on first access."""

    def __getitem__(self, method):
        return _load(_REGISTERED[method])

    def __iter__(self) -> Iterator[str]:
        return iter(_REGISTERED)

    def __len__(self) -> int:
        return len(_REGISTERED)


CALIBRATORS: Mapping[str, type] = _Registry()


def module_of(method: str) -> str:
    """The module that defines a registered method's class (what a process must import to fit it)."""
    return f"{__name__}.{_REGISTERED[method].split(':')[0]}"


def method_of(cls: type) -> str:
    """The registered method name of a calibrator class (``""`` for an unregistered base class)."""
    location = f"{cls.__module__.removeprefix(__name__ + '.')}:{cls.__qualname__}"
    return next((method for method, where in _REGISTERED.items() if where == location), "")


def __getattr__(name: str):
    if name in _EXPORTS:
        return _load(_EXPORTS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CALIBRATORS", "OWN_JOB", "UnknownCalibratorError", "calibrator_from_json", "make_calibrator", *_EXPORTS]


class UnknownCalibratorError(ValueError):
    """A method name that no registered calibrator has."""


def _class_of(method):
    try:
        return CALIBRATORS[method]
    except (KeyError, TypeError):
        close = closest_name(method, CALIBRATORS)
        raise UnknownCalibratorError(
            f"unknown calibration method {method!r}"
            + (f" (did you mean {close!r}?)" if close else "") + f"; known: {', '.join(CALIBRATORS)}"
        ) from None


def make_calibrator(method: str, **options):
    """A new, unfitted calibrator for ``method`` (a key of :data:`CALIBRATORS`).

    ``options`` are hyperparameters shared by the whole run (e.g. ``bins=15``); each calibrator
    takes those of its ``__init__`` parameters (scikit-learn's ``get_params`` names) and ignores
    the rest, so one call site serves every method.
    """
    cls = _class_of(method)
    accepted = cls._get_param_names()
    return cls(**{key: value for key, value in options.items() if key in accepted})


def calibrator_from_json(data: dict):
    """Rebuild a fitted calibrator from :meth:`Calibrator.to_json` output (dispatch on ``method``)."""
    return _class_of(data.get("method")).from_json(data)
