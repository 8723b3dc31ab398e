"""Conformal prediction sets beside calibration (issue 39): scores, the split-conformal classifier, set metrics,
the test half's conformal splits, the results files and the papers' findings as verdicts.

Public names: :class:`ConformalClassifier`, :func:`make_conformal`, :func:`conformal_from_json`, :data:`SCORES`,
:class:`ConformalError`. docs/library.md, "Prediction sets (conformal)", shows them at work.
"""

from calibrepro.conformal.predictors import ConformalClassifier, conformal_from_json, make_conformal
from calibrepro.conformal.scores import SCORES, ConformalError

__all__ = ["SCORES", "ConformalClassifier", "ConformalError", "conformal_from_json", "make_conformal"]
