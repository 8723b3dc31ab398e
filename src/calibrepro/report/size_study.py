"""Report of the calibration-set-size study: a Markdown table and one figure per data set.

Table: one row per data set/model/method, one column per calibration-set size, cells
``mean ± sd`` of the metric over the subset seeds (sample sd, as the main tables). Figure: one
panel per model, the metric against the calibration-set size (log axis), a line per method
through the mean over seeds and a band from the smallest to the largest seed's value. Drawn
with matplotlib's object-oriented API only, byte-stable as :mod:`calibrepro.report.figures`.

Published sweeps (cells of ``report.published`` with a ``size``, e.g. the blog's ECE against the
calibration-set size) appear as a row under the method they belong to and as crosses in the
figure; a published value counts as *within our subset spread* when
``|p - mean| <= 2 sd + u/2`` (``u``: one unit of its last printed digit), the split-noise rule of
:mod:`calibrepro.report.reproduction` applied to the subset seeds.
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
from calibrepro.report.published import load_published, size_sweep_cells
from calibrepro.report.comparison import within_noise
from calibrepro.report.tables import md_escape
from calibrepro.size_study import COLUMNS

#: one colour per method, in the thesis's column order (matplotlib's tab10)
METHOD_COLORS = ("#7f7f7f", "#9467bd", "#ff7f0e", "#1f77b4", "#2ca02c", "#d62728", "#8c564b", "#e377c2")

_AXIS = {"ru": "Размер калибровочной выборки", "en": "Calibration set size"}
_PUBLISHED = {"ru": "опубликовано", "en": "published"}
#: a published value within ``NOISE_SIGMAS`` sd (plus half a printed unit) of our mean is within the spread
NOISE_SIGMAS = 2.0


def published_sweeps(path, metric: str) -> OrderedDict:
    """``{(dataset, model, method): {table: {size: value string}}}`` of the published sweep cells of ``metric``."""
    out: OrderedDict = OrderedDict()
    if path is None:
        return out
    cells = size_sweep_cells(load_published(path))
    for row in cells[cells["metric"] == metric].itertuples(index=False):
        out.setdefault((row.dataset, row.model, row.method), OrderedDict()).setdefault(row.table, {})[
            int(row.size)] = row.value
    return out


def within_spread(published: str, by_seed: dict[int, float], display) -> bool | None:
    """Whether a published value lies within our subset spread (module docstring); None below two seeds."""
    mean, sd, n = summarise(by_seed)
    return within_noise(published, display(mean), display(sd), NOISE_SIGMAS) if n >= 2 else None


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


def render_size_table(study: OrderedDict, metric: str, language: str = "ru", published: OrderedDict | None = None) -> str:
    """Markdown table of ``metric`` (printed units) by calibration-set size, mean ± sd over seeds;
    ``published`` (:func:`published_sweeps`) adds a row per published sweep under its method."""
    spec = metric_spec(metric)
    published = OrderedDict((key, tables) for key, tables in (published or {}).items() if key[:2] in study)
    sizes = sorted({size for methods in study.values() for by_size in methods.values() for size in by_size}
                   | {size for tables in published.values() for values in tables.values() for size in values})
    seeds = sorted({s for methods in study.values() for by_size in methods.values()
                    for by_seed in by_size.values() for s in by_seed})
    header = ["Data", "Model", "Method"] + [f"n = {size}" for size in sizes]
    lines = [
        f"{short_name(metric)} on the test half against the size of the calibration set (nested stratified "
        f"subsets of the calibration half, then of the calibration pool beyond it where the run holds one); "
        f"mean ± sd over subset seeds {', '.join(map(str, seeds))}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join([":--"] * 3 + ["--:"] * len(sizes)) + "|",
    ]
    checks: list[bool | None] = []
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
            for table, values in published.get((dataset, model, method), {}).items():
                label = f"{method_name(method, language)}, {_PUBLISHED[language]}: {md_escape(table)}"
                lines.append("| " + " | ".join([md_escape(dataset), md_escape(model), label]
                                               + [values.get(size, "—") for size in sizes]) + " |")
                for size, value in values.items():
                    checks.append(within_spread(value, methods[method].get(size, {}), spec.display))
    if published:
        counted = [flag for flag in checks if flag is not None]
        lines += ["", f"Published values within our subset spread (mean ± {NOISE_SIGMAS:g} sd + half a printed unit): "
                      f"{sum(counted)} of {len(counted)}" + (f" ({len(checks) - len(counted)} published sizes not in "
                                                              "the study)" if len(counted) < len(checks) else "") + "."]
    return "\n".join(lines) + "\n"


def build_size_figure(study: OrderedDict, dataset: str, metric: str, language: str = "ru",
                      published: OrderedDict | None = None) -> Figure:
    """One panel per model of ``dataset``: metric against size, mean line and min-max band per method,
    and crosses at the ``published`` sweep values (:func:`published_sweeps`)."""
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
            for values in (published or {}).get((*models[index], method), {}).values():
                ax.plot(sorted(values), [float(values[size]) for size in sorted(values)], linestyle="none",
                        marker="x", markersize=4, color=color)
        ax.set_xscale("log")
        ticks = sorted({size for by_size in methods.values() for size in by_size}
                       | {size for (d, m, _), tables in (published or {}).items() if (d, m) == models[index]
                          for values in tables.values() for size in values})
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


def write_size_study_report(study_csv, metric: str, md_path, figures: dict, *, language: str = "ru",
                            published_csv=None) -> None:
    """Write the table (``md_path``) and one figure per data set (``figures``: ``{dataset: (png, pdf)}``);
    ``published_csv``: a published-values file whose sweep cells are shown beside ours."""
    study = read_size_study(study_csv, metric)
    published = published_sweeps(published_csv, metric)
    for dataset, (png, pdf) in figures.items():
        figure = build_size_figure(study, dataset, metric, language, published)
        with atomic_path(png) as tmp:
            figure.savefig(tmp, format="png", dpi=200, metadata=PNG_METADATA)
        with atomic_path(pdf) as tmp:
            figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
    write_text(md_path, render_size_table(study, metric, language, published))
