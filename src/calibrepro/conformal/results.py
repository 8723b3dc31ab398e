"""The conformal results files: one model's rows and ``results/<name>/conformal.csv``, every model's.

Tidy: ``dataset,model,method,score,alpha,metric,value`` (values by ``repr``, fractions). ``method`` is
the calibrator whose test-half probabilities the sets are built on; ``metric`` is one of
:mod:`calibrepro.conformal.metrics` (``coverage``, ``size``, ``singleton``, ``empty``, ``covgap``,
``size_share_a-b``, ``coverage_size_a-b``, ``threshold``): the mean over the repeats, and with the suffixes
``_low`` and ``_high`` the ends of its 95 % t-interval; ``repeats`` and ``n_calibration`` say how many
repeats and conformal calibration samples there were, ``bound_low`` and ``bound_high`` the finite-sample
range of the expected coverage (:func:`calibrepro.conformal.metrics.coverage_bounds`). The order of the
rows is the configuration's (models, calibrators, scores, alphas).

The temperature sweep of a model (its figure) is kept beside: ``temperature,score,alpha,metric,value``.
"""

from __future__ import annotations

from collections import OrderedDict

from calibrepro.conformal.scores import ConformalError
from calibrepro.io import concatenate_csv, read_tidy_csv, write_csv

COLUMNS = ("dataset", "model", "method", "score", "alpha", "metric", "value")
SWEEP_COLUMNS = ("temperature", "score", "alpha", "metric", "value")


def write_conformal_part(path, rows) -> None:
    """Write one model's ``(dataset, model, method, score, alpha, metric, value)`` rows."""
    write_csv(path, COLUMNS, [(*keys, float(alpha), metric, float(value)) for *keys, alpha, metric, value in rows])


def concatenate_conformal(inputs, output) -> int:
    """``conformal.csv``: the per-model files ``inputs`` in order; the number of rows."""
    return concatenate_csv(inputs, output, COLUMNS, ConformalError, "a conformal results file")


def read_conformal(path) -> "OrderedDict[tuple[str, str, str, str, float], dict[str, float]]":
    """``(dataset, model, method, score, alpha) -> {metric: value}`` of ``conformal.csv``, in file order."""
    cells: OrderedDict = OrderedDict()
    for line, row in read_tidy_csv(path, COLUMNS, ConformalError):
        try:
            key = (row["dataset"], row["model"], row["method"], row["score"], float(row["alpha"]))
            cells.setdefault(key, {})[row["metric"]] = float(row["value"])
        except ValueError:
            raise ConformalError(f"{path}, line {line}: alpha {row['alpha']!r} or value {row['value']!r} is no "
                                 "number") from None
    return cells


def write_sweep(path, rows) -> None:
    """Write a model's temperature sweep: ``(temperature, score, alpha, metric, value)`` rows."""
    write_csv(path, SWEEP_COLUMNS, rows)


def read_sweep(path) -> list[tuple[float, str, float, str, float]]:
    return [(float(row["temperature"]), row["score"], float(row["alpha"]), row["metric"], float(row["value"]))
            for _, row in read_tidy_csv(path, SWEEP_COLUMNS, ConformalError)]
