"""Report of the calibration-set-size study: a Markdown table and one figure per data set.

Table: one row per data set/model/method, one column per calibration-set size, cells
``mean ± sd`` of the metric over the subset seeds (sample sd, as the main tables). Figure: one
panel per model, the metric against the calibration-set size (log axis), a line per method
through the mean over seeds and a band from the smallest to the largest seed's value. Drawn
with matplotlib's object-oriented API only, byte-stable as :mod:`calibrepro.report.figures`.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from calibrepro.io import atomic_path, read_tidy_csv, write_text
from calibrepro.report.figures import PDF_METADATA, PNG_METADATA, ordered_methods
from calibrepro.report.labels import dataset_name, format_number, method_name, metric_spec, short_name
from calibrepro.report.metrics_file import summarise
from calibrepro.report.tables import md_escape
from calibrepro.size_study import COLUMNS

#: one colour per method, in the thesis's column order (matplotlib's tab10)
METHOD_COLORS = ("#7f7f7f", "#9467bd", "#ff7f0e", "#1f77b4", "#2ca02c", "#d62728", "#8c564b", "#e377c2")

_AXIS = {"ru": "Размер калибровочной выборки", "en": "Calibration set size"}


def read_size_study(path, metric: str) -> OrderedDict:
    """``{(dataset, model): {method: {size: {seed: value}}}}`` of ``metric``, in file order."""
    out: OrderedDict = OrderedDict()
    for _, row in read_tidy_csv(path, COLUMNS):
        if row["metric"] != metric:
            continue
        by_method = out.setdefault((row["dataset"], row["model"]), OrderedDict())
        by_size = by_method.setdefault(row["method"], OrderedDict())
        by_size.setdefault(int(row["size"]), {})[int(row["seed"])] = float(row["value"])
    if not out:
        raise ValueError(f"{path}: no rows of metric {metric!r}")
    return out


def render_size_table(study: OrderedDict, metric: str, language: str = "ru") -> str:
    """Markdown table of ``metric`` (printed units) by calibration-set size, mean ± sd over seeds."""
    spec = metric_spec(metric)
    sizes = sorted({size for methods in study.values() for by_size in methods.values() for size in by_size})
    seeds = sorted({s for methods in study.values() for by_size in methods.values()
                    for by_seed in by_size.values() for s in by_seed})
    header = ["Data", "Model", "Method"] + [f"n = {size}" for size in sizes]
    lines = [
        f"{short_name(metric)} on the test half against the size of the calibration set (nested stratified "
        f"subsets of the calibration half); mean ± sd over subset seeds {', '.join(map(str, seeds))}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":--"] * 3 + ["--:"] * len(sizes)) + "|",
    ]
    for (dataset, model), methods in study.items():
        for method in ordered_methods(list(methods)):
            cells = []
            for size in sizes:
                mean, sd, n = summarise(methods[method].get(size, {}))
                text = format_number(spec.display(mean), spec.decimals) or "—"
                if n > 1:
                    text += f" ± {format_number(spec.display(sd), spec.decimals)}"
                cells.append(text)
            lines.append("| " + " | ".join([md_escape(dataset), md_escape(model), method_name(method, language)]
                                           + cells) + " |")
    return "\n".join(lines) + "\n"


def build_size_figure(study: OrderedDict, dataset: str, metric: str, language: str = "ru") -> Figure:
    """One panel per model of ``dataset``: metric against size, mean line and min-max band per method."""
    spec = metric_spec(metric)
    models = [(d, m) for d, m in study if d == dataset]
    if not models:
        raise ValueError(f"the size study has no model of data set {dataset!r}")
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    figure = Figure(figsize=(7.0, 2.3 * rows + 0.7), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, squeeze=False, sharey=True)
    handles = {}
    for index, ax in enumerate(axes.flat):
        if index >= len(models):
            ax.set_visible(False)
            continue
        methods = study[models[index]]
        for j, method in enumerate(ordered_methods(list(methods))):
            sizes = sorted(methods[method])
            values = [[spec.display(v) for v in methods[method][s].values()] for s in sizes]
            color = METHOD_COLORS[j % len(METHOD_COLORS)]
            means = [math.fsum(v) / len(v) for v in values]
            (line,) = ax.plot(sizes, means, color=color, linewidth=1.0, marker="o", markersize=2.5)
            ax.fill_between(sizes, [min(v) for v in values], [max(v) for v in values], color=color,
                            alpha=0.18, linewidth=0)
            handles.setdefault(method, line)
        ax.set_xscale("log")
        ticks = sorted({size for by_size in methods.values() for size in by_size})
        ax.set_xticks(ticks, labels=[str(t) for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(models[index][1], fontsize=9, pad=3)
        ax.tick_params(labelsize=7, length=2.5, width=0.6, pad=2)
        ax.grid(color="0.9", linewidth=0.5)
        if index % cols == 0:
            ax.set_ylabel(short_name(metric), fontsize=8)
        if index + cols >= len(models):
            ax.set_xlabel(_AXIS[language], fontsize=8)
    figure.suptitle(dataset_name(dataset), fontsize=10)
    figure.legend(list(handles.values()), [method_name(m, language) for m in handles], loc="outside lower center",
                  ncols=min(6, len(handles)), fontsize=7.5, frameon=False)
    return figure


def write_size_study_report(study_csv, metric: str, md_path, figures: dict, *, language: str = "ru") -> None:
    """Write the table (``md_path``) and one figure per data set (``figures``: ``{dataset: (png, pdf)}``)."""
    study = read_size_study(study_csv, metric)
    for dataset, (png, pdf) in figures.items():
        figure = build_size_figure(study, dataset, metric, language)
        with atomic_path(png) as tmp:
            figure.savefig(tmp, format="png", dpi=200, metadata=PNG_METADATA)
        with atomic_path(pdf) as tmp:
            figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
    write_text(md_path, render_size_table(study, metric, language))
