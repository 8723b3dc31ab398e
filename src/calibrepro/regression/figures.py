"""Figures of the regression half, from the evaluation step's curves files (one per split).

- ``reliability``: the seed's reliability curves: observed confidence accuracy(p) against the
  expected confidence p, for one-sided and two-sided intervals (two panels), one line per
  recalibrator, averaged over the splits; the diagonal is perfect calibration.
- ``horizon`` (time series): per forecast hour, the RMSE of the predictive mean and the mean
  predicted standard deviation, before recalibration and after standard-deviation scaling, averaged
  over the splits (the seed's "accuracy and uncertainty of the forecast" figures).

Matplotlib's object-oriented API only (no pyplot), PNG and PDF without timestamps, as
:mod:`calibrepro.report.figures`: equal inputs give equal bytes.
"""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from calibrepro.io import atomic_path, read_json
from calibrepro.regression.claims import mean_over_splits
from calibrepro.report.figures import PDF_METADATA, PNG_METADATA

COLORS = {"uncalibrated": "#d62728", "isotonic": "#1f77b4", "isotonic_two_sided": "#2ca02c", "std_scaling": "#9467bd"}
_TEXT = {
    "en": {"one_sided": "One-sided intervals", "two_sided": "Two-sided intervals", "expected": "Expected confidence",
           "observed": "Observed confidence", "hour": "Forecast hour", "rmse": "RMSE", "std": "mean predicted std",
           "ideal": "ideal", "after": "after std scaling"},
    "ru": {"one_sided": "Односторонние интервалы", "two_sided": "Двусторонние интервалы",
           "expected": "Ожидаемая уверенность", "observed": "Наблюдаемая доля", "hour": "Час прогноза",
           "rmse": "RMSE", "std": "среднее предсказанное СКО", "ideal": "идеал", "after": "после масштабирования СКО"},
}


def build_reliability_figure(curves: list[dict], title: str, language: str = "en") -> Figure:
    text = _TEXT[language]
    figure = Figure(figsize=(7.0, 3.3))
    FigureCanvasAgg(figure)
    levels = np.asarray(curves[0]["levels"])
    for i, side in enumerate(("one_sided", "two_sided")):
        axes = figure.add_subplot(1, 2, i + 1)
        axes.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label=text["ideal"])
        for method in curves[0]["order"]:
            axes.plot(levels, mean_over_splits(curves, method, side), color=COLORS.get(method), linewidth=1.5,
                      label=method)
        axes.set(xlim=(0, 1), ylim=(0, 1), title=text[side], xlabel=text["expected"], aspect="equal")
        if i == 0:
            axes.set_ylabel(text["observed"])
            axes.legend(fontsize=7, loc="upper left")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def build_horizon_figure(curves: list[dict], title: str, language: str = "en") -> Figure:
    text = _TEXT[language]
    figure = Figure(figsize=(5.0, 3.3))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    hours = curves[0]["outputs"]
    axes.plot(hours, mean_over_splits(curves, "uncalibrated", "rmse"), color="#1f77b4", marker="o", label=text["rmse"])
    axes.plot(hours, mean_over_splits(curves, "uncalibrated", "std"), color="#d62728", marker="o", label=text["std"])
    if "std_scaling" in curves[0]["methods"]:
        axes.plot(hours, mean_over_splits(curves, "std_scaling", "std"), color="#d62728", linestyle="--", marker=".",
                  label=f"{text['std']}, {text['after']}")
    axes.set(xlabel=text["hour"], xticks=hours, title=title)
    axes.set_ylim(bottom=0)
    axes.legend(fontsize=7)
    figure.tight_layout()
    return figure


def write_regression_figure(curves_files, kind: str, png_path, pdf_path, *, title: str, language: str = "en") -> None:
    """Draw figure ``kind`` ("reliability" or "horizon") of one data set and model, from its splits' curves."""
    curves = [read_json(path) for path in curves_files]
    build = {"reliability": build_reliability_figure, "horizon": build_horizon_figure}[kind]
    figure = build(curves, title, language)
    with atomic_path(png_path) as tmp:
        figure.savefig(tmp, format="png", dpi=150, metadata=PNG_METADATA)
    with atomic_path(pdf_path) as tmp:
        figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
