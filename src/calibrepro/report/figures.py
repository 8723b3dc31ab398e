"""Reliability diagrams in the style of the thesis's figure 1(b) and figures 2-4.

One figure per dataset/model, one panel per method (thesis column order, 2 x 3 for six methods).
Per equal-width confidence bin ((m-1)/M, m/M], three bars side by side: the mean confidence C_m
(red), the accuracy A_m (blue) and the bin weight |B_m| / l (green); a red bar above the blue one
means overconfidence in that bin. Each panel states the ECE computed from the same bins
(sum_m |B_m|/l |A_m - C_m|, thesis eq. 6). Empty bins draw no bars.

Drawn with matplotlib's object-oriented API only (``Figure`` + ``FigureCanvasAgg``; no pyplot,
no rcParams changes), so figures can be rendered from several threads of one process; PNG and
PDF are written without timestamps or software versions, so the same data give the same bytes.
"""

from __future__ import annotations

import math
import os

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from calibrepro.io import atomic_path, read_json
from calibrepro.report.labels import METHOD_ORDER, check_language, figure_title, method_name

COLORS = {"confidence": "#d62728", "accuracy": "#1f77b4", "weight": "#2ca02c"}

_TEXT = {
    "ru": {
        "confidence": "Средняя уверенность",
        "accuracy": "Точность",
        "weight": "Вес бина",
        "xlabel": "Уверенность",
        "ylabel": "Значение",
    },
    "en": {
        "confidence": "Mean confidence",
        "accuracy": "Accuracy",
        "weight": "Bin weight",
        "xlabel": "Confidence",
        "ylabel": "Value",
    },
}

#: width of the whole figure in inches: a two-column paper's full text width (about 7 in)
WIDTH_IN = 7.0
PANEL_HEIGHT_IN = 2.15
PNG_METADATA = {"Software": None}
PDF_METADATA = {"Creator": None, "Producer": None, "CreationDate": None}


class ReliabilityFileError(ValueError):
    """A reliability JSON file does not have the expected structure."""


def check_reliability(data: dict, where: str = "reliability data") -> dict:
    """Check the structure of a reliability record; return it."""
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict) or not data["methods"]:
        raise ReliabilityFileError(f"{where}: expected an object with a non-empty 'methods' object")
    bins = data.get("bins")
    if not isinstance(bins, int) or bins < 1:
        raise ReliabilityFileError(f"{where}: 'bins' must be a positive integer, got {bins!r}")
    for method, record in data["methods"].items():
        for key in ("count", "confidence", "accuracy"):
            values = record.get(key) if isinstance(record, dict) else None
            if not isinstance(values, list) or len(values) != bins:
                raise ReliabilityFileError(f"{where}: methods.{method}.{key} must be a list of {bins} values")
    return data


def ordered_methods(methods) -> list[str]:
    """The thesis's method order first, then any other method in file order."""
    known = [m for m in METHOD_ORDER if m in methods]
    return known + [m for m in methods if m not in METHOD_ORDER]


def bin_ece(record: dict) -> float:
    """ECE (fraction) of one method from its bins: sum_m |B_m|/l |A_m - C_m| (NaN if no sample)."""
    total = sum(record["count"])
    if total == 0:
        return math.nan
    gaps = [
        n * abs(a - c)
        for n, a, c in zip(record["count"], record["accuracy"], record["confidence"])
        if n and a is not None and c is not None
    ]
    return math.fsum(gaps) / total


def _grid(n: int) -> tuple[int, int]:
    if n <= 3:
        return 1, n
    if n == 4:
        return 2, 2
    return math.ceil(n / 3), 3


def build_reliability_figure(data: dict, *, language: str = "ru", title: str | None = None) -> Figure:
    """A matplotlib ``Figure`` (with an Agg canvas) of the reliability diagrams in ``data``."""
    language = check_language(language)
    data = check_reliability(data)
    text = _TEXT[language]
    bins = data["bins"]
    methods = ordered_methods(list(data["methods"]))
    rows, cols = _grid(len(methods))
    figure = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN * rows + 0.75), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)

    width = 1.0 / bins
    bar = width / 3.0
    centres = [(m + 0.5) * width for m in range(bins)]
    for index, ax in enumerate(axes.flat):
        if index >= len(methods):
            ax.set_visible(False)
            continue
        method = methods[index]
        record = data["methods"][method]
        total = sum(record["count"]) or 1
        series = {
            "confidence": record["confidence"],
            "accuracy": record["accuracy"],
            "weight": [n / total for n in record["count"]],
        }
        for offset, key in zip((-bar, 0.0, bar), ("confidence", "accuracy", "weight")):
            xs = [c + offset for c, v, n in zip(centres, series[key], record["count"]) if n and v is not None]
            hs = [v for v, n in zip(series[key], record["count"]) if n and v is not None]
            ax.bar(xs, hs, width=bar * 0.92, color=COLORS[key], linewidth=0, zorder=2)
        ax.plot([0, 1], [0, 1], color="0.55", linewidth=0.6, linestyle=(0, (3, 2)), zorder=1)
        ax.set_title(method_name(method, language), fontsize=9, pad=3)
        ece = bin_ece(record)
        if not math.isnan(ece):
            ax.text(
                0.03, 0.96, f"ECE = {ece * 100:.2f}%", transform=ax.transAxes, ha="left", va="top",
                fontsize=7.5, bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "0.8",
                                    "linewidth": 0.5},
                zorder=3,
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ticks = [0, 0.2, 0.4, 0.6, 0.8, 1.0]
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.tick_params(labelsize=7, length=2.5, width=0.6, pad=2)
        ax.grid(axis="y", color="0.9", linewidth=0.5, zorder=0)
        for spine in ax.spines.values():
            spine.set_linewidth(0.6)
        row, col = divmod(index, cols)
        if row == rows - 1 or index + cols >= len(methods):
            ax.set_xlabel(text["xlabel"], fontsize=8, labelpad=2)
            ax.tick_params(labelbottom=True)
        if col == 0:
            ax.set_ylabel(text["ylabel"], fontsize=8, labelpad=2)

    handles = [Patch(color=COLORS[key], label=text[key]) for key in ("confidence", "accuracy", "weight")]
    if title is None:
        title = figure_title(str(data.get("dataset", "")), str(data.get("model", ""))).strip(", ")
    if title:
        figure.suptitle(title, fontsize=10)
    figure.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False,
                  handlelength=1.2, columnspacing=1.5)
    return figure


def write_reliability_figure(
    reliability_json,
    png_path,
    pdf_path,
    *,
    language: str = "ru",
    title: str | None = None,
    dpi: int = 200,
) -> None:
    """Draw ``reliability_json`` (one dataset/model/seed, every method) to ``png_path`` and ``pdf_path``.

    ``title`` defaults to the thesis's style, e.g. "CIFAR-10, googlenet"; ``language`` sets the
    panel titles, axis labels and legend ("ru" or "en"). Both files are written atomically.
    """
    data = read_json(reliability_json)
    figure = build_reliability_figure(
        check_reliability(data, where=os.fspath(reliability_json)), language=language, title=title
    )
    with atomic_path(png_path) as tmp:
        figure.savefig(tmp, format="png", dpi=dpi, metadata=PNG_METADATA)
    with atomic_path(pdf_path) as tmp:
        figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
