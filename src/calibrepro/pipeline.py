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
from calibrepro.metrics import compute_metrics, reliability_bins
from calibrepro.splits import load_split, make_split, save_split

METRICS_COLUMNS = ("dataset", "model", "method", "seed", "metric", "value")


class SplitMismatchError(ValueError):
    """A model's labels differ from those its data set's split was drawn from."""


def split_step(logits_path, calibration_fraction: float, seed: int, output) -> None:
    """Draw the calibration/test split of a data set from the labels of one of its models."""
    labels = load_logits(logits_path).labels
    calibration, test = make_split(labels, calibration_fraction, seed)
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


def fit_step(logits_path, split_path, method: str, bins: int, output, options: Mapping | None = None) -> None:
    """Fit one calibrator on the calibration half and save its fitted parameters as JSON.

    ``options`` are the method's hyperparameters from the config's ``calibrator_options``
    (e.g. the regularisation grid of ``dirichlet_odir``); only the calibration half is passed on.
    """
    (logits, labels), _ = _halves(logits_path, split_path)
    calibrator = make_calibrator(method, **{**(options or {}), "bins": bins}).fit(logits, labels)
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
    write_json(
        reliability_output,
        {"dataset": dataset, "model": model, "seed": seed, "bins": bins, "methods": reliability},
    )


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
