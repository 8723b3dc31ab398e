"""``results/<name>/intervals.csv`` and ``results/<name>/comparisons.csv``: written, gathered and read here.

Both are tidy: one row per dataset/model/method/seed/metric. The report uses them for interval
cells and tie marks in the tables and for the "inside our interval" column of the reproduction
report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from calibrepro.io import concatenate_csv, read_tidy_csv, write_csv

#: ``interval``: the bootstrap interval method of the row (percentile, basic, bca, debiased);
#: ``centre``: the estimate the interval belongs to (the plug-in ``estimate`` for the percentile
#: interval, the bias-corrected one for the others; always inside ``[low, high]``)
INTERVAL_COLUMNS = ("dataset", "model", "method", "seed", "metric", "estimate", "centre", "low", "high", "interval",
                    "level", "B")
COMPARISON_COLUMNS = ("dataset", "model", "seed", "metric", "method", "best", "difference", "low", "high",
                      "interval", "level", "B", "tied")


class UncertaintyFileError(ValueError):
    """An intervals or comparisons file is missing columns or holds unusable values."""


def write_intervals(path, rows) -> None:
    """One model's interval rows (:data:`INTERVAL_COLUMNS`), floats by ``repr``."""
    write_csv(path, INTERVAL_COLUMNS, rows)


def write_comparisons(path, rows) -> None:
    """One model's paired-comparison rows (:data:`COMPARISON_COLUMNS`), floats by ``repr``."""
    write_csv(path, COMPARISON_COLUMNS, rows)


def concatenate(kind: str, inputs, output) -> int:
    """Gather per-model ``kind`` files ("intervals" or "comparisons") into ``output``; the number of rows."""
    columns = {"intervals": INTERVAL_COLUMNS, "comparisons": COMPARISON_COLUMNS}[kind]
    return concatenate_csv(inputs, output, columns, UncertaintyFileError, f"an {kind} file")


@dataclass
class Intervals:
    """(dataset, model, method, metric) -> {seed: (estimate, low, high, centre)}, with the level and B.

    ``methods``: metric -> the interval methods of its rows (one, unless files were mixed).
    """

    cells: dict = field(default_factory=dict)
    methods: dict = field(default_factory=dict)
    level: float = float("nan")
    resamples: int = 0


@dataclass
class Comparisons:
    """(dataset, model, method, metric) -> {seed: tied with the row's best}, with the level and B."""

    tied: dict = field(default_factory=dict)
    level: float = float("nan")
    resamples: int = 0


def _rows(path, columns):
    for line, row in read_tidy_csv(path, columns, UncertaintyFileError):
        try:
            row["seed"], row["B"], row["level"] = int(row["seed"]), int(row["B"]), float(row["level"])
        except ValueError:
            raise UncertaintyFileError(f"{path}, line {line}: seed, B or level is not a number") from None
        yield line, row


def read_intervals(path: str | os.PathLike) -> Intervals:
    """Read an intervals file (every row must share one level and B)."""
    out = Intervals()
    for line, row in _rows(path, INTERVAL_COLUMNS):
        key = (row["dataset"], row["model"], row["method"], row["metric"])
        try:
            value = (float(row["estimate"]), float(row["low"]), float(row["high"]), float(row["centre"]))
        except ValueError:
            raise UncertaintyFileError(f"{path}, line {line}: estimate, centre, low or high is not a number") from None
        out.cells.setdefault(key, {})[row["seed"]] = value
        out.methods.setdefault(row["metric"], set()).add(row["interval"])
        out.level, out.resamples = row["level"], row["B"]
    return out


def read_comparisons(path: str | os.PathLike) -> Comparisons:
    """Read a comparisons file."""
    out = Comparisons()
    for _, row in _rows(path, COMPARISON_COLUMNS):
        key = (row["dataset"], row["model"], row["method"], row["metric"])
        out.tied.setdefault(key, {})[row["seed"]] = row["tied"].strip() == "1"
        out.level, out.resamples = row["level"], row["B"]
    return out
