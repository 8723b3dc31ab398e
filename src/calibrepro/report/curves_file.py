"""The training curves (``curves: {every: N}``): ``results/<name>/training_curves.csv``, written and read here.

Tidy rows ``dataset,model,epoch,method,metric,value`` from the training history that a trained network's
logits carry in their metadata (:mod:`calibrepro.training.curves`), models in config order, epochs in
order. ``method`` ``training``: the epoch's mean training ``loss`` (the minimised objective, label
smoothing included) and training ``accuracy``, every epoch; ``uncalibrated`` and ``temperature_scaling``
(evaluated epochs only): on the test half, ``error`` (1 - accuracy), ``nll`` (thesis eq. 10), ``ece`` and
``mce`` (Guo et al. 2017, eqs. 3 and 4; 15 equal-width bins unless ``bins`` says otherwise) and
``overconfidence`` (mean confidence minus accuracy, Guo et al. 2017 sec. 2), all fractions; and the
fitted ``temperature`` T of temperature scaling.
"""

from __future__ import annotations

from typing import Mapping

from calibrepro.io import read_tidy_csv, tidy_csv

COLUMNS = ("dataset", "model", "epoch", "method", "metric", "value")
#: the method of the rows of the training objective
TRAINING = "training"
#: the metrics of an evaluated epoch, in the file's order (``error`` = 1 - the recorded accuracy)
EVALUATED = ("error", "nll", "ece", "mce", "overconfidence")


class CurvesFileError(ValueError):
    """A training-curves file or a logits archive's curves cannot be read; the message names the file."""


def curve_rows(dataset: str, model: str, metadata: Mapping, where: str = "the logits") -> list[tuple]:
    """The rows of one model from its logits' metadata (``training[0].history``); :class:`CurvesFileError` naming
    ``where`` when they hold no curves."""
    training = metadata.get("training") or []
    if len(training) != 1 or not any("curves" in record for record in training[0].get("history", [])):
        raise CurvesFileError(f"{where}: no training curves in its metadata (a source: train entry with curves)")
    rows = []
    for record in training[0]["history"]:
        epoch = int(record["epoch"])
        rows += [(dataset, model, epoch, TRAINING, "loss", float(record["loss"])),
                 (dataset, model, epoch, TRAINING, "accuracy", float(record["train_accuracy"]))]
        for method, values in record.get("curves", {}).items():
            for metric in EVALUATED:
                value = 1.0 - values["accuracy"] if metric == "error" else values[metric]
                rows.append((dataset, model, epoch, method, metric, float(value)))
            if "temperature" in values:
                rows.append((dataset, model, epoch, method, "temperature", float(values["temperature"])))
    return rows


def format_curves(rows, where: str = "training_curves.csv") -> str:
    """CSV text of the rows under the header (floats by ``repr``: equal values, equal bytes)."""
    return tidy_csv(COLUMNS, rows, where)


def read_curves(path) -> dict[tuple[str, str], dict[tuple[str, str], dict[int, float]]]:
    """``(dataset, model) -> (method, metric) -> {epoch: value}``, models in the file's order."""
    curves: dict = {}
    for line, row in read_tidy_csv(path, COLUMNS, CurvesFileError):
        try:
            epoch, value = int(row["epoch"]), float(row["value"])
        except ValueError:
            raise CurvesFileError(f"{path}, line {line}: epoch {row['epoch']!r} or value {row['value']!r} "
                                  "is not a number") from None
        model = curves.setdefault((row["dataset"], row["model"]), {})
        model.setdefault((row["method"], row["metric"]), {})[epoch] = value
    if not curves:
        raise CurvesFileError(f"{path}: no rows")
    return curves
