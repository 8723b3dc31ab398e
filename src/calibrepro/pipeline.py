"""The pipeline's steps on files: what each Snakemake rule calls.

Each function reads its inputs, calls the library (splits, calibrators, metrics) and writes
its outputs atomically. They hold no state, so Snakemake may run several in parallel threads.
"""

from __future__ import annotations

import csv
import io as _io
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from calibrepro.calibrators import calibrator_from_json, make_calibrator
from calibrepro.io import load_logits, read_json, write_json, write_text
from calibrepro.metrics import compute_metrics
from calibrepro.reliability import reliability_bins, write_reliability
from calibrepro.splits import load_split, make_split, save_split

METRICS_COLUMNS = ("dataset", "model", "method", "seed", "metric", "value")


class SplitMismatchError(ValueError):
    """A model's labels differ from those its data set's split was drawn from."""


def split_step(logits_path, calibration_fraction: float, seed: int, output) -> None:
    """Draw the calibration/test split of a data set from the labels of one of its models."""
    labels = load_logits(logits_path).labels
    where = f"data set {Path(logits_path).parent.name!r}"  # results/logits/{dataset}/{model}.npz
    calibration, test = make_split(labels, calibration_fraction, seed, where=where)
    save_split(output, calibration, test, labels)


def _halves(logits_path, split_path):
    """Load a model's logits and cut them into the calibration and test halves of the split."""
    archive = load_logits(logits_path)
    calibration, test, split_labels = load_split(split_path)
    if not np.array_equal(archive.labels, split_labels):
        raise SplitMismatchError(
            f"{logits_path}: its labels differ from those the split {split_path} was drawn from; "
            "all models of a data set must be evaluated on the same samples in the same order"
        )
    logits, labels = archive.logits, archive.labels
    return (logits[calibration], labels[calibration]), (logits[test], labels[test])


def fit_step(logits_path, split_path, method: str, bins: int, output) -> None:
    """Fit one calibrator on the calibration half and save its fitted parameters as JSON."""
    (logits, labels), _ = _halves(logits_path, split_path)
    calibrator = make_calibrator(method, bins=bins).fit(logits, labels)
    write_json(output, {**calibrator.to_json(), "calibration_samples": int(len(labels))})


def evaluate_step(
    logits_path,
    split_path,
    calibrators: Mapping[str, str | Path],
    *,
    metrics: Sequence[str],
    bins: int,
    dataset: str,
    model: str,
    seed: int,
    metrics_output,
    reliability_output,
) -> None:
    """Compute every metric of every calibrator on the test half; save rows and reliability bins."""
    _, (logits, labels) = _halves(logits_path, split_path)
    rows, reliability = [], {}
    for method, path in calibrators.items():
        probabilities = calibrator_from_json(read_json(path)).predict_proba(logits)
        values = compute_metrics(probabilities, labels, metrics, bins=bins)
        rows += [(dataset, model, method, seed, metric, values[metric]) for metric in metrics]
        reliability[method] = reliability_bins(probabilities, labels, bins=bins)
    write_text(metrics_output, _metrics_csv(rows))
    write_reliability(reliability_output, dataset=dataset, model=model, seed=seed, bins=bins, methods=reliability)


def _metrics_csv(rows: Iterable[tuple]) -> str:
    """Tidy CSV text; floats written with repr (shortest exact round trip), so files are byte-stable."""
    buffer = _io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(METRICS_COLUMNS)
    for *keys, value in rows:
        writer.writerow([*keys, repr(float(value))])
    return buffer.getvalue()


def gather_metrics_step(inputs: Sequence[str | Path], output) -> None:
    """Concatenate per-model metric files, in the given (config) order, into one tidy CSV."""
    header = ",".join(METRICS_COLUMNS) + "\n"
    parts = [header]
    for path in inputs:
        text = Path(path).read_text(encoding="utf-8")
        if not text.startswith(header):
            raise ValueError(f"{path}: not a metrics file (expected header {header.strip()!r})")
        parts.append(text[len(header):])
    write_text(output, "".join(parts))


# ------------------------------------------------------------------------------------------------
# Uncertainty (issue 12): bootstrap intervals, paired comparisons, ranks, calibration-set-size study
# ------------------------------------------------------------------------------------------------
from calibrepro.report.uncertainty_files import COMPARISON_COLUMNS, INTERVAL_COLUMNS  # noqa: E402


def _csv_text(columns: Sequence[str], rows: Iterable[Sequence]) -> str:
    """Tidy CSV text; floats written with repr (exact round trip), so files are byte-stable."""
    buffer = _io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([repr(float(v)) if isinstance(v, (float, np.floating)) else v for v in row])
    return buffer.getvalue()


def _read_estimates(evaluation_csv) -> dict[tuple[str, str], float]:
    """``{(method, metric): value}`` of one model's evaluation file (the rows of metrics.csv)."""
    with open(evaluation_csv, newline="", encoding="utf-8") as handle:
        return {(r["method"], r["metric"]): float(r["value"]) for r in csv.DictReader(handle)}


def bootstrap_step(
    logits_path,
    split_path,
    calibrators: Mapping[str, str | Path],
    evaluation_csv,
    *,
    metrics: Sequence[str],
    bins: int,
    dataset: str,
    model: str,
    seed: int,
    resamples: int,
    level: float,
    bootstrap_seed: int,
    intervals_output,
    comparisons_output,
) -> None:
    """Bootstrap intervals of every metric of every calibrator, and paired comparisons with the best.

    All methods share the same ``resamples`` resamples of the test half (calibrators stay fitted);
    the estimates are the model's rows of ``metrics.csv`` (``evaluation_csv``), so they are equal to
    them by construction. A row's best is the exact best estimate (first in method order on ties).
    """
    from calibrepro.bootstrap import (
        bootstrap_replicates, bootstrap_seed as cell_seed, paired_differences, percentile_interval, resample_counts,
    )
    from calibrepro.report.labels import metric_spec
    from calibrepro.report.metrics_file import best_methods

    from tqdm import tqdm

    _, (logits, labels) = _halves(logits_path, split_path)
    estimates = _read_estimates(evaluation_csv)
    counts = resample_counts(len(labels), resamples, cell_seed(bootstrap_seed, dataset, model, seed))
    methods = list(calibrators)
    progress = tqdm(methods, desc=f"bootstrap {dataset}/{model}", unit="method", disable=None)
    replicates = bootstrap_replicates(
        ((m, calibrator_from_json(read_json(calibrators[m])).predict_proba(logits)) for m in progress),
        labels, metrics, counts, bins=bins,
    )
    intervals, comparisons = [], []
    for metric in metrics:
        values = {m: estimates[(m, metric)] for m in methods}
        for m in methods:
            low, high = percentile_interval(replicates[m][metric], level)
            intervals.append((dataset, model, m, seed, metric, values[m], low, high, float(level), resamples))
        tied_best = best_methods(values, metric_spec(metric).higher_is_better)
        best = next(m for m in methods if m in tied_best)
        paired = paired_differences({m: replicates[m][metric] for m in methods}, values, best, level)
        for m in methods:
            difference, low, high = paired[m]
            comparisons.append((dataset, model, seed, metric, m, best, difference, low, high, float(level),
                                resamples, int(low <= 0.0 <= high)))
    write_text(intervals_output, _csv_text(INTERVAL_COLUMNS, intervals))
    write_text(comparisons_output, _csv_text(COMPARISON_COLUMNS, comparisons))


def gather_table_step(inputs: Sequence[str | Path], output) -> None:
    """Concatenate tidy CSV files with one common header, in the given (config) order."""
    texts = [Path(path).read_text(encoding="utf-8") for path in inputs]
    if not texts:
        raise ValueError(f"nothing to gather into {output}")
    header = texts[0].split("\n", 1)[0] + "\n"
    for path, text in zip(inputs, texts):
        if not text.startswith(header):
            raise ValueError(f"{path}: its header differs from {inputs[0]}'s ({header.strip()!r})")
    write_text(output, header + "".join(text[len(header):] for text in texts))


def rank_step(metrics_csv, metric: str, md_output, figures: Mapping[str, tuple], *, alpha: float, language: str) -> None:
    """Mean ranks, Friedman test and Nemenyi CD of ``metric`` per data set: a table and CD diagrams."""
    from calibrepro.report.cd_diagram import write_rank_report

    write_rank_report(metrics_csv, metric, md_output, dict(figures), alpha=alpha, language=language)


def size_study_step(
    logits_path,
    split_path,
    *,
    methods: Sequence[str],
    sizes: Sequence[int],
    seeds: Sequence[int],
    metrics: Sequence[str],
    bins: int,
    dataset: str,
    model: str,
    output,
) -> None:
    """Fit every calibrator on nested subsets of the calibration half; metrics on the test half."""
    from tqdm import tqdm

    from calibrepro.size_study import COLUMNS, run_size_study

    calibration, test = _halves(logits_path, split_path)
    with tqdm(total=len(seeds) * len(sizes) * len(methods), desc=f"size study {dataset}/{model}",
              unit="fit", disable=None) as progress:
        rows = [
            (dataset, model, method, size, seed, metric, value)
            for method, size, seed, metric, value in run_size_study(
                calibration, test, methods=methods, sizes=sizes, seeds=seeds, metrics=metrics, bins=bins,
                progress=progress,
            )
        ]
    write_text(output, _csv_text(COLUMNS, rows))


def size_study_report_step(study_csv, metric: str, md_output, figures: Mapping[str, tuple], *, language: str) -> None:
    """The size study's table and one figure per data set."""
    from calibrepro.report.size_study import write_size_study_report

    write_size_study_report(study_csv, metric, md_output, dict(figures), language=language)
