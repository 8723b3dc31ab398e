"""The fitted parameters of a run: every calibrator's numbers and how its fit ended, written and read here.

This module owns the format of ``results/<name>/parameters.csv`` (the classification calibrators) and
``results/<name>/regression/parameters.csv`` (the regression recalibrators): tidy, one row per number of
a fit, ``dataset,model,method,seed,parameter,value`` (the regression file has ``split`` for ``seed``, as its
``metrics.csv``), fits in the run's order (data sets, models, methods, seeds as configured). A fit's
numbers, in this order:

* its calibrator's own, ``parameters()`` of its class, each defined in that method's docstring: temperature
  scaling's ``temperature`` and ``inverse_temperature``; vector scaling's per-class weights (and biases)
  as ``weight_mean``, ``weight_min``, ``weight_max`` (``bias_...``); ETS's ``temperature`` and simplex
  weights ``weight_temperature_scaled``, ``weight_uncalibrated``, ``weight_uniform``; histogram binning's
  ``bins`` and ``empty_bins``; isotonic regression's thresholds per class ``thresholds_mean``, ``_min``,
  ``_max``; the regression recalibrators' ``knots`` (isotonic, one- and two-sided) and ``scale`` (std
  scaling);
* from its convergence record (:meth:`calibrepro.calibrators.base.FittedState.convergence`, the rows of
  ``convergence.csv``): the regularisation strengths ``lambda`` and ``mu`` that the full-matrix methods'
  cross-validation chose (Dir-L2 has no ``mu``: its L2 penalty weighs the intercept with ``lambda``) and
  ``search_capped`` (1 when that search stopped at its cap with its best score at the grid's edge);
  ``converged`` (1 or 0) and ``iterations`` where the fit iterates.

Integers are written as integers and floats with ``repr`` (read back, the same doubles), so equal fits
give equal bytes. :mod:`calibrepro.report.parameter_tables` prints the file as tables.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from calibrepro.io import read_tidy_csv

#: the columns of each task's file
COLUMNS = {
    "classification": ("dataset", "model", "method", "seed", "parameter", "value"),
    "regression": ("dataset", "model", "method", "split", "parameter", "value"),
}
#: the convergence record's numbers, in the order they follow the calibrator's own
RECORD = ("lambda", "mu", "search_capped", "converged", "iterations")
#: the yes/no numbers (1 or 0)
FLAGS = ("search_capped", "converged")


class ParametersFileError(ValueError):
    """A parameters file is missing columns or holds values that are no numbers."""


def fit_rows(dataset: str, model: str, method: str, seed: int, calibrator) -> list[tuple]:
    """The rows of one fitted calibrator (or regression recalibrator): its own numbers, then its record's."""
    numbers = dict(calibrator.parameters())
    record = calibrator.convergence()
    has_mu = "mus" in calibrator.get_params()
    for name in RECORD:
        value = record.get(name)
        if value is None or (name == "mu" and not has_mu):
            continue
        numbers[name] = int(bool(value)) if name in FLAGS else int(value) if name == "iterations" else float(value)
    return [(dataset, model, method, int(seed), name, value) for name, value in numbers.items()]


@dataclass
class Parameters:
    """A parameters file read back: its task and its rows ``(dataset, model, method, seed, parameter, value)``,
    in the file's order; values are ints or floats as written."""

    task: str
    rows: list[tuple[str, str, str, int, str, int | float]] = field(default_factory=list)


def _number(text: str) -> int | float:
    """An integer as written (``12``), else a float (``repr`` always writes a point or an exponent)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_parameters(path: str | os.PathLike) -> Parameters:
    """Read and check a parameters file of either task (told apart by its ``seed`` or ``split`` column)."""
    try:
        with open(path, encoding="utf-8") as handle:
            header = tuple(handle.readline().strip().split(","))
    except FileNotFoundError:
        raise ParametersFileError(f"{path}: no such file") from None
    task = next((name for name, columns in COLUMNS.items() if header == columns), "classification")
    columns = COLUMNS[task]
    result = Parameters(task)
    for line, record in read_tidy_csv(path, columns, ParametersFileError):
        try:
            seed, value = int(record[columns[3]]), _number(record["value"])
            if not math.isfinite(value):
                raise ValueError
        except (TypeError, ValueError):
            raise ParametersFileError(
                f"{path}, line {line}: {columns[3]} {record[columns[3]]!r} or value {record['value']!r} is no "
                "(finite) number"
            ) from None
        result.rows.append((record["dataset"], record["model"], record["method"], seed, record["parameter"], value))
    return result
