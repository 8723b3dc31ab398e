"""The classification report: thesis-style tables, reliability diagrams, the reproduction report,
mean ranks with critical-difference diagrams, the size study's table and figures, and the fitted parameters.

``workflow/rules/report.smk`` calls these steps; each reads gathered files (``metrics.csv``, the
convergence records, the uncertainty files, one model's reliability bins; the fitted calibrators for the
parameters) and draws through :mod:`calibrepro.report`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from calibrepro.steps.run import step_log
from calibrepro.workers import offload


@offload
def table_step(
    metrics_csv,
    metric: str,
    md_output,
    tex_output,
    *,
    language: str,
    bins: int,
    convergence_csv=None,
    comparisons_csv=None,
    intervals_csv=None,
    log=None,
) -> None:
    """Write the thesis-style table of one metric as Markdown and LaTeX.

    ``convergence_csv`` marks the cells of fits that did not converge or whose search was capped;
    ``comparisons_csv`` marks every method statistically tied with the row's best (``report.mark_ties``);
    ``intervals_csv`` prints cells as estimate [low, high] (``report.cells: interval``).
    """
    from calibrepro.report.tables import write_table

    with step_log(log) as logger:
        write_table(
            metrics_csv, metric, md_output, tex_output, language=language, bins=bins,
            convergence_csv=convergence_csv, comparisons_csv=comparisons_csv, intervals_csv=intervals_csv,
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
def reproduction_step(metrics_csv, output, *, published_csv=None, intervals_csv=None, size_study_csv=None,
                      conformal_csv=None, curves_md=None, language="en", log=None) -> None:
    """Compare ``metrics.csv`` with the published values (the thesis's appendix by default); the blog's
    findings as verdicts when the run has its networks; with ``conformal_csv``, the verdicts of the
    conformal findings (:mod:`calibrepro.conformal.claims`); with ``curves_md``, the section of the findings
    of calibration over training (:mod:`calibrepro.report.curve_claims`)."""
    from calibrepro.report.reproduction import write_reproduction_report

    with step_log(log) as logger:
        write_reproduction_report(
            metrics_csv, output, published_csv=published_csv, language=language, intervals_csv=intervals_csv,
            size_study_csv=size_study_csv,
            conformal_csv=conformal_csv,
            curves_md=curves_md,
        )
        logger.info("reproduction report (published: %s) -> %s", published_csv or "thesis appendix", output)


@offload
def rank_step(metrics_csv, md_output, *, metric: str, figures: Mapping[str, tuple], alpha: float, language: str,
              log=None) -> None:
    """Mean ranks, Friedman test and Nemenyi CD of ``metric`` per data set: a table and CD diagrams."""
    from calibrepro.report.cd_diagram import write_rank_report

    with step_log(log) as logger:
        write_rank_report(metrics_csv, metric, md_output, dict(figures), alpha=alpha, language=language)
        logger.info("ranks of %s -> %s and %d CD diagram(s)", metric, md_output, len(figures))


@offload
def size_study_report_step(study_csv, md_output, *, metric: str, figures: Mapping[str, tuple], language: str,
                           published_csv=None, log=None) -> None:
    """The size study's table and one figure per data set, with the published sweeps of ``published_csv``."""
    from calibrepro.report.size_study import write_size_study_report

    with step_log(log) as logger:
        write_size_study_report(study_csv, metric, md_output, dict(figures), language=language,
                                published_csv=published_csv)
        logger.info("size study of %s -> %s and %d figure(s)", metric, md_output, len(figures))


@offload
def parameters_step(fits: Sequence[tuple[str, str, str, int, str]], csv_output, md_output, tex_output, *,
                    language: str, log=None) -> None:
    """The fitted parameters of every calibrator, ``(dataset, model, method, seed, calibrator file)`` in the run's
    order: the tidy CSV and its tables (:mod:`calibrepro.report.parameter_tables`)."""
    from calibrepro.report.parameter_tables import write_fitted_parameters
    from calibrepro.report.parameters_file import fit_rows
    from calibrepro.steps.calibration import load_calibrator

    with step_log(log) as logger:
        rows = write_fitted_parameters(
            (fit_rows(dataset, model, method, seed, load_calibrator(path, method))
             for dataset, model, method, seed, path in fits),
            csv_output, md_output, tex_output, task="classification", language=language,
        )
        logger.info("%d numbers of %d fits (%s) -> %s, %s, %s", rows, len(fits), language, csv_output, md_output,
                    tex_output)
