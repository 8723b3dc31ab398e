"""Calibration over training: gather the trained networks' curves, draw them, check the findings.

``workflow/rules/curves.smk`` calls these steps. The curves themselves are recorded while a network trains
(:mod:`calibrepro.training.curves`) and travel in its logits' metadata; here they become
``training_curves.csv`` (:mod:`calibrepro.report.curves_file`), one figure per data set and the table
(:mod:`calibrepro.report.curves`), and the findings' section of the reproduction report
(:mod:`calibrepro.report.curve_claims`), whose intervals come from the last epoch's logits on the tables'
split (the paired bootstrap of :mod:`calibrepro.bootstrap`); and Guo et al.'s fig. 1 of a data set's networks
(:mod:`calibrepro.report.confidence_figure`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from calibrepro.steps.run import step_log
from calibrepro.workers import offload


@offload
def gather_curves_step(models: Sequence[tuple[str, str, str]], output, *, log=None) -> None:
    """``training_curves.csv`` from the logits' metadata of ``(dataset, model, logits file)``, in that order."""
    import numpy as np

    from calibrepro.io import load_logits, write_text
    from calibrepro.report.curves_file import curve_rows, format_curves

    with step_log(log) as logger:
        rows = []
        for dataset, model, path in models:
            metadata = load_logits(path, rows=np.arange(1)).metadata
            rows += curve_rows(dataset, model, metadata, where=str(path))
        write_text(output, format_curves(rows, where=output))
        logger.info("%d rows of %d networks -> %s", len(rows), len(models), output)


def last_epoch(dataset: str, models: Mapping[str, str], split_path, pairs, *, bins: int, resamples: int, level: float,
               seed: int):
    """The bootstrap intervals at the last epoch (:class:`calibrepro.report.curve_claims.LastEpoch`) of one data set's
    networks (``models``: name -> logits file): each network's error, ECE and MCE, uncalibrated and after TS
    (fitted on the calibration half), and the paired ECE differences of each ``(smoothed, plain)`` pair, on the
    same ``resamples`` multinomial resamples of the test half (seeded by ``seed`` and ``dataset``)."""
    from calibrepro.bootstrap import bootstrap_replicates, bootstrap_seed, interval, interval_method, resample_counts
    from calibrepro.metrics import METRICS, compute_metrics
    from calibrepro.report.curve_claims import TS, UNCAL, LastEpoch
    from calibrepro.tasks import fit_calibrator, task_of

    task, names = task_of("classification"), ("accuracy", "ece", "mce")
    intervals, differences, replicates, estimates = {}, {}, {}, {}
    counts = None
    for model, path in models.items():
        calibration, test = task.halves(path, split_path, "calibration", "test")
        if counts is None:
            counts = resample_counts(len(test.targets), resamples, bootstrap_seed(seed, "curves", dataset))
        for method in (UNCAL, TS):
            p = task.predict(fit_calibrator(task, method, calibration, bins=bins), test)
            estimates[model, method] = compute_metrics(p, test.targets, names, bins=bins)
            replicates[model, method] = bootstrap_replicates([(method, p)], test.targets, names, counts,
                                                             bins=bins)[method]
            for metric in names:
                bounds = interval(replicates[model, method][metric], estimates[model, method][metric], level,
                                  interval_method(metric, "auto"), bounds=METRICS[metric].bounds)
                if metric == "accuracy":
                    intervals[model, method, "error"] = (1 - bounds.high, 1 - bounds.low)
                else:
                    intervals[model, method, metric] = (bounds.low, bounds.high)
    for smoothed, plain in pairs:
        for method in (UNCAL, TS):
            difference = estimates[smoothed, method]["ece"] - estimates[plain, method]["ece"]
            values = replicates[smoothed, method]["ece"] - replicates[plain, method]["ece"]
            bounds = interval(values, difference, level, interval_method("ece", "auto"))
            differences[smoothed, plain, method] = (difference, bounds.low, bounds.high)
    return LastEpoch(intervals, differences, level)


@offload
def curves_report_step(curves_csv, datasets: Mapping[str, Mapping], figures: Mapping[str, tuple[str, str]],
                       md_output, tex_output, findings_output, *, bins: int, resamples: int, level: float,
                       seed: int, log=None) -> None:
    """The figures (data set -> (png, pdf)), the tables and the findings' section.

    ``datasets``: data set -> ``{"split": its split file, "models": {name: logits file}, "entries": {name: config
    entry}}`` (the networks with curves); ``resamples`` 0: no intervals."""
    from calibrepro.io import write_text
    from calibrepro.report.curve_claims import check_findings, claims_section, smoothing_pairs
    from calibrepro.report.curves import write_figure, write_tables
    from calibrepro.report.curves_file import read_curves

    with step_log(log) as logger:
        curves = read_curves(curves_csv)
        write_tables(curves, md_output, tex_output, bins)
        claims = []
        for dataset, spec in datasets.items():
            mine = {model: curves[dataset, model] for model in spec["models"]}
            write_figure(dataset, mine, *figures[dataset])
            pairs = smoothing_pairs(spec["entries"])
            last = None if not resamples else last_epoch(dataset, spec["models"], spec["split"], pairs, bins=bins,
                                                          resamples=resamples, level=level, seed=seed)
            claims += check_findings(dataset, mine, pairs, last)
        write_text(findings_output, claims_section(claims, level if resamples else None))
        held = sum(claim.verdict.startswith("holds") for claim in claims)
        logger.info("curves of %d networks: %d figure(s), tables %s, %s; %d of %d findings hold -> %s",
                    len(curves), len(figures), md_output, tex_output, held, len(claims), findings_output)


@offload
def confidence_figure_step(dataset: str, reliability: Mapping[str, str], png, pdf, *, log=None) -> None:
    """Guo et al.'s fig. 1 of ``dataset``'s networks (network -> its reliability file):
    :mod:`calibrepro.report.confidence_figure`."""
    from calibrepro.report.confidence_figure import write_confidence_figure

    with step_log(log) as logger:
        write_confidence_figure(dataset, reliability, png, pdf)
        logger.info("confidence histograms and reliability diagrams of %s -> %s, %s", ", ".join(reliability), png, pdf)
