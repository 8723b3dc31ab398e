"""The pipeline's steps on files: the one door from the Snakemake rules to the library.

Every rule calls exactly one ``*_step`` function of this module (the logits rule goes through the
command line, ``calibrepro logits``, in a process of its own). Each step reads its inputs through
the module that owns their format, does the work, writes its outputs atomically, and records what
it did in its ``log`` file (the rule's ``log:``, under ``results/logs/``). Steps hold no state, so
Snakemake may run several in parallel threads of its own process; each step's log receives only
the records of its own thread.  The compute steps are decorated with
:func:`calibrepro.workers.offload`: in a local run they execute in worker processes (the threads
only wait), elsewhere in the caller.

File formats and their owners: logits archives :mod:`calibrepro.io`, splits
:mod:`calibrepro.splits`, calibrator JSON :mod:`calibrepro.calibrators`, per-model evaluation CSVs
and ``metrics.csv`` :mod:`calibrepro.report.metrics_file`, reliability JSON
:mod:`calibrepro.reliability`, bootstrap intervals and paired comparisons
:mod:`calibrepro.report.uncertainty_files`, the size study :mod:`calibrepro.size_study`.

The fit and evaluate steps serve every task: a task (:mod:`calibrepro.tasks`: classification, regression)
says how its halves are read, how a calibrator is made, fitted and applied, and how its metrics and
reliability data are computed and written; the rules name the task.

The Snakefile imports this module to parse the workflow (on every start, dry runs and cluster jobs
included), so the heavy libraries (torch, scikit-learn, matplotlib: about 4 s) are imported by the
steps that use them, not here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np

from calibrepro.io import load_labels, write_json, write_text
from calibrepro.report.metrics_file import NOT_CONVERGED, concatenate_metrics
from calibrepro.tasks import CalibratorFileError, Task, fit_calibrator, fitted_json, read_calibrator, task_of
from calibrepro.workers import offload

_logger = logging.getLogger("calibrepro")


class _ThisThread(logging.Filter):
    """Pass the records emitted by the thread that created the filter."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.thread


@contextmanager
def step_log(path: str | os.PathLike | None) -> Iterator[logging.Logger]:
    """Send the records of the ``calibrepro`` loggers from this thread to ``path`` while the block runs.

    An exception leaving the block is recorded as the log's last line (``error: <message>``), so the
    log ends with the step's own error; the workflow's error summary prints that line.
    """
    if path is None:
        yield _logger
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(_ThisThread())
    previous_level = _logger.level
    _logger.addHandler(handler)
    if _logger.getEffectiveLevel() > logging.INFO:
        _logger.setLevel(logging.INFO)
    start = time.perf_counter()
    try:
        yield _logger
        _logger.info("done in %.2f s", time.perf_counter() - start)
    except Exception as error:
        _logger.error("error: %s", error)
        raise
    finally:
        _logger.removeHandler(handler)
        _logger.setLevel(previous_level)
        handler.close()


def download_step(download, output, *, mirrors: Mapping[str, str], timeout: float, retries: int, log=None) -> None:
    """Fetch one pinned file (``calibrepro.zoo.Download``) and verify its checksum."""
    from calibrepro.download import fetch  # urllib and gdown: only where something is downloaded

    with step_log(log) as logger:
        logger.info("fetching %s -> %s", download.url, output)
        fetch(download, output, mirrors=mirrors, timeout=timeout, retries=retries)
        logger.info("ok: %s (%s)", output, download.checksum)


def logits_request_step(request: str, output, *, log=None) -> None:
    """Write one logits job's request (JSON text, ``calibrepro.zoo.LogitsRequest``) for ``calibrepro logits``."""
    with step_log(log) as logger:
        write_text(output, request + "\n")
        logger.info("request of the logits job written to %s", output)


def split_step(logits_path, calibration_fraction: float, seed: int, output, *, dataset: str, log=None) -> None:
    """Draw the calibration/test split of ``dataset`` from the labels of one of its models."""
    from calibrepro.splits import make_split, save_split

    with step_log(log) as logger:
        labels = load_labels(logits_path)
        calibration, test = make_split(labels, calibration_fraction, seed, where=f"data set {dataset!r}")
        save_split(output, calibration, test, labels)
        logger.info(
            "split of %d samples (labels of %s), seed %d: %d calibration, %d test",
            len(labels), logits_path, seed, len(calibration), len(test),
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


def logits_shape(logits_path, dataset: str) -> tuple[int, int] | None:
    """(samples, classes) of a logits archive, else of the data set's published test set, else None."""
    from calibrepro.datasets import CIFAR, IMAGENET_NUM_CLASSES, IMAGENET_NUM_VAL
    from calibrepro.io import archive_members

    if os.path.exists(logits_path):
        members = archive_members(logits_path)
        if "logits" in members:
            return tuple(members["logits"][0])
        with np.load(logits_path, allow_pickle=False) as archive:  # compressed: no header offset
            return archive["logits"].shape
    if dataset in CIFAR:
        return CIFAR[dataset].num_test, CIFAR[dataset].num_classes
    return (IMAGENET_NUM_VAL, IMAGENET_NUM_CLASSES) if dataset == "imagenet" else None


def expected_fit_seconds(
    shape, method: str, options: Mapping, *, calibration_fraction: float, worst_case: bool = False
) -> float | None:
    """CPU seconds the cost model expects for one fit job (``None`` when the shape is unknown).

    :func:`calibrepro.calibrators.dirichlet.estimated_seconds` for the method's expected fits
    (cross-validation along its path with the early stop, and the refit; ``worst_case``: every grid
    point) on the calibration half of logits of ``shape`` (:func:`logits_shape`).
    """
    from calibrepro.calibrators import make_calibrator
    from calibrepro.calibrators.dirichlet import estimated_seconds

    if shape is None:
        return None
    n, k = shape
    calibrator = make_calibrator(method, **options)
    fits = calibrator.planned_fits() if worst_case else calibrator.expected_fits()
    return estimated_seconds(round(n * calibration_fraction), k, fits)


def fit_minutes(shape, method: str, options: Mapping, *, calibration_fraction: float, threads: int) -> int:
    """Wall-clock minutes to ask for one fit job of a full-matrix method (a Slurm job's runtime).

    Three times :func:`expected_fit_seconds` with every grid point fitted (a job that runs out of
    time loses its work), spread over ``threads`` (at most one per CV fold), plus 5 minutes to
    start; 120 minutes when the shape is unknown.
    """
    import math

    seconds = expected_fit_seconds(
        shape, method, options, calibration_fraction=calibration_fraction, worst_case=True
    )
    if seconds is None:
        return 120
    folds = int(options.get("folds", 5))
    return 5 + math.ceil(3 * seconds / max(1, min(threads, folds)) / 60)


def fit_plan_summary(jobs: Sequence[tuple], *, calibration_fraction: float, threads: int) -> str:
    """One line: the full-matrix fit jobs of a run and the CPU time the cost model expects for them.

    ``jobs`` holds ``(shape, method, options)`` per job (shape ``None`` when unknown); jobs whose
    estimate exceeds their ``cpu_flop_budget`` are counted apart: on the CPU they fail at once.
    """
    from calibrepro.calibrators import make_calibrator
    from calibrepro.calibrators.dirichlet import _CPU_FLOPS

    seconds, refused, unknown = 0.0, 0, 0
    for shape, method, options in jobs:
        estimate = expected_fit_seconds(shape, method, options, calibration_fraction=calibration_fraction)
        if estimate is None:
            unknown += 1
        elif estimate * _CPU_FLOPS > make_calibrator(method, **options).cpu_flop_budget:
            refused += 1
        else:
            seconds += estimate
    if unknown == len(jobs):
        expected = "time unknown until their logits exist"
    elif seconds < 60:
        expected = "expected under a CPU-minute"
    else:
        hours = seconds / 3600
        expected = "expected about " + (
            f"{hours:.1f} CPU-hours" if hours >= 1 else f"{seconds / 60:.0f} CPU-minutes"
        )
    return (
        f"calibrepro: {len(jobs)} full-matrix fit jobs (Dir-L2, Dir-ODIR, MS-ODIR): {expected}"
        + f" ({threads} threads per job; cost model calibrepro.calibrators.dirichlet.estimated_flops, with the"
        " path's early stop after the 3 strongest lambdas)"
        + (f"; {refused} above their cpu_flop_budget: they fail on the CPU (GPU needed)" if refused else "")
        + (f"; {unknown} on logits of unknown shape not counted" if unknown else "")
    )


def load_calibrator(path, method: str, task: str | Task = "classification"):
    """The fitted calibrator of ``task`` stored in ``path``, which must hold ``method`` (:class:`CalibratorFileError`)."""
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
    (2019, "Can you trust your model's uncertainty?"). With ``replicates_output``: every metric on
    ``resamples`` bootstrap resamples of the test half too (the metrics' resampled form, seeded by
    ``bootstrap_seed`` and the cell), where the task computes them in its evaluation (regression).
    """
    with step_log(log) as logger:
        task = task_of(task)
        here = [method for method, path in calibrators.items() if path is None]
        if calibrated_on is not None:
            if here:
                raise ValueError(f"{', '.join(here)}: a shifted data set is evaluated with fitted calibrator files")
            test, calibration = task.shifted(data_path, calibrated_on), None
        elif here:  # both halves from one read
            calibration, test = task.halves(data_path, split_path, "calibration", "test")
        else:
            [test], calibration = task.halves(data_path, split_path, "test"), None
        cell = (dataset, model, seed)
        resampled_here = replicates_output is not None and resamples > 0
        weights = task.resample_weights(test, resamples, bootstrap_seed, cell) if resampled_here else None
        rows, reliability, replicates = [], {}, {}
        for method, path in calibrators.items():
            start = time.perf_counter()
            if path is None:
                calibrator = fit_calibrator(task, method, calibration, options, bins=bins)
            else:
                calibrator = load_calibrator(path, method, task)
            predicted = task.predict(calibrator, test)
            values = task.metrics(predicted, test, metrics, bins=bins)
            rows += [(dataset, model, method, seed, metric, values[metric]) for metric in metrics]
            if getattr(calibrator, "diagnostics_", {}).get("converged") is False:  # marked in the tables
                rows.append((dataset, model, method, seed, NOT_CONVERGED, 1.0))
                logger.warning("%s: its fit did NOT converge (see its JSON); the tables mark its cells", method)
            if weights is not None:
                resampled = task.metrics(predicted, test, metrics, bins=bins, weights=weights)
                replicates.update({(method, metric): resampled[metric] for metric in metrics})
            reliability[method] = task.reliability(calibrator, predicted, test, bins=bins)
            summary = ", ".join(f"{metric} {values[metric]:.6g}" for metric in metrics)
            logger.info("%s: %s (%.2f s)", method, summary, time.perf_counter() - start)
        task.write_evaluation(metrics_output, rows)
        task.write_reliability(reliability_output, test, reliability, dataset=dataset, model=model, seed=seed,
                               bins=bins)
        written = [metrics_output, reliability_output]
        if replicates_output is not None:  # no resamples: a file without replicates
            task.write_replicates(replicates_output, cell, replicates)
            written.append(replicates_output)
        logger.info("%d test rows, %d bootstrap resamples; wrote %s", len(test.targets), resamples if resampled_here else 0,
                    ", ".join(map(str, written)))


def gather_metrics_step(inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Concatenate per-model evaluation CSVs, in the given (config) order, into ``metrics.csv``."""
    with step_log(log) as logger:
        rows = concatenate_metrics(inputs, output)
        logger.info("%d rows from %d evaluation files -> %s", rows, len(inputs), output)


@offload
def table_step(
    metrics_csv,
    metric: str,
    md_output,
    tex_output,
    *,
    language: str,
    bins: int,
    comparisons_csv=None,
    intervals_csv=None,
    log=None,
) -> None:
    """Write the thesis-style table of one metric as Markdown and LaTeX.

    ``comparisons_csv`` marks every method statistically tied with the row's best (``report.mark_ties``);
    ``intervals_csv`` prints cells as estimate [low, high] (``report.cells: interval``).
    """
    from calibrepro.report.tables import write_table

    with step_log(log) as logger:
        write_table(
            metrics_csv, metric, md_output, tex_output, language=language, bins=bins,
            comparisons_csv=comparisons_csv, intervals_csv=intervals_csv,
        )
        logger.info("table of %s (%s) -> %s, %s", metric, language, md_output, tex_output)


@offload
def figure_step(reliability_json, png_output, pdf_output, *, language: str, intervals=None, counts=False,
                log=None) -> None:
    """Draw one model's reliability diagram (one panel per method) as PNG and PDF.

    ``intervals``: the level of Wilson error bars on the per-bin accuracy, or None (the thesis's style);
    ``counts``: print every bin's sample count.
    """
    from calibrepro.report.figures import write_reliability_figure  # matplotlib: only where drawn

    with step_log(log) as logger:
        write_reliability_figure(
            reliability_json, png_output, pdf_output, language=language, intervals=intervals, counts=counts
        )
        logger.info("reliability diagram of %s -> %s, %s", reliability_json, png_output, pdf_output)


@offload
def reproduction_step(metrics_csv, output, *, published_csv=None, intervals_csv=None, language="en", log=None) -> None:
    """Compare ``metrics.csv`` with the published values (the thesis's appendix by default)."""
    from calibrepro.report.reproduction import write_reproduction_report

    with step_log(log) as logger:
        write_reproduction_report(
            metrics_csv, output, published_csv=published_csv, language=language, intervals_csv=intervals_csv
        )
        logger.info("reproduction report (published: %s) -> %s", published_csv or "thesis appendix", output)


def _read_estimates(evaluation_csv) -> dict[tuple[str, str], float]:
    """``{(method, metric): value}`` of one model's evaluation file (its rows of metrics.csv)."""
    from calibrepro.report.metrics_file import read_metrics

    values = read_metrics(evaluation_csv).values
    return {(method, metric): by_seed[seed] for (_, _, method, metric), by_seed in values.items() for seed in by_seed}


@offload
def bootstrap_step(
    logits_path,
    split_path,
    evaluation_csv,
    intervals_output,
    comparisons_output,
    *,
    calibrators: Mapping[str, str | Path],
    metrics: Sequence[str],
    bins: int,
    dataset: str,
    model: str,
    seed: int,
    resamples: int,
    level: float,
    bootstrap_seed: int,
    interval: str = "auto",
    log=None,
) -> None:
    """Bootstrap intervals of every metric of every calibrator, and paired comparisons with the best.

    All methods share the same ``resamples`` resamples of the test half (calibrators stay fitted);
    the estimates are the model's rows of ``metrics.csv`` (``evaluation_csv``), so they are equal to
    them by construction. A row's best is the exact best estimate (first in method order on ties).
    ``interval``: the interval method (``uncertainty.interval``; ``auto``: each metric's own), used
    for the metric's intervals and its paired differences alike; a metric's intervals are clipped to
    its range (``Metric.bounds``), the differences are not.
    """
    from tqdm.auto import tqdm

    from calibrepro.bootstrap import (
        bootstrap_replicates, interval_method, jackknife_values, paired_differences, resample_counts,
    )
    from calibrepro.bootstrap import bootstrap_seed as cell_seed
    from calibrepro.bootstrap import interval as make_interval
    from calibrepro.metrics import higher_is_better, spec
    from calibrepro.report.metrics_file import best_methods
    from calibrepro.report.uncertainty_files import write_comparisons, write_intervals

    with step_log(log) as logger:
        task = task_of("classification")  # its metrics' resampled forms: calibrepro.resampling
        fitted = {method: load_calibrator(path, method, task) for method, path in calibrators.items()}
        [test] = task.halves(logits_path, split_path, "test")
        labels = test.targets
        estimates = _read_estimates(evaluation_csv)
        counts = resample_counts(len(labels), resamples, cell_seed(bootstrap_seed, dataset, model, seed))
        methods = list(fitted)
        chosen = {metric: interval_method(metric, interval) for metric in metrics}
        jackknifed = [metric for metric in metrics if chosen[metric] == "bca"]
        jackknife: dict = {}

        def probabilities():
            for m in tqdm(methods, desc=f"bootstrap {dataset}/{model}", unit="method", disable=None):
                probs = task.predict(fitted[m], test)
                if jackknifed:  # BCa's acceleration: a grouped jackknife of those metrics
                    jackknife[m] = jackknife_values(probs, labels, jackknifed, bins=bins)
                yield m, probs

        replicates = bootstrap_replicates(probabilities(), labels, metrics, counts, bins=bins)
        intervals, comparisons = [], []
        for metric in metrics:
            values = {m: estimates[(m, metric)] for m in methods}
            method_of = chosen[metric]
            jack = {m: jackknife[m][metric] for m in methods} if method_of == "bca" else None
            for m in methods:
                bounds = make_interval(replicates[m][metric], values[m], level, method_of,
                                       None if jack is None else jack[m], spec(metric).bounds)
                intervals.append((dataset, model, m, seed, metric, values[m], bounds.centre, bounds.low, bounds.high,
                                  method_of, float(level), resamples))
            tied_best = best_methods(values, higher_is_better(metric))
            best = next(m for m in methods if m in tied_best)
            paired = paired_differences({m: replicates[m][metric] for m in methods}, values, best, level, method_of,
                                        jack)
            for m in methods:
                difference, low, high = paired[m]
                comparisons.append((dataset, model, seed, metric, m, best, difference, low, high, method_of,
                                    float(level), resamples, int(low <= 0.0 <= high)))
        write_intervals(intervals_output, intervals)
        write_comparisons(comparisons_output, comparisons)
        logger.info("B = %d resamples of %d test samples, %d methods x %d metrics -> %s, %s",
                    resamples, len(labels), len(methods), len(metrics), intervals_output, comparisons_output)


def gather_uncertainty_step(kind: str, inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Gather the per-model ``kind`` files ("intervals" or "comparisons"), in config order, into one."""
    from calibrepro.report.uncertainty_files import concatenate

    with step_log(log) as logger:
        rows = concatenate(kind, inputs, output)
        logger.info("%d rows from %d files -> %s", rows, len(inputs), output)


@offload
def rank_step(metrics_csv, md_output, *, metric: str, figures: Mapping[str, tuple], alpha: float, language: str,
              log=None) -> None:
    """Mean ranks, Friedman test and Nemenyi CD of ``metric`` per data set: a table and CD diagrams."""
    from calibrepro.report.cd_diagram import write_rank_report

    with step_log(log) as logger:
        write_rank_report(metrics_csv, metric, md_output, dict(figures), alpha=alpha, language=language)
        logger.info("ranks of %s -> %s and %d CD diagram(s)", metric, md_output, len(figures))


@offload
def size_study_step(
    logits_path,
    split_path,
    output,
    *,
    methods: Sequence[str],
    sizes: Sequence[int],
    seeds: Sequence[int],
    metrics: Sequence[str],
    bins: int,
    dataset: str,
    model: str,
    options: Mapping[str, Mapping] | None = None,
    log=None,
) -> None:
    """Fit every calibrator on nested subsets of the calibration half; metrics on the test half."""
    from tqdm.auto import tqdm

    from calibrepro.size_study import run_size_study, write_size_study

    with step_log(log) as logger:
        calibration, test = task_of("classification").halves(logits_path, split_path, "calibration", "test")
        total = len(seeds) * len(sizes) * len(methods)
        with tqdm(total=total, desc=f"size study {dataset}/{model}", unit="fit", disable=None) as progress:
            rows = [
                (dataset, model, method, size, seed, metric, value)
                for method, size, seed, metric, value in run_size_study(
                    calibration, test, methods=methods, sizes=sizes, seeds=seeds, metrics=metrics, bins=bins,
                    options=options, progress=progress,
                )
            ]
        write_size_study(output, rows)
        logger.info("%d fits (sizes %s, seeds %s) -> %s", total, list(sizes), list(seeds), output)


def gather_size_study_step(inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Gather the per-model size-study files, in config order, into one."""
    from calibrepro.size_study import concatenate_size_study

    with step_log(log) as logger:
        rows = concatenate_size_study(inputs, output)
        logger.info("%d rows from %d files -> %s", rows, len(inputs), output)


@offload
def size_study_report_step(study_csv, md_output, *, metric: str, figures: Mapping[str, tuple], language: str,
                           published_csv=None, log=None) -> None:
    """The size study's table and one figure per data set, with the published sweeps of ``published_csv``."""
    from calibrepro.report.size_study import write_size_study_report

    with step_log(log) as logger:
        write_size_study_report(study_csv, metric, md_output, dict(figures), language=language,
                                published_csv=published_csv)
        logger.info("size study of %s -> %s and %d figure(s)", metric, md_output, len(figures))


def remove_stale_outputs(layout, targets: Sequence[str]) -> str:
    """Delete what an earlier run of this configuration reported and this one does not produce.

    ``layout.stale(targets)`` lists them (reports, gathered tables); say in one line what went.
    """
    stale = layout.stale(targets)
    for path in stale:
        os.remove(path)
    for folder, _, _ in os.walk(layout.reports, topdown=False):  # and the folders left empty
        if not os.listdir(folder):
            os.rmdir(folder)
    if not stale:
        return ""
    return f"calibrepro: removed {len(stale)} output(s) of an earlier run that this configuration does not produce: " + ", ".join(stale)


# --------------------------------------------------------------------------- regression (seed 002, second half)


@offload
def regression_data_step(dataset: str, spec: Mapping, files: Mapping[str, str], output, *, log=None) -> None:
    """Read a regression data set from its source (``spec``, the config entry; ``files``: its local
    files) and cache it as the models read it (:func:`calibrepro.regression.splits.save_arrays`)."""
    from calibrepro.download import parse_checksum, sha256_of
    from calibrepro.regression.data import downloads, load_dataset
    from calibrepro.regression.splits import save_arrays

    with step_log(log) as logger:
        for item in downloads(spec):
            form, reason = parse_checksum(item.checksum)
            if form == "unpinned":  # trust on first use: say which file this run read
                path = files[os.path.basename(item.path)]
                logger.warning("%s: sha256 %s (%s)", path, sha256_of(path), reason)
        data = load_dataset(dataset, spec, files)
        x = data.x if data.x is not None else np.zeros((len(data.y), 0))  # a user's predictions: no features
        save_arrays(output, x, data.y, series=data.series, fixed=data.fixed, given=data.given)
        logger.info("%s (%s): %d samples, %d features, %d target(s)%s -> %s", dataset, spec["source"], len(data.y),
                    x.shape[1], 1 if data.y.ndim == 1 else data.y.shape[1], ", a time series" if data.series else "",
                    output)


def regression_split_step(data_path, dataset: str, index: int, spec: Mapping, output, *, log=None) -> None:
    """Draw split ``index`` of a regression data set: train, calibration and test indices."""
    from calibrepro.regression.splits import load_arrays, make_split, save_split

    with step_log(log) as logger:
        arrays = load_arrays(data_path)
        split = make_split(
            dataset, len(arrays.y), index, test_fraction=spec["test_fraction"],
            calibration_fraction=spec["calibration_fraction"], seed=spec["seed"], fixed=arrays.fixed,
            series=arrays.series, gap=arrays.y.shape[1] - 1 if arrays.series else 0,
        )
        save_split(output, split)
        logger.info("split %d of %s: %d train, %d calibration, %d test -> %s", index, dataset, len(split.train),
                    len(split.calibration), len(split.test), output)


@offload
def regression_predict_step(data_path, split_path, output, *, model: str, options: Mapping, seed: int,
                            log=None) -> None:
    """Train regressor ``model`` (a kind of :mod:`calibrepro.regression.models`) on the training part and
    write its predictive distributions of the calibration and test parts (``source: predictions``:
    the user's own, split the same way)."""
    from calibrepro.regression.distributions import predictive_from_arrays
    from calibrepro.regression.predictions import Predictions, part_of, rows_of, save_predictions
    from calibrepro.regression.splits import load_arrays, load_split

    with step_log(log) as logger:
        arrays, split = load_arrays(data_path), load_split(split_path)
        rows = np.concatenate([split.calibration, split.test])
        if arrays.given is not None:  # one output per sample: distribution rows are sample rows
            distribution = predictive_from_arrays(arrays.given["family"], arrays.given["params"]).take(rows)
            metadata = {"source": "predictions"}
        else:
            from calibrepro.regression.models import fit_predict

            predicted = fit_predict(model, arrays.x[split.train], arrays.y[split.train], arrays.x[rows], dict(options),
                                    seed=seed, logger=logger)
            distribution = predictive_from_arrays(predicted.family, rows_of(predicted.params))
            metadata = predicted.info
        outputs = arrays.y.shape[1]
        n_cal = len(split.calibration) * outputs
        parts = {}
        for name, part_rows, selection in (("calibration", split.calibration, np.arange(n_cal)),
                                           ("test", split.test, np.arange(n_cal, len(rows) * outputs))):
            part_distribution = distribution.take(selection)
            parts[name] = (part_of(arrays.y[part_rows], part_rows, part_distribution.params()), part_distribution)
        (test, test_distribution), (calibration, _) = parts["test"], parts["calibration"]
        save_predictions(output, Predictions(distribution.kind, test, calibration, metadata), test_distribution.mean(),
                         test_distribution.std())
        logger.info("%s: %s predictive of %d calibration and %d test rows -> %s", model, distribution.kind,
                    len(calibration.y), len(test.y), output)


def regression_gather_step(inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Concatenate the per-model regression evaluations, in config order, into ``metrics.csv``."""
    from calibrepro.io import concatenate_csv
    from calibrepro.regression.report import COLUMNS

    with step_log(log) as logger:
        rows = concatenate_csv(inputs, output, COLUMNS, what="a regression evaluation file")
        logger.info("%d rows from %d evaluation files -> %s", rows, len(inputs), output)


@offload
def regression_tables_step(metrics_csv, outputs: Mapping[str, tuple], *, sources: Mapping[str, str], language: str,
                           log=None) -> None:
    """The regression tables (name -> (md, tex)) in the seed's layout, with the published values beside ours."""
    from calibrepro.regression.report import write_regression_tables

    with step_log(log) as logger:
        write_regression_tables(metrics_csv, dict(outputs), sources=dict(sources), language=language)
        logger.info("%d regression tables (%s) from %s", len(outputs), language, metrics_csv)


@offload
def regression_figure_step(curves_files: Sequence[str], kind: str, png_output, pdf_output, *, title: str,
                           language: str, log=None) -> None:
    """One data set's and model's regression figure of ``kind`` ("reliability" or "horizon"), PNG and PDF."""
    from calibrepro.regression.figures import write_regression_figure

    with step_log(log) as logger:
        write_regression_figure(curves_files, kind, png_output, pdf_output, title=title, language=language)
        logger.info("%s figure from %d split(s) -> %s, %s", kind, len(curves_files), png_output, pdf_output)


def regression_reproduction_step(metrics_csv, replicates_files: Sequence[str], output, *, sources: Mapping[str, str],
                                 language: str, level: float, interval: str, curves_files: Sequence[str] = (),
                                 log=None) -> None:
    """Compare the regression metrics with the published values (Kuleshov et al. 2018, the seed): our mean
    over the splits and its bootstrap interval (:func:`calibrepro.regression.uncertainty.mean_intervals`);
    the seed's findings checked on them and the curves files (:mod:`calibrepro.regression.claims`)."""
    from calibrepro.regression.report import mean_estimates, write_regression_reproduction
    from calibrepro.regression.uncertainty import mean_intervals

    with step_log(log) as logger:
        intervals = mean_intervals(replicates_files, mean_estimates(metrics_csv), level, interval)
        write_regression_reproduction(metrics_csv, output, sources=dict(sources), language=language,
                                      intervals=intervals, level=level, curves_files=curves_files)
        logger.info("regression reproduction report (%d bootstrap intervals) -> %s", len(intervals), output)


def outputs_summary(groups: Mapping[str, Sequence[str]]) -> str:
    """Lines telling where a finished run's outputs are: per group, its folder and the files present."""
    found = {name: [path for path in paths if os.path.exists(path)] for name, paths in groups.items()}
    found = {name: present for name, present in found.items() if present}
    width = max([9, *map(len, found)])  # the names line up, the longest included
    lines = []
    for name, present in found.items():
        if len(present) == 1:
            where = present[0]
        else:
            where = f"{os.path.commonpath(present)}/  ({len(present)} files)"
        lines.append(f"  {name:<{width}} {where}")
    if not lines:
        return ""
    return "\n".join(["calibrepro: finished. Outputs:", *lines])


def failure_summary(failures: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """Lines naming each failed step (rule, what it worked on, its logs) with its log's last line."""
    lines = []
    for rule, what, logs in failures:
        last = ""
        for path in logs:
            if os.path.isfile(path):
                tail = [line for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
                last = tail[-1].strip() if tail else last
        where = f" (full log: {', '.join(logs)})" if logs else ""
        lines.append(f"  {rule} {what}: {last or 'failed, see the output above'}{where}")
    if not lines:
        return ""
    return "\n".join(["calibrepro: the run failed.", *lines])
