"""The regression task's report: tables, reliability and per-hour figures, the reproduction report, the
recalibrators' fitted parameters.

``workflow/rules/regression_report.smk`` calls these steps; they read the gathered regression
``metrics.csv``, the curves files and the bootstrap replicates of :mod:`.steps`' evaluations.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from calibrepro.steps.run import step_log
from calibrepro.workers import offload


@offload
def tables_step(metrics_csv, outputs: Mapping[str, tuple], *, sources: Mapping[str, str], language: str,
                log=None) -> None:
    """The regression tables (name -> (md, tex)) in the seed's layout, with the published values beside ours."""
    from calibrepro.regression.report import write_regression_tables

    with step_log(log) as logger:
        write_regression_tables(metrics_csv, dict(outputs), sources=dict(sources), language=language)
        logger.info("%d regression tables (%s) from %s", len(outputs), language, metrics_csv)


@offload
def figure_step(curves_files: Sequence[str], kind: str, png_output, pdf_output, *, title: str, language: str,
                log=None) -> None:
    """One data set's and model's regression figure of ``kind`` ("reliability" or "horizon"), PNG and PDF."""
    from calibrepro.regression.figures import write_regression_figure

    with step_log(log) as logger:
        write_regression_figure(curves_files, kind, png_output, pdf_output, title=title, language=language)
        logger.info("%s figure from %d split(s) -> %s, %s", kind, len(curves_files), png_output, pdf_output)


def reproduction_step(metrics_csv, replicates_files: Sequence[str], output, *, sources: Mapping[str, str],
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


@offload
def parameters_step(curves_files: Sequence[str], csv_output, md_output, tex_output, *, language: str,
                    log=None) -> None:
    """The fitted state of every recalibrator of every split, as its curves file records it: the tidy CSV and
    its tables (:mod:`calibrepro.report.parameter_tables`)."""
    from calibrepro.regression.recalibration import recalibrator_title
    from calibrepro.regression.task import fitted_recalibrators
    from calibrepro.report.parameter_tables import write_fitted_parameters
    from calibrepro.report.parameters_file import fit_rows

    with step_log(log) as logger:
        fits = [fit for path in curves_files for fit in fitted_recalibrators(path)]
        rows = write_fitted_parameters((fit_rows(*fit) for fit in fits), csv_output, md_output, tex_output,
                                       task="regression", language=language, titles=recalibrator_title)
        logger.info("%d numbers of %d recalibrators (%s) -> %s, %s, %s", rows, len(fits), language, csv_output,
                    md_output, tex_output)


@offload
def conformal_tables_step(conformal_csv, md_output, tex_output, *, log=None) -> None:
    """The split-conformal intervals beside recalibration, one table per alpha (:mod:`calibrepro.regression.conformal`)."""
    from calibrepro.regression.conformal import write_interval_tables

    with step_log(log) as logger:
        write_interval_tables(conformal_csv, md_output, tex_output)
        logger.info("regression conformal tables -> %s, %s", md_output, tex_output)
