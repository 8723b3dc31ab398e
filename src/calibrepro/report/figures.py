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

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from calibrepro.io import atomic_path
from calibrepro.reliability import accuracy_intervals, check_reliability, read_reliability
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
#: the ticks of both axes of every panel (and the light grid lines at the inner ones)
TICKS = [0, 0.2, 0.4, 0.6, 0.8, 1.0]


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


def _bar_collection(xs, heights, width: float, color: str) -> PolyCollection:
    """All bars of one series as one collection (one artist instead of one patch per bar)."""
    half = width / 2
    vertices = [[(x - half, 0.0), (x - half, h), (x + half, h), (x + half, 0.0)] for x, h in zip(xs, heights)]
    return PolyCollection(vertices, facecolors=color, edgecolors="none", linewidths=0, zorder=2)


def _layout(rows: int, cols: int, has_title: bool) -> dict:
    """Fixed margins and gaps in inches, as figure fractions (no layout engine at draw time)."""
    height = PANEL_HEIGHT_IN * rows + 0.75
    top = (0.5 if has_title else 0.25) / height
    return {
        "left": 0.5 / WIDTH_IN, "right": 1 - 0.12 / WIDTH_IN, "top": 1 - top, "bottom": 0.62 / height,
        "wspace": 0.14, "hspace": 0.4 / (PANEL_HEIGHT_IN - 0.45),
    }


def build_reliability_figure(
    data: dict,
    *,
    language: str = "ru",
    title: str | None = None,
    intervals: float | None = None,
    counts: bool = False,
) -> Figure:
    """A matplotlib ``Figure`` (with an Agg canvas) of the reliability diagrams in ``data``.

    ``intervals``: a confidence level (e.g. 0.95) draws the Wilson interval of every bin's
    accuracy as an error bar on the blue bar (:func:`calibrepro.reliability.wilson_interval`);
    None (the thesis's style) draws none. ``counts``: print above every bin the number of test
    samples its bars rest on (a bar of 1.0 over 3 samples says little; False: the thesis's style).
    """
    language = check_language(language)
    data = check_reliability(data)
    methods = ordered_methods(list(data["methods"]))
    rows, cols = _grid(len(methods))
    if title is None:
        title = figure_title(str(data.get("dataset", "")), str(data.get("model", ""))).strip(", ")
    figure = Figure(figsize=(WIDTH_IN, PANEL_HEIGHT_IN * rows + 0.75), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, sharex=True, sharey=True, squeeze=False,
                           gridspec_kw=_layout(rows, cols, bool(title)))
    width = 1.0 / data["bins"]
    centres = [(m + 0.5) * width for m in range(data["bins"])]
    for index, ax in enumerate(axes.flat):
        if index >= len(methods):
            ax.set_visible(False)
            continue
        _draw_panel(ax, method_name(methods[index], language), data["methods"][methods[index]], centres, width / 3.0,
                    intervals=intervals, counts=counts)
        _style_panel(ax, index, rows, cols, len(methods), _TEXT[language])
    _add_title_and_legend(figure, title, _TEXT[language])
    return figure


def _draw_panel(ax, name: str, record: dict, centres: list[float], bar: float, *, intervals: float | None,
                counts: bool) -> None:
    """One method's panel: per bin its confidence, accuracy and weight bars (with the sample counts and
    the accuracy's error bars where asked), the diagonal, the method's name and its ECE."""
    total = sum(record["count"]) or 1
    series = {
        "confidence": record["confidence"],
        "accuracy": record["accuracy"],
        "weight": [n / total for n in record["count"]],
    }
    for offset, key in zip((-bar, 0.0, bar), ("confidence", "accuracy", "weight")):
        xs = [c + offset for c, v, n in zip(centres, series[key], record["count"]) if n and v is not None]
        hs = [v for v, n in zip(series[key], record["count"]) if n and v is not None]
        ax.add_collection(_bar_collection(xs, hs, bar * 0.92, COLORS[key]), autolim=False)
    if counts:
        for c, n in zip(centres, record["count"]):
            if n:  # at the foot of the bin, on a white ground over its bars
                ax.text(c, 0.015, str(n), ha="center", va="bottom", fontsize=4.5, rotation=90, zorder=5,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
                              "alpha": 0.8})
    if intervals is not None:
        bounds = accuracy_intervals(record, intervals)
        segments = [[(c, low), (c, high)] for c, (low, high), n in zip(centres, bounds, record["count"]) if n]
        caps = [[(c - bar * 0.25, y), (c + bar * 0.25, y)]
                for c, pair, n in zip(centres, bounds, record["count"]) if n for y in pair]
        ax.add_collection(LineCollection(segments + caps, colors="black", linewidths=0.6, zorder=4),
                          autolim=False)
    ax.plot([0, 1], [0, 1], color="0.55", linewidth=0.6, linestyle=(0, (3, 2)), zorder=1)
    ax.set_title(name, fontsize=9, pad=3, y=1.0)  # fixed y: no auto-placement per draw
    ece = bin_ece(record)
    if not math.isnan(ece):
        ax.text(
            0.03, 0.96, f"ECE = {ece * 100:.2f}%", transform=ax.transAxes, ha="left", va="top",
            fontsize=7.5, bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "0.8",
                                "linewidth": 0.5},
            zorder=3,
        )


def _style_panel(ax, index: int, rows: int, cols: int, panels: int, text: dict) -> None:
    """The axes of panel ``index`` of ``panels``: limits and ticks (shared, so set once), light grid
    lines, thin spines, axis labels on the bottom row and the left column."""
    if index == 0:  # shared axes: limits and tick positions are set once for all panels
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xticks(TICKS)
        ax.set_yticks(TICKS)
    row, col = divmod(index, cols)
    bottom = row == rows - 1 or index + cols >= panels
    ax.tick_params(labelsize=7, length=2.5, width=0.6, pad=2, labelbottom=bottom)
    ax.add_collection(LineCollection([[(0, y), (1, y)] for y in TICKS[1:-1]], colors="0.9", linewidths=0.5,
                                     zorder=0), autolim=False)
    for spine in ax.spines.values():
        spine.set_linewidth(0.6)
    if bottom:
        ax.set_xlabel(text["xlabel"], fontsize=8, labelpad=2)
    if col == 0:
        ax.set_ylabel(text["ylabel"], fontsize=8, labelpad=2)


def _add_title_and_legend(figure: Figure, title: str, text: dict) -> None:
    """The figure's title (when not empty) and the legend of the three bars under the panels."""
    handles = [Patch(color=COLORS[key], label=text[key]) for key in ("confidence", "accuracy", "weight")]
    if title:
        figure.suptitle(title, fontsize=10, y=1 - 0.05 / figure.get_figheight(), va="top")
    figure.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=3, fontsize=8,
                  frameon=False, handlelength=1.2, columnspacing=1.5)


def write_reliability_figure(
    reliability_json,
    png_path,
    pdf_path,
    *,
    language: str = "ru",
    title: str | None = None,
    dpi: int = 200,
    intervals: float | None = None,
    counts: bool = False,
) -> None:
    """Draw ``reliability_json`` (one dataset/model/seed, every method) to ``png_path`` and ``pdf_path``.

    ``title`` defaults to the thesis's style, e.g. "CIFAR-10, googlenet"; ``language`` sets the
    panel titles, axis labels and legend ("ru" or "en"); ``intervals`` a level for Wilson error bars
    on the accuracy (None: the thesis's style); ``counts`` the samples of every bin. Both files are
    written atomically.
    """
    figure = build_reliability_figure(
        read_reliability(reliability_json), language=language, title=title, intervals=intervals, counts=counts
    )
    with atomic_path(png_path) as tmp:
        figure.savefig(tmp, format="png", dpi=dpi, metadata=PNG_METADATA)
    with atomic_path(pdf_path) as tmp:
        figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
