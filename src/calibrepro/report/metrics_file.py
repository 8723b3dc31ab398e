"""The metrics files: write, gather, read ``results/<name>/metrics.csv`` and summarise it per table cell.

This module owns the format of ``results/<name>/evaluations/{dataset}/{model}/seed{seed}.csv`` (one
model's rows) and of ``results/<name>/metrics.csv`` (every model's, concatenated in config order).
Both are tidy: ``dataset,model,method,seed,metric,value`` with ``value`` a fraction. Rows
(dataset/model pairs) and columns (methods) of a table keep the order in which they first appear
in the file, which is the configuration's order.

Multi-seed cells: the mean is ``math.fsum(values) / n`` over the seeds in ascending order (exact
and independent of row order, so equal per-seed values give bit-equal means and exact ties stay
ties); the spread is the sample standard deviation (``ddof=1``), the usual estimate of the
split-to-split spread from a handful of splits; it is undefined (NaN, not printed) for one seed.

The file holds metrics only: how each calibrator's fit ended is in the convergence records beside it
(:mod:`calibrepro.report.convergence_file`).

Bold: within a row, every method whose unrounded value (its mean, with several seeds) equals the
best unrounded value of the row exactly; the best is the maximum for accuracy and the minimum
for every other metric. Values that only agree after rounding are not tied (thesis: 0.393 vs 0.393
in one row, one of them bold).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from calibrepro.io import concatenate_csv, read_tidy_csv, tidy_csv
from calibrepro.report.labels import metric_spec

COLUMNS = ("dataset", "model", "method", "seed", "metric", "value")


class MetricsFileError(ValueError):
    """``metrics.csv`` is missing columns or holds values the report cannot use."""


def format_metrics(rows, where="a metrics file") -> str:
    """CSV text of ``(dataset, model, method, seed, metric, value)`` rows under the header (values by ``repr``;
    NaN or infinity refused, naming ``where``: :func:`calibrepro.io.tidy_csv`)."""
    return tidy_csv(COLUMNS, [(*keys, float(value)) for *keys, value in rows], where)


def concatenate_metrics(inputs, output) -> int:
    """Write ``output``: the per-model files ``inputs`` in order, under one header; the number of rows."""
    return concatenate_csv(inputs, output, COLUMNS, MetricsFileError, "a metrics file")


@dataclass
class Metrics:
    """The content of ``metrics.csv``, indexed for the report."""

    #: (dataset, model) pairs in first-appearance order
    rows: list[tuple[str, str]] = field(default_factory=list)
    #: method keys in first-appearance order
    methods: list[str] = field(default_factory=list)
    #: metric keys in first-appearance order
    metrics: list[str] = field(default_factory=list)
    #: seeds, ascending
    seeds: list[int] = field(default_factory=list)
    #: (dataset, model, method, metric) -> {seed: value}
    values: dict[tuple[str, str, str, str], dict[int, float]] = field(default_factory=dict)

    def seeds_of(self, metric: str) -> list[int]:
        """The seeds that hold at least one value of ``metric``."""
        found = {seed for key, by_seed in self.values.items() if key[3] == metric for seed in by_seed}
        return sorted(found)

    def rows_of(self, metric: str) -> list[tuple[str, str]]:
        present = {key[:2] for key in self.values if key[3] == metric}
        return [row for row in self.rows if row in present]

    def methods_of(self, metric: str) -> list[str]:
        present = {key[2] for key in self.values if key[3] == metric}
        return [method for method in self.methods if method in present]


def read_metrics(path: str | os.PathLike) -> Metrics:
    """Read and check a metrics file; NaN and empty values count as missing."""
    result = Metrics()
    seen_rows: set = set()
    seen_methods: set = set()
    seen_metrics: set = set()
    seeds: set = set()
    for line, record in read_tidy_csv(path, COLUMNS, MetricsFileError):
        dataset, model, method, metric = (record[c].strip() for c in ("dataset", "model", "method", "metric"))
        if not all((dataset, model, method, metric)):
            raise MetricsFileError(f"{path}, line {line}: empty dataset, model, method or metric")
        try:
            seed = int(record["seed"])
        except (TypeError, ValueError):
            raise MetricsFileError(f"{path}, line {line}: seed {record['seed']!r} is not an integer") from None
        text = (record["value"] or "").strip()
        try:
            value = float(text) if text else math.nan
        except ValueError:
            raise MetricsFileError(f"{path}, line {line}: value {text!r} is not a number") from None
        key = (dataset, model, method, metric)
        by_seed = result.values.setdefault(key, {})
        if seed in by_seed:
            raise MetricsFileError(f"{path}, line {line}: a second value for {'/'.join(key)}, seed {seed}")
        if (dataset, model) not in seen_rows:
            seen_rows.add((dataset, model))
            result.rows.append((dataset, model))
        if method not in seen_methods:
            seen_methods.add(method)
            result.methods.append(method)
        if metric not in seen_metrics:
            seen_metrics.add(metric)
            result.metrics.append(metric)
        if math.isnan(value):
            continue
        if math.isinf(value):
            raise MetricsFileError(f"{path}, line {line}: value of {'/'.join(key)} is infinite")
        by_seed[seed] = value
        seeds.add(seed)
    result.seeds = sorted(seeds)
    return result


@dataclass(frozen=True)
class Cell:
    """One table cell: mean (unrounded) and sample std over ``n`` seeds, and whether it is bold."""

    mean: float
    std: float
    n: int
    bold: bool = False


def summarise(values: dict[int, float]) -> tuple[float, float, int]:
    """Mean, sample std (ddof=1; NaN for one value) and count of per-seed values (seeds ascending)."""
    ordered = [values[seed] for seed in sorted(values)]
    n = len(ordered)
    if n == 0:
        return math.nan, math.nan, 0
    mean = math.fsum(ordered) / n
    if n == 1:
        return mean, math.nan, 1
    variance = math.fsum((v - mean) ** 2 for v in ordered) / (n - 1)
    return mean, math.sqrt(variance), n


def best_methods(row: dict[str, float], higher_is_better: bool) -> set[str]:
    """The methods of a row whose unrounded value equals the row's best exactly (NaN ignored)."""
    finite = {method: value for method, value in row.items() if not math.isnan(value)}
    if not finite:
        return set()
    best = max(finite.values()) if higher_is_better else min(finite.values())
    return {method for method, value in finite.items() if value == best}


def table_cells(
    metrics: Metrics, metric: str, seeds: list[int] | None = None
) -> tuple[list[tuple[str, str]], list[str], list[int], dict[tuple[str, str, str], Cell]]:
    """Rows, methods, seeds used and the cells ``(dataset, model, method) -> Cell`` of one metric."""
    if metric not in metrics.metrics:
        raise MetricsFileError(f"metric {metric!r} is not in the metrics file (it has {metrics.metrics})")
    spec = metric_spec(metric)
    used = metrics.seeds_of(metric) if seeds is None else sorted(set(seeds))
    rows = metrics.rows_of(metric)
    methods = metrics.methods_of(metric)
    cells: dict[tuple[str, str, str], Cell] = {}
    for dataset, model in rows:
        stats = {}
        for method in methods:
            by_seed = metrics.values.get((dataset, model, method, metric), {})
            stats[method] = summarise({s: v for s, v in by_seed.items() if s in used})
        bold = best_methods({m: s[0] for m, s in stats.items()}, spec.higher_is_better)
        for method, (mean, std, n) in stats.items():
            cells[(dataset, model, method)] = Cell(mean, std, n, method in bold)
    return rows, methods, used, cells
