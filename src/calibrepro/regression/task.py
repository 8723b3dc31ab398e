"""The regression task on the pipeline's seam (:mod:`calibrepro.tasks`): predictive distributions and targets.

A model's outputs are its predictions file (:mod:`.predictions`), which holds both halves already
(the regressor's split is drawn before training: the split file is not read again). The calibrators
are the recalibrators of :mod:`.recalibration`; the calibrated outputs of a half are the per-sample
terms of the recalibrated predictive at the half's targets (:func:`.metrics.sample_terms`: PIT values,
squared errors, densities, CRPS, variances), from which every metric of :data:`.metrics.REGRESSION_METRICS`
and its resampled form are computed, and the reliability data: observed vs expected confidence, one- and
two-sided (:func:`.metrics.accuracy_curve`), and per output (forecast hour) the RMSE and the mean
predicted standard deviation, beside the recalibrator's fitted state.
"""

from __future__ import annotations

import logging
import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from calibrepro.io import read_json, write_csv, write_json
from calibrepro.regression.distributions import Predictive, predictive_from_arrays
from calibrepro.regression.metrics import LEVELS, REGRESSION_METRICS, SampleTerms, accuracy_curve, sample_terms
from calibrepro.regression.predictions import load_predictions
from calibrepro.regression.recalibration import make_recalibrator, recalibrator_from_json
from calibrepro.regression.report import COLUMNS
from calibrepro.regression.uncertainty import resample_weights, save_replicates
from calibrepro.tasks import Task

_logger = logging.getLogger(__name__)


class RegressionHalf(NamedTuple):
    """One part of a predictions file: the model's predictive, the targets, and each row's sample and output."""

    inputs: Predictive
    targets: np.ndarray
    index: np.ndarray
    output: np.ndarray


class RegressionTask(Task):
    """Predictive distributions and real targets (module docstring)."""

    name = "regression"

    def halves(self, data_path, split_path, *names: str) -> list[RegressionHalf]:
        """The named parts of the predictions file ``data_path`` (``split_path`` is not read: None)."""
        predictions = load_predictions(data_path)
        parts = {"calibration": predictions.calibration, "test": predictions.test}
        return [
            RegressionHalf(predictive_from_arrays(predictions.family, parts[name].params), parts[name].y,
                           parts[name].index, parts[name].output)
            for name in names
        ]

    def make_calibrator(self, method: str, **options):
        return make_recalibrator(method, **options)

    def calibrator_from_json(self, data: dict):
        return recalibrator_from_json(data)

    def predict(self, calibrator, half: RegressionHalf) -> SampleTerms:
        """The recalibrated predictive's per-sample terms at the half's targets (all the metrics read)."""
        return sample_terms(calibrator.transform(half.inputs), half.targets)

    def metrics(self, predicted: SampleTerms, half: RegressionHalf, names: Sequence[str], *, bins: int,
                weights=None) -> dict:
        """Each metric's :meth:`~.metrics.RegressionMetric.value` (``bins`` is not used)."""
        unknown = [name for name in names if name not in REGRESSION_METRICS]
        if unknown:
            raise ValueError(f"unknown regression metric(s) {', '.join(unknown)}; known: {', '.join(REGRESSION_METRICS)}")
        return {name: REGRESSION_METRICS[name].value(predicted, weights) for name in names}

    def resample_weights(self, half: RegressionHalf, resamples: int, seed: int, cell: tuple) -> np.ndarray:
        """Counts of the half's samples (a time series' windows are drawn whole: :mod:`.uncertainty`)."""
        return resample_weights(half.index, resamples, seed, *cell)

    def reliability(self, calibrator, predicted: SampleTerms, half: RegressionHalf, *, bins: int) -> dict:
        std = np.sqrt(predicted.variance)
        outputs = np.unique(half.output)
        return {
            "one_sided": accuracy_curve(predicted.pit, LEVELS, "one").tolist(),
            "two_sided": accuracy_curve(predicted.pit, LEVELS, "two").tolist(),
            "rmse": [_finite(np.sqrt(predicted.squared_error[half.output == o].mean())) for o in outputs],
            "std": [_finite(std[half.output == o].mean()) for o in outputs],
            "recalibrator": calibrator.to_json(),
        }

    def write_evaluation(self, path, rows: Sequence[tuple]) -> None:
        """The finite rows; a metric that is not finite (a moment that does not exist, no density) is left
        out and said in one log line per data set, model, split and method, with the reason
        (:attr:`~.metrics.RegressionMetric.undefined`), never written as NaN."""
        undefined: dict[tuple, list[str]] = {}
        for dataset, model, method, split, metric, value in rows:
            if not math.isfinite(value):
                spec = REGRESSION_METRICS[metric]
                undefined.setdefault((dataset, model, split, method), []).append(f"{metric} ({spec.undefined})")
        for (dataset, model, split, method), what in undefined.items():
            _logger.warning("%s/%s/split %d/%s: not written, not finite: %s", dataset, model, split, method,
                            "; ".join(what))
        write_csv(path, COLUMNS, [row for row in rows if math.isfinite(row[-1])])

    def write_reliability(self, path, half: RegressionHalf, methods: Mapping[str, dict], *, dataset: str, model: str,
                          seed: int, bins: int) -> None:
        """The curves file the regression figures draw (:mod:`.figures`) and the claims read (:mod:`.claims`):
        its cell (data set, model, split), levels, outputs (1-based), methods."""
        outputs = np.unique(half.output) + 1
        write_json(path, {"dataset": dataset, "model": model, "split": seed, "levels": LEVELS.tolist(),
                          "outputs": outputs.tolist(), "order": list(methods), "methods": dict(methods)})

    def write_replicates(self, path, cell: tuple, replicates: Mapping[tuple[str, str], np.ndarray]) -> None:
        save_replicates(path, cell, replicates)


def fitted_recalibrators(path) -> list[tuple]:
    """The recalibrators a curves file (:meth:`RegressionTask.write_reliability`) records, rebuilt:
    ``(dataset, model, method, split, recalibrator)`` in the file's method order."""
    curves = read_json(path)
    try:
        return [(curves["dataset"], curves["model"], method, int(curves["split"]),
                 recalibrator_from_json(curves["methods"][method]["recalibrator"])) for method in curves["order"]]
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a curves file of the regression evaluation ({type(error).__name__}: {error}); "
                         "delete it and run the workflow again") from None


def _finite(value) -> float | None:
    """A per-output mean for the curves file; None (JSON null, a gap in the figure) where it is not finite."""
    value = float(value)
    return value if math.isfinite(value) else None
