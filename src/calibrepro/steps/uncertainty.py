"""How sure is a number: bootstrap intervals and paired comparisons per model, the calibration-set-size study.

``workflow/rules/uncertainty.smk`` calls these compute steps and their gathers (the reports drawn
from their files are in :mod:`calibrepro.steps.reports`). File formats: intervals and comparisons
:mod:`calibrepro.report.uncertainty_files`, the size study :mod:`calibrepro.size_study`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from calibrepro.steps.calibration import load_calibrator
from calibrepro.steps.run import step_log
from calibrepro.tasks import task_of
from calibrepro.workers import offload


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
    from calibrepro.bootstrap import bootstrap_seed as cell_seed
    from calibrepro.bootstrap import interval_method, resample_counts
    from calibrepro.report.uncertainty_files import write_comparisons, write_intervals

    with step_log(log) as logger:
        task = task_of("classification")  # its metrics' resampled forms: calibrepro.resampling
        fitted = {method: load_calibrator(path, method, task) for method, path in calibrators.items()}
        [test] = task.halves(logits_path, split_path, "test")
        estimates = _read_estimates(evaluation_csv)
        counts = resample_counts(len(test.targets), resamples, cell_seed(bootstrap_seed, dataset, model, seed))
        chosen = {metric: interval_method(metric, interval) for metric in metrics}
        replicates, jackknife = _replicates(
            task, fitted, test, metrics, counts, bins=bins, jackknifed=[m for m in metrics if chosen[m] == "bca"],
            desc=f"bootstrap {dataset}/{model}",
        )
        intervals, comparisons = [], []
        for metric in metrics:
            values = {m: estimates[(m, metric)] for m in fitted}
            jack = {m: jackknife[m][metric] for m in fitted} if chosen[metric] == "bca" else None
            settings = dict(method=chosen[metric], level=level, resamples=resamples)
            intervals += _interval_rows((dataset, model, seed), metric, values, replicates, jack, **settings)
            comparisons += _comparison_rows((dataset, model, seed), metric, values, replicates, jack, **settings)
        write_intervals(intervals_output, intervals)
        write_comparisons(comparisons_output, comparisons)
        logger.info("B = %d resamples of %d test samples, %d methods x %d metrics -> %s, %s",
                    resamples, len(test.targets), len(fitted), len(metrics), intervals_output, comparisons_output)


def _read_estimates(evaluation_csv) -> dict[tuple[str, str], float]:
    """``{(method, metric): value}`` of one model's evaluation file (its rows of metrics.csv)."""
    from calibrepro.report.metrics_file import read_metrics

    values = read_metrics(evaluation_csv).values
    return {(method, metric): by_seed[seed] for (_, _, method, metric), by_seed in values.items() for seed in by_seed}


def _replicates(task, fitted: Mapping, test, metrics: Sequence[str], counts, *, bins: int, jackknifed: list[str],
                desc: str) -> tuple[dict, dict]:
    """Every metric of every fitted calibrator on the resamples ``counts`` of ``test`` (method -> metric ->
    replicates), and the grouped jackknife values of the ``jackknifed`` metrics (BCa's acceleration)."""
    from tqdm.auto import tqdm

    from calibrepro.bootstrap import bootstrap_replicates, jackknife_values

    jackknife: dict = {}

    def probabilities():
        for m in tqdm(list(fitted), desc=desc, unit="method", disable=None):
            probs = task.predict(fitted[m], test)
            if jackknifed:
                jackknife[m] = jackknife_values(probs, test.targets, jackknifed, bins=bins)
            yield m, probs

    return bootstrap_replicates(probabilities(), test.targets, metrics, counts, bins=bins), jackknife


def _interval_rows(cell: tuple, metric: str, values: Mapping[str, float], replicates: Mapping, jack, *, method: str,
                   level: float, resamples: int) -> list[tuple]:
    """Rows of the intervals file: the interval of ``metric`` of every calibrator (``values``: their
    estimates), clipped to the metric's range."""
    from calibrepro.bootstrap import interval as make_interval
    from calibrepro.metrics import spec

    dataset, model, seed = cell
    rows = []
    for m, value in values.items():
        bounds = make_interval(replicates[m][metric], value, level, method, None if jack is None else jack[m],
                               spec(metric).bounds)
        rows.append((dataset, model, m, seed, metric, value, bounds.centre, bounds.low, bounds.high, method,
                     float(level), resamples))
    return rows


def _comparison_rows(cell: tuple, metric: str, values: Mapping[str, float], replicates: Mapping, jack, *,
                     method: str, level: float, resamples: int) -> list[tuple]:
    """Rows of the comparisons file: every calibrator's paired difference in ``metric`` with the row's
    best estimate (the first in method order on ties), and whether its interval holds 0."""
    from calibrepro.bootstrap import paired_differences
    from calibrepro.metrics import higher_is_better
    from calibrepro.report.metrics_file import best_methods

    dataset, model, seed = cell
    tied_best = best_methods(values, higher_is_better(metric))
    best = next(m for m in values if m in tied_best)
    paired = paired_differences({m: replicates[m][metric] for m in values}, values, best, level, method, jack)
    rows = []
    for m in values:
        difference, low, high = paired[m]
        rows.append((dataset, model, seed, metric, m, best, difference, low, high, method, float(level), resamples,
                     int(low <= 0.0 <= high)))
    return rows


def gather_uncertainty_step(kind: str, inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Gather the per-model ``kind`` files ("intervals" or "comparisons"), in config order, into one."""
    from calibrepro.report.uncertainty_files import concatenate

    with step_log(log) as logger:
        rows = concatenate(kind, inputs, output)
        logger.info("%d rows from %d files -> %s", rows, len(inputs), output)


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
    """Fit every calibrator on nested subsets of the calibration half (then of the calibration pool, where the
    logits have one); metrics on the test half."""
    from tqdm.auto import tqdm

    from calibrepro.size_study import run_size_study, write_size_study

    with step_log(log) as logger:
        calibration, test, pool = task_of("classification").halves(logits_path, split_path, "calibration", "test", "pool")
        total = len(seeds) * len(sizes) * len(methods)
        with tqdm(total=total, desc=f"size study {dataset}/{model}", unit="fit", disable=None) as progress:
            rows = [
                (dataset, model, method, size, seed, metric, value)
                for method, size, seed, metric, value in run_size_study(
                    calibration, test, pool=(pool.inputs, pool.targets), methods=methods, sizes=sizes, seeds=seeds, metrics=metrics, bins=bins,
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
