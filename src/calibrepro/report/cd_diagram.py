"""Critical-difference diagrams (Demšar 2006, fig. 1) and the Markdown table of mean ranks.

One diagram per data set: the rank axis 1..k (best on the left), every method at its mean rank
over the data set's models, a bar of length CD (Nemenyi, alpha from the configuration) above the
axis, and thick bars joining methods whose mean ranks differ by less than CD (not significantly
different). Drawn with matplotlib's object-oriented API only (``Figure`` + ``FigureCanvasAgg``, no
pyplot, no rcParams), written like :mod:`calibrepro.report.figures` without timestamps, so the
same input gives the same bytes.
"""

from __future__ import annotations

import math

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from calibrepro.io import atomic_path, write_text
from calibrepro.ranking import RankTest, rank_test
from calibrepro.report.figures import PDF_METADATA, PNG_METADATA
from calibrepro.report.labels import dataset_name, format_number, method_name, metric_spec, short_name
from calibrepro.report.metrics_file import Metrics, read_metrics, summarise
from calibrepro.report.tables import md_escape

_TEXT = {
    "ru": {"friedman": "Фридман", "models": "моделей", "cd": "CD", "few": "мало моделей, ориентировочно"},
    "en": {"friedman": "Friedman", "models": "models", "cd": "CD", "few": "few models, indicative only"},
}


def dataset_rank_tests(metrics: Metrics, metric: str, alpha: float) -> dict[str, RankTest]:
    """``{dataset: RankTest}`` of ``metric``: per model the mean over seeds, methods in file order.

    Models that miss a method are left out of that data set's test (a rank needs every method).
    """
    spec = metric_spec(metric)
    methods = metrics.methods_of(metric)
    by_dataset: dict[str, list[list[float]]] = {}
    for dataset, model in metrics.rows_of(metric):
        row = [summarise(metrics.values.get((dataset, model, m, metric), {}))[0] for m in methods]
        if not any(math.isnan(v) for v in row):
            by_dataset.setdefault(dataset, []).append(row)
    return {
        dataset: rank_test(rows, methods, higher_is_better=spec.higher_is_better, alpha=alpha)
        for dataset, rows in by_dataset.items()
    }


def build_cd_figure(test: RankTest, *, title: str, language: str = "ru") -> Figure:
    """The critical-difference diagram of one rank test as a ``Figure`` with an Agg canvas."""
    k = len(test.methods)
    order = sorted(range(k), key=lambda j: (test.mean_ranks[j], j))
    left = order[: (k + 1) // 2]
    right = order[(k + 1) // 2 :]
    rows = max(len(left), len(right))
    height = 0.97 + 0.22 * rows + 0.12 * len(test.cliques())
    figure = Figure(figsize=(7.0, height), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-2.2, k + 3.2)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    ax.text((k + 1) / 2, 0.05, title, ha="center", va="top", fontsize=9)
    axis_y = 0.8
    ax.plot([1, k], [axis_y, axis_y], color="black", linewidth=0.8)
    for r in range(1, k + 1):
        ax.plot([r, r], [axis_y - 0.06, axis_y], color="black", linewidth=0.8)
        ax.text(r, axis_y - 0.09, str(r), ha="center", va="bottom", fontsize=8)
    cd = test.critical_difference
    if math.isfinite(cd):
        ax.plot([1, 1 + cd], [0.43, 0.43], color="black", linewidth=1.2)
        for x in (1, 1 + cd):
            ax.plot([x, x], [0.39, 0.47], color="black", linewidth=0.8)
        ax.text(1 + cd / 2, 0.37, f"{_TEXT[language]['cd']} = {cd:.2f}", ha="center", va="bottom", fontsize=8)
    clique_y = axis_y + 0.12
    for first, last in test.cliques():
        x0, x1 = test.mean_ranks[order[first]], test.mean_ranks[order[last]]
        ax.plot([x0 - 0.03, x1 + 0.03], [clique_y, clique_y], color="black", linewidth=2.5, solid_capstyle="butt")
        clique_y += 0.12
    label_y = clique_y + 0.12
    for side, members in (("left", left), ("right", right)):
        for i, j in enumerate(members if side == "left" else members[::-1]):
            rank = test.mean_ranks[j]
            y = label_y + 0.22 * i
            edge = 0.6 if side == "left" else k + 0.4
            ax.plot([rank, rank, edge], [axis_y, y, y], color="0.25", linewidth=0.7)
            text = f"{method_name(test.methods[j], language)} ({rank:.2f})"
            ax.text(edge - 0.05 if side == "left" else edge + 0.05, y, text, fontsize=8, va="center",
                    ha="right" if side == "left" else "left")
    return figure


def render_ranks_markdown(tests: dict[str, RankTest], metric: str, language: str = "ru") -> str:
    """Markdown: per data set the mean rank of every method, the Friedman test and the Nemenyi CD."""
    lines = [
        f"Mean ranks of {short_name(metric)} over the models of each data set (1 = best; ties share the "
        "average rank); Friedman test and Nemenyi critical difference (Demšar 2006). Methods whose "
        "mean ranks differ by less than CD are not significantly different.",
        "",
    ]
    for dataset, test in tests.items():
        names = [method_name(m, language) for m in test.methods]
        header = ["Data", "Models"] + names + ["Friedman χ²", "p", "CD"]
        row = [md_escape(dataset), str(test.n_models)] + [format(r, ".2f") for r in test.mean_ranks]
        row += [format_number(test.statistic, 2) or "—", _p(test.p_value), format_number(test.critical_difference, 2)]
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join([":--", "--:"] + ["--:"] * (len(header) - 2)) + "|",
                  "| " + " | ".join(row) + " |", ""]
        if test.too_few:
            lines += [
                f"*{md_escape(dataset)}: {test.n_models} model(s) and {len(test.methods)} methods are too few for "
                "this test to mean much: its χ² approximation, and so p and CD, hold as a rule of thumb only for "
                "more than 10 models and more than 5 methods (Demšar 2006, sec. 3.2.2). Read the ranks as a "
                "summary, not as evidence of a difference.*",
                "",
            ]
    return "\n".join(lines).rstrip("\n") + "\n"


def _p(p: float) -> str:
    if math.isnan(p):
        return "—"
    return "< 0.001" if p < 0.001 else format(p, ".3f")


def write_rank_report(
    metrics_csv, metric: str, md_path, figures: dict[str, tuple], *, alpha: float = 0.05, language: str = "ru"
) -> None:
    """Write the mean-rank table (``md_path``) and one CD diagram per data set (``figures``:
    ``{dataset: (png_path, pdf_path)}``; a data set without a test, e.g. one model only, gets a
    diagram of its single ranking)."""
    tests = dataset_rank_tests(read_metrics(metrics_csv), metric, alpha)
    for dataset, (png, pdf) in figures.items():
        if dataset not in tests:
            raise ValueError(f"{metrics_csv}: no complete row of {metric} for data set {dataset!r}")
        test = tests[dataset]
        t = _TEXT[language]
        stat = (f"{t['friedman']} χ² = {test.statistic:.2f}, p = {_p(test.p_value)}"
                if not math.isnan(test.statistic) else f"{test.n_models} {t['models']}")
        if test.too_few:
            stat += f" (N = {test.n_models}: {t['few']})"
        figure = build_cd_figure(test, title=f"{dataset_name(dataset)}, {short_name(metric)}: {stat}",
                                 language=language)
        with atomic_path(png) as tmp:
            figure.savefig(tmp, format="png", dpi=200, metadata=PNG_METADATA)
        with atomic_path(pdf) as tmp:
            figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
    write_text(md_path, render_ranks_markdown(tests, metric, language))
