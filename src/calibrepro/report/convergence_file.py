"""The convergence records: how every calibrator's fit ended, written, gathered and read here.

This module owns the format of ``results/<name>/convergence/{dataset}/{model}/seed{seed}.csv``
(one model's records, written by its evaluation) and of ``results/<name>/convergence.csv`` (every
model's, concatenated in config order). One row per fitted calibrator behind a table cell:
``dataset,model,method,seed,converged,iterations,lambda,mu,search_capped``, where

* ``converged``: 1 when the fit met its stopping criterion, 0 when it stopped before (its JSON's
  ``converged: false``; for the cross-validated methods, any fit along the search included);
  empty for a method that does not iterate (binning, isotonic, the identity);
* ``iterations``: the optimiser's iterations (``n_iter`` of the fit's diagnostics; the refit's
  for the cross-validated methods), empty where the calibrator records none;
* ``lambda``, ``mu``: the regularisation strengths of the fit (the grid point its
  cross-validation chose), empty for the methods without;
* ``search_capped``: 1 when the regularisation search stopped at its cap with its best score at
  the edge of the grid (the best strength may lie beyond it), 0 when it did not, empty where the
  calibrator does not say.

A shifted data set's rows (``datasets.<key>.calibrate_on``) are those of the calibrators it was
tested with, fitted on the set it is calibrated on. The tables mark the cells of a fit that did
not converge and of a capped search (:mod:`calibrepro.report.tables`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from calibrepro.io import concatenate_csv, read_tidy_csv, tidy_csv

COLUMNS = ("dataset", "model", "method", "seed", "converged", "iterations", "lambda", "mu", "search_capped")


class ConvergenceFileError(ValueError):
    """A convergence file is missing columns or holds values the report cannot use."""


def _flag(value) -> str:
    """1, 0 or empty (unknown) for a yes/no field."""
    return "" if value is None else str(int(bool(value)))


def record_row(dataset: str, model: str, method: str, seed: int, record: Mapping) -> tuple:
    """One row from a calibrator's record (:meth:`calibrepro.calibrators.base.FittedState.convergence`)."""
    iterations, strengths = record.get("iterations"), (record.get("lambda"), record.get("mu"))
    return (dataset, model, method, seed, _flag(record.get("converged")), "" if iterations is None else int(iterations),
            *("" if value is None else float(value) for value in strengths), _flag(record.get("search_capped")))


def format_convergence(rows) -> str:
    """CSV text of rows of :func:`record_row` under the header (floats by ``repr``)."""
    return tidy_csv(COLUMNS, rows)


def concatenate_convergence(inputs, output) -> int:
    """Write ``output``: the per-model files ``inputs`` in order, under one header; the number of rows."""
    return concatenate_csv(inputs, output, COLUMNS, ConvergenceFileError, "a convergence file")


@dataclass
class Convergence:
    """The fits a table marks: (dataset, model, method, seed) of each."""

    #: fits that stopped before their convergence criterion
    not_converged: set[tuple[str, str, str, int]] = field(default_factory=set)
    #: fits whose regularisation search stopped at its cap with the best score at the grid's edge
    search_capped: set[tuple[str, str, str, int]] = field(default_factory=set)


def read_convergence(path: str | os.PathLike) -> Convergence:
    """Read and check a convergence file."""
    result = Convergence()
    for line, record in read_tidy_csv(path, COLUMNS, ConvergenceFileError):
        try:
            key = (record["dataset"], record["model"], record["method"], int(record["seed"]))
        except (TypeError, ValueError):
            raise ConvergenceFileError(f"{path}, line {line}: seed {record['seed']!r} is not an integer") from None
        for column, marked in (("converged", result.not_converged), ("search_capped", result.search_capped)):
            value = (record[column] or "").strip()
            if value not in ("", "0", "1"):
                raise ConvergenceFileError(f"{path}, line {line}: {column} is {value!r}; expected 1, 0 or empty")
            if value == ("0" if column == "converged" else "1"):
                marked.add(key)
    return result
