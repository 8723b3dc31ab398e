"""The steps every task shares: split a data set, fit calibrators, evaluate them, gather the rows.

``workflow/rules/calibrate.smk``, ``evaluate.smk`` and ``shift.smk`` call them for classification,
``workflow/rules/regression.smk`` calls :func:`evaluate_step` for regression. The fit and evaluate
steps know no task: a task (:mod:`calibrepro.tasks`: classification, regression) says how its
halves are read, how a calibrator is made, fitted and applied, and how its metrics and reliability
data are computed and written; the rules name the task. Each step reads its inputs through the
module that owns their format (splits :mod:`calibrepro.splits`, calibrator JSON
:mod:`calibrepro.calibrators`, ``metrics.csv`` :mod:`calibrepro.report.metrics_file`, the
convergence records :mod:`calibrepro.report.convergence_file`) and writes its outputs atomically.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping, Sequence

from calibrepro.io import load_labels, write_csv, write_json
from calibrepro.report.convergence_file import COLUMNS as CONVERGENCE_COLUMNS
from calibrepro.report.convergence_file import concatenate_convergence, record_row
from calibrepro.report.metrics_file import concatenate_metrics
from calibrepro.steps.run import step_log
from calibrepro.tasks import Task, fit_calibrator, fitted_json, read_calibrator, task_of
from calibrepro.workers import offload


def split_step(logits_path, calibration_fraction: float, seed: int, output, *, dataset: str, log=None) -> None:
    """Draw the calibration/test split of ``dataset`` from the labels of one of its models."""
    import numpy as np

    from calibrepro.io import load_logits
    from calibrepro.splits import make_split, pool_rows, save_split

    with step_log(log) as logger:
        labels = load_labels(logits_path)
        pool = pool_rows(load_logits(logits_path, rows=np.arange(1)).metadata, len(labels))
        drawn = labels[: len(labels) - len(pool)]  # the calibration pool's rows come last and stay out
        calibration, test = make_split(drawn, calibration_fraction, seed, where=f"data set {dataset!r}")
        save_split(output, calibration, test, labels, pool)
        logger.info(
            "split of %d samples (labels of %s), seed %d: %d calibration, %d test, %d in the calibration pool",
            len(drawn), logits_path, seed, len(calibration), len(test), len(pool),
        )


@offload
def fit_step(
    data_path,
    split_path,
    outputs: Mapping[str, str | Path],
    *,
    task: str | Task = "classification",
    bins: int = 15,
    options: Mapping[str, Mapping] | None = None,
    threads: int = 1,
    log=None,
) -> None:
    """Fit every calibrator named in ``outputs`` (method -> JSON path) on the calibration half of ``task``.

    The model's outputs (``data_path``: its logits, for classification) are read once for all methods: at
    K = 1000 loading and checking them costs about as much as one fit. ``options`` maps a method to its
    hyperparameters from the config's ``calibrator_options`` (e.g. the regularisation grid of
    ``dirichlet_odir``); only the calibration half is passed on, so cross-validation inside a fit never
    sees the test half. ``threads`` goes to the calibrators that use threads (the folds of the
    full-matrix methods' cross-validation; their results do not depend on it). A fit that did not
    converge is logged as a warning (its JSON says so too).
    """
    with step_log(log) as logger:
        task = task_of(task)
        [half] = task.halves(data_path, split_path, "calibration")
        for method, output in outputs.items():
            start = time.perf_counter()
            calibrator = fit_calibrator(task, method, half, options, bins=bins, threads=threads)
            write_json(output, fitted_json(calibrator, half))
            seconds = time.perf_counter() - start
            logger.info("%s: fitted on %d samples in %.2f s -> %s", method, len(half.targets), seconds, output)
            diagnostics = getattr(calibrator, "diagnostics_", {})
            if diagnostics.get("converged") is False:
                logger.warning(
                    "%s: NOT CONVERGED (refit: %s; cross-validation: see 'converged' per grid point in %s); "
                    "raise calibrator_options.%s.max_iter or the regularisation",
                    method, diagnostics.get("stop_reason"), output, method,
                )
            if diagnostics.get("search_capped"):
                logger.warning(
                    "%s: the regularisation search hit its cap, the best CV score still at its edge (see "
                    "cross_validation.search in %s); raise calibrator_options.%s.max_extensions or widen the grid",
                    method, output, method,
                )


def load_calibrator(path, method: str, task: str | Task = "classification"):
    """The fitted calibrator of ``task`` stored in ``path``, which must hold ``method``
    (:class:`calibrepro.tasks.CalibratorFileError`)."""
    return read_calibrator(path, task, method, fix="delete the file and run the workflow again to refit it")


@offload
def evaluate_step(
    data_path,
    split_path,
    metrics_output,
    reliability_output,
    *,
    task: str | Task = "classification",
    calibrators: Mapping[str, str | Path | None],
    metrics: Sequence[str],
    dataset: str,
    model: str,
    seed: int,
    bins: int = 15,
    options: Mapping[str, Mapping] | None = None,
    calibrated_on=None,
    convergence_output=None,
    replicates_output=None,
    resamples: int = 0,
    bootstrap_seed: int = 0,
    log=None,
) -> None:
    """Compute every metric of every calibrator of ``task`` on the test half.

    ``calibrators``: method -> its fitted JSON (:func:`fit_step`), or None: fitted here on the calibration
    half with its ``options`` (quick fits: the regression recalibrators, whose fitted state the
    reliability file records). Writes the model's rows of the task's ``metrics.csv`` (``metrics_output``;
    ``seed`` is the cell's last column: the split's seed, or a regression split's index) and the
    reliability data of every method (``reliability_output``). With ``calibrated_on`` (the logits of
    another data set, whose calibration half fitted the calibrators; ``split_path`` is then None): on
    every sample of the shifted set ``dataset``, the test under distribution shift of Ovadia et al.
    (2019, "Can you trust your model's uncertainty?"). With ``convergence_output``: how each fit ended
    (the calibrators' ``convergence()``, :mod:`calibrepro.report.convergence_file`), which the tables mark. With ``replicates_output``: every
    metric on ``resamples`` bootstrap resamples of the test half too (the metrics' resampled form,
    seeded by ``bootstrap_seed`` and the cell), where the task computes them in its evaluation (regression).
    """
    with step_log(log) as logger:
        task = task_of(task)
        test, calibration = _evaluation_halves(task, data_path, split_path, calibrators, calibrated_on)
        cell = (dataset, model, seed)
        resampled_here = replicates_output is not None and resamples > 0
        weights = task.resample_weights(test, resamples, bootstrap_seed, cell) if resampled_here else None
        rows, reliability, replicates, records = [], {}, {}, []
        for method, path in calibrators.items():
            start = time.perf_counter()
            if path is None:
                calibrator = fit_calibrator(task, method, calibration, options, bins=bins)
            else:
                calibrator = load_calibrator(path, method, task)
            values, resampled, reliability[method] = _evaluate(task, calibrator, test, metrics, bins, weights)
            rows += [(dataset, model, method, seed, metric, values[metric]) for metric in metrics]
            if resampled is not None:
                replicates.update({(method, metric): resampled[metric] for metric in metrics})
            if convergence_output is not None:
                records.append(record_row(dataset, model, method, seed, calibrator.convergence()))
            if getattr(calibrator, "diagnostics_", {}).get("converged") is False:
                logger.warning("%s: its fit did NOT converge (see its JSON); the tables mark its cells", method)
            summary = ", ".join(f"{metric} {values[metric]:.6g}" for metric in metrics)
            logger.info("%s: %s (%.2f s)", method, summary, time.perf_counter() - start)
        task.write_evaluation(metrics_output, rows)
        task.write_reliability(reliability_output, test, reliability, dataset=dataset, model=model, seed=seed,
                               bins=bins)
        written = [metrics_output, reliability_output]
        if convergence_output is not None:
            write_csv(convergence_output, CONVERGENCE_COLUMNS, records)
            written.append(convergence_output)
        if replicates_output is not None:  # no resamples: a file without replicates
            task.write_replicates(replicates_output, cell, replicates)
            written.append(replicates_output)
        logger.info("%d test rows, %d bootstrap resamples; wrote %s", len(test.targets), resamples if resampled_here else 0,
                    ", ".join(map(str, written)))


def _evaluation_halves(task: Task, data_path, split_path, calibrators: Mapping, calibrated_on):
    """The half an evaluation tests on, and the calibration half where a calibrator is fitted here (else None)."""
    here = [method for method, path in calibrators.items() if path is None]
    if calibrated_on is not None:
        if here:
            raise ValueError(f"{', '.join(here)}: a shifted data set is evaluated with fitted calibrator files")
        return task.shifted(data_path, calibrated_on), None
    if here:  # both halves from one read
        calibration, test = task.halves(data_path, split_path, "calibration", "test")
        return test, calibration
    [test] = task.halves(data_path, split_path, "test")
    return test, None


def _evaluate(task: Task, calibrator, test, metrics: Sequence[str], bins: int, weights):
    """One calibrator on ``test``: its metric values, their bootstrap replicates on the resample
    ``weights`` (None without them) and its reliability data."""
    predicted = task.predict(calibrator, test)
    values = task.metrics(predicted, test, metrics, bins=bins)
    resampled = None if weights is None else task.metrics(predicted, test, metrics, bins=bins, weights=weights)
    return values, resampled, task.reliability(calibrator, predicted, test, bins=bins)


def gather_metrics_step(inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Concatenate per-model evaluation CSVs, in the given (config) order, into ``metrics.csv``."""
    with step_log(log) as logger:
        rows = concatenate_metrics(inputs, output)
        logger.info("%d rows from %d evaluation files -> %s", rows, len(inputs), output)


def gather_convergence_step(inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Concatenate per-model convergence records, in the given (config) order, into ``convergence.csv``."""
    with step_log(log) as logger:
        rows = concatenate_convergence(inputs, output)
        logger.info("%d fits from %d convergence files -> %s", rows, len(inputs), output)
