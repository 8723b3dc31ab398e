"""The conformal part of a run: split the test halves, build and score every calibrator's prediction sets,
gather them, draw the temperature sweep, write the tables.

``workflow/rules/conformal.smk`` calls these steps. Design (docs/decisions.md, "Conformal prediction"):
each calibrator was fitted on the calibration half, so the conformal thresholds are fitted on a part of
the **test half** (:mod:`calibrepro.conformal.splits`, repeated, stratified, seeded) and scored on the
rest; one job per model computes every calibrator x score x alpha x repeat from the calibrators' test-half
probabilities (read once, each row sorted once per calibrator).
"""

from __future__ import annotations

import math
import time
from typing import Mapping, Sequence

import numpy as np

from calibrepro.steps.run import step_log
from calibrepro.workers import offload


def conformal_split_step(split_path, output, *, repeats: int, calibration_fraction: float, seed: int, dataset: str,
                         log=None) -> None:
    """Draw the ``repeats`` conformal splits of the test half of ``split_path``."""
    from calibrepro.conformal.scores import ConformalError
    from calibrepro.conformal.splits import make_conformal_splits, random_conformal_splits, save_conformal_splits
    from calibrepro.splits import load_split

    with step_log(log) as logger:
        _, test, labels = load_split(split_path)
        try:
            calibration, tests = make_conformal_splits(labels, test, repeats, calibration_fraction, seed,
                                                       where=f"data set {dataset!r}")
        except ConformalError as error:
            logger.warning("%s; the conformal splits are NOT stratified (seeded random halves instead)", error)
            calibration, tests = random_conformal_splits(test, repeats, calibration_fraction, seed)
        save_conformal_splits(output, calibration, tests, labels)
        logger.info("%d conformal splits of the %d-sample test half of %s: %d calibration, %d test -> %s", repeats,
                    len(test), split_path, calibration.shape[1], tests.shape[1], output)


def _test_half(logits_path, split_path, conformal_path):
    """The test half's logits and labels, and each repeat's rows of it (positions in the half)."""
    from calibrepro.conformal.splits import load_conformal_splits
    from calibrepro.splits import load_split
    from calibrepro.tasks import task_of

    [half] = task_of("classification").halves(logits_path, split_path, "test")
    _, test, labels = load_split(split_path)
    calibration, tests = load_conformal_splits(conformal_path, labels)
    position = np.full(len(labels), -1, dtype=np.int64)
    position[test] = np.arange(len(test))
    return half, position[calibration], position[tests]


def _usable(alphas, n: int, logger, where: str) -> list[float]:
    """The alphas a conformal calibration part of ``n`` samples supports; the others are left out with a warning
    (their sets would hold every label: :func:`calibrepro.conformal.scores.threshold`)."""
    from calibrepro.conformal.splits import usable_alphas

    usable, too_small = usable_alphas(n, alphas)
    for alpha in too_small:
        logger.warning("%s: alpha %g LEFT OUT: %d conformal calibration samples are too few (at least %d: every set "
                       "would be every label); use more samples or a larger alpha", where, alpha, n,
                       math.ceil(round(1 / alpha - 1, 9)))
    return usable


@offload
def conformal_step(logits_path, split_path, conformal_path, output, *, calibrators: Mapping[str, str],
                   dataset: str, model: str, scores: Sequence[str], alphas: Sequence[float], randomized: bool,
                   penalty: float, k_reg: int, seed: int, log=None) -> None:
    """Every calibrator's prediction sets on the conformal splits of one model's test half: its rows of
    ``conformal.csv`` (:mod:`calibrepro.conformal.results`)."""
    from calibrepro.conformal.metrics import coverage_bounds, evaluate_repeats, summarise
    from calibrepro.conformal.results import write_conformal_part
    from calibrepro.conformal.scores import check_probabilities, rank_table
    from calibrepro.steps.calibration import load_calibrator

    with step_log(log) as logger:
        half, calibration, tests = _test_half(logits_path, split_path, conformal_path)
        alphas = _usable(alphas, calibration.shape[1], logger, f"{dataset}/{model}")
        rows, table = [], None
        for method, path in calibrators.items():
            start = time.perf_counter()
            probabilities = check_probabilities(load_calibrator(path, method).predict_proba(half.inputs),
                                                f"{method}'s probabilities of {logits_path}")
            table = rank_table(probabilities, half.targets, reuse=table)  # one sort for every score, repeat, alpha
            for score in scores:
                results = evaluate_repeats(probabilities, half.targets, calibration, tests, score=score, alphas=alphas,
                                           randomized=randomized, penalty=penalty, k_reg=k_reg, seed=seed,
                                           where=f"{dataset}/{model}: the conformal calibration part", table=table)
                for alpha, repeats in results.items():
                    summary = summarise(repeats)
                    summary.update(repeats=len(repeats), n_calibration=calibration.shape[1],
                                   **coverage_bounds(calibration.shape[1], alpha))
                    rows += [(dataset, model, method, score, alpha, metric, value) for metric, value in summary.items()]
                    logger.info("%s, %s, alpha %g: coverage %.4f, mean size %.3f, CovGap %.4f", method, score, alpha,
                                summary["coverage"], summary["size"], summary["covgap"])
            logger.info("%s: %d scores x %d alphas x %d repeats in %.2f s", method, len(scores), len(alphas),
                        len(calibration), time.perf_counter() - start)
        write_conformal_part(output, rows)
        logger.info("%d rows -> %s", len(rows), output)


def gather_conformal_step(inputs: Sequence[str], output, *, log=None) -> None:
    """Concatenate the per-model conformal files, in config order, into ``conformal.csv``."""
    from calibrepro.conformal.results import concatenate_conformal

    with step_log(log) as logger:
        rows = concatenate_conformal(inputs, output)
        logger.info("%d rows from %d conformal files -> %s", rows, len(inputs), output)


#: the temperatures of the sweep: 9 from 1/4 to 4, evenly on a log scale (T = 1, the uncalibrated model, included)
TEMPERATURES = tuple(float(t) for t in np.geomspace(0.25, 4.0, 9))


@offload
def conformal_figure_step(logits_path, split_path, conformal_path, sweep_output, png_output, pdf_output, *,
                          ts_calibrator: str | None, dataset: str, model: str, scores: Sequence[str],
                          alphas: Sequence[float], randomized: bool, penalty: float, k_reg: int, seed: int,
                          language: str = "en", log=None) -> None:
    """The mean set size and CovGap against the temperature of one model (``sweep_output``: their values), drawn
    with the fitted temperature of ``ts_calibrator`` marked (None: temperature scaling not configured)."""
    from calibrepro.conformal.metrics import temperature_sweep
    from calibrepro.conformal.results import write_sweep
    from calibrepro.report.conformal import write_sweep_figure
    from calibrepro.steps.calibration import load_calibrator

    with step_log(log) as logger:
        half, calibration, tests = _test_half(logits_path, split_path, conformal_path)
        alphas = _usable(alphas, calibration.shape[1], logger, f"{dataset}/{model}")
        rows = temperature_sweep(half.inputs, half.targets, calibration, tests, TEMPERATURES, scores=scores,
                                 alphas=alphas, randomized=randomized, penalty=penalty, k_reg=k_reg, seed=seed)
        write_sweep(sweep_output, rows)
        fitted = None if ts_calibrator is None else load_calibrator(ts_calibrator, "temperature_scaling").temperature_
        write_sweep_figure(sweep_output, fitted, png_output, pdf_output, title=f"{dataset} / {model}",
                           language=language)
        logger.info("set size and CovGap at %d temperatures (fitted T: %s) -> %s, %s, %s", len(TEMPERATURES),
                    "none" if fitted is None else f"{fitted:.4g}", sweep_output, png_output, pdf_output)


@offload
def conformal_tables_step(conformal_csv, md_output, tex_output, *, language: str, log=None) -> None:
    """The conformal tables (:mod:`calibrepro.report.conformal`)."""
    from calibrepro.report.conformal import write_conformal_tables

    with step_log(log) as logger:
        write_conformal_tables(conformal_csv, md_output, tex_output, language=language)
        logger.info("conformal tables (%s) -> %s, %s", language, md_output, tex_output)
