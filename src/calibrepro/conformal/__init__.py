"""Conformal prediction sets beside calibration (issue 39): scores, the split-conformal classifier, set metrics,
the test half's conformal splits, the results files and the papers' findings as verdicts.

Public names: :class:`ConformalClassifier`, :func:`make_conformal`, :func:`conformal_from_json`, :data:`SCORES`,
:class:`ConformalError`. docs/library.md, "Prediction sets (conformal)", shows them at work.
"""

from __future__ import annotations

import importlib

#: public name -> the module of this package that defines it, imported on first use: the classifier's module
#: imports scikit-learn (about a second), which the scores' names (the command line's help) do not need
_PUBLIC = {
    **dict.fromkeys(("ConformalClassifier", "conformal_from_json", "make_conformal"), "predictors"),
    **dict.fromkeys(("SCORES", "ConformalError"), "scores"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
