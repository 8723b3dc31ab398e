"""Bootstrap intervals of the regression metrics, with the classification bootstrap's counts and intervals.

Per split, B resamples of the test part's *samples*, seeded by ``uncertainty.seed`` and the cell
(:func:`calibrepro.bootstrap.bootstrap_seed` of ``"regression"``, data set, model, split): for a table
(one row per sample) multinomial counts from :func:`calibrepro.bootstrap.resample_counts`; for a time
series (samples of H > 1 rows: windows, one row per forecast hour, in time order) the circular block
bootstrap of :func:`block_counts` over the windows, in blocks of :data:`BLOCK_HORIZONS` x H consecutive
windows.  Sliding windows share H - 1 hours with each neighbour and the series' errors are
autocorrelated, so windows drawn one by one treat dependent windows as independent: on simulated
windows of 10 hours over an AR(1) series every metric's 95 % interval covered the truth only 0.3-0.5
of the time; blocks of 3 H windows bring it to 0.88-0.98 (benchmarks/MEASUREMENTS.md, regression coverage).  Every
method's metrics on them come from the metrics' resampled form (:meth:`RegressionMetric.value` with
the counts block as weights), written per split by :func:`save_replicates`.

The reproduction report compares a published value with our mean over the splits.  Replicate r of
that mean is the mean over the splits of their replicate r (the splits' resamples are independent,
the splits themselves fixed: the interval is about the test samples, not about retraining); its
interval is :func:`calibrepro.bootstrap.interval` with the metric's method
(``uncertainty.interval``; ``auto``: the metric's own, :func:`calibrepro.bootstrap.interval_method`),
clipped to the metric's range (``Metric.bounds``: MSCE, RMSE, CRPS ... are non-negative, coverage in [0, 1]).
"""

from __future__ import annotations

import io as _io
import os
from typing import Iterable, Mapping

import numpy as np

from calibrepro.bootstrap import Interval, bootstrap_seed, interval, interval_method, resample_counts
from calibrepro.io import atomic_path
from calibrepro.regression.metrics import REGRESSION_METRICS  # also registers them: spec(name, "regression")

__all__ = ["BLOCK_HORIZONS", "block_counts", "load_replicates", "mean_intervals", "resample_weights", "save_replicates"]

#: a time series' block length, in forecast lengths (windows of H hours: blocks of 3 H windows)
BLOCK_HORIZONS = 3
#: block bootstrap draws are made in chunks of about this many entries (bounds memory)
_CHUNK_ENTRIES = 1 << 22


def resample_weights(index: np.ndarray, resamples: int, seed: int, *cell) -> np.ndarray:
    """(resamples, rows) weights of the test rows: counts of their samples (``index``) in each resample.

    Samples of one row each: multinomial counts; samples of H > 1 rows (a time series' windows, in time
    order): :func:`block_counts` with blocks of :data:`BLOCK_HORIZONS` x H windows.
    """
    samples, inverse, rows = np.unique(index, return_inverse=True, return_counts=True)
    seed_sequence = bootstrap_seed(seed, "regression", *cell)
    hours = int(rows.max()) if rows.size else 1
    if hours > 1:
        counts = block_counts(samples.size, resamples, BLOCK_HORIZONS * hours, seed_sequence)
    else:
        counts = resample_counts(samples.size, resamples, seed_sequence)
    return counts[:, inverse.ravel()].astype(np.float64)


def block_counts(n: int, resamples: int, block: int, seed) -> np.ndarray:
    """(resamples, n) counts of the circular block bootstrap (Politis & Romano 1992, "A circular
    block-resampling procedure for stationary data"): per resample ceil(n / block) blocks of ``block``
    consecutive samples from uniform starts, wrapping around at the end, the first n draws kept."""
    if resamples < 1:
        raise ValueError(f"the number of bootstrap resamples must be at least 1, got {resamples}")
    block = max(1, min(block, n))
    blocks = -(-n // block)
    rng = np.random.default_rng(seed)
    counts = np.empty((resamples, n), dtype=np.uint16)
    rows = max(1, _CHUNK_ENTRIES // max(blocks * block, 1))
    for start in range(0, resamples, rows):
        b = min(rows, resamples - start)
        starts = rng.integers(0, n, size=(b, blocks))
        draws = ((starts[:, :, None] + np.arange(block)) % n).reshape(b, -1)[:, :n]
        draws += (np.arange(b) * n)[:, None]
        counts[start : start + b] = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
    return counts


def save_replicates(path: str | os.PathLike, cell: tuple[str, str, int],
                    replicates: Mapping[tuple[str, str], np.ndarray]) -> None:
    """Write one split's replicates, ``(method, metric) -> (B,)`` (atomic; no replicates: B = 0)."""
    dataset, model, split = cell
    arrays = {"dataset": np.asarray(dataset), "model": np.asarray(model), "split": np.asarray(split)}
    arrays.update({f"{method}|{metric}": np.asarray(values, np.float64) for (method, metric), values in replicates.items()})
    buffer = _io.BytesIO()
    np.savez(buffer, **arrays)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def load_replicates(path: str | os.PathLike) -> tuple[tuple[str, str, int], dict[tuple[str, str], np.ndarray]]:
    """``((dataset, model, split), {(method, metric): (B,) replicates})`` of a :func:`save_replicates` file."""
    with np.load(path, allow_pickle=False) as data:
        cell = (str(data["dataset"]), str(data["model"]), int(data["split"]))
        values = {tuple(name.split("|", 1)): data[name] for name in data.files if "|" in name}
    return cell, values


def mean_intervals(files: Iterable[str | os.PathLike], estimates: Mapping[tuple[str, str, str, str], float],
                   level: float, choice: str) -> dict[tuple[str, str, str, str], Interval]:
    """``(dataset, model, method, metric) -> Interval`` of the mean over the splits, from the splits'
    replicate files; ``estimates`` are the means of ``metrics.csv`` (the intervals' point estimates).
    Cells whose files hold no replicates (``uncertainty.enabled: false``), or a replicate that is not finite
    (a metric undefined on some resample, left out of ``metrics.csv`` too), are left out."""
    by_cell: dict[tuple[str, str, str, str], dict[int, np.ndarray]] = {}
    for path in files:
        (dataset, model, split), values = load_replicates(path)
        for (method, metric), replicates in values.items():
            by_cell.setdefault((dataset, model, method, metric), {})[split] = replicates
    out = {}
    for key, splits in by_cell.items():
        if key not in estimates or not all(r.size and np.isfinite(r).all() for r in splits.values()):
            continue
        mean = np.mean([splits[s] for s in sorted(splits)], axis=0)
        bounds = REGRESSION_METRICS[key[3]].bounds
        out[key] = interval(mean, estimates[key], level, interval_method(key[3], choice, "regression"), bounds=bounds)
    return out
