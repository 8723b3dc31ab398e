"""The conformal part of the report: its tables, the set size and CovGap against the temperature, the verdicts.

* ``reports/<name>/tables/conformal.md`` and ``.tex``: per data set, score and alpha, one row per model and
  one column per calibrator, for the marginal coverage (%), the mean set size and the CovGap (%): the means
  over the repeats of ``results/<name>/conformal.csv`` (:mod:`calibrepro.conformal.metrics` defines them).
  The coverage caption gives the finite-sample range ``[1 - alpha, 1 - alpha + 1/(n + 1)]``.
* ``reports/<name>/figures/conformal/{dataset}/{model}.png`` and ``.pdf``: the mean set size and the CovGap of
  the sets built on ``softmax(z / T)`` against T (log axis; Dabah & Tirer 2025, Fig. 1), a line per score
  and alpha, the fitted temperature of temperature scaling marked by a vertical line.
* the section of ``reports/<name>/reproduction.md`` with the verdicts of :mod:`calibrepro.conformal.claims`.

Drawn with matplotlib's object-oriented API, byte-stable as :mod:`calibrepro.report.figures`.
"""

from __future__ import annotations

from calibrepro.conformal.claims import LITTLE, PUBLISHED, SCORE_NAMES, conformal_claims, coverage_check
from calibrepro.conformal.results import read_conformal, read_sweep
from calibrepro.io import atomic_path, write_text
from calibrepro.report.labels import check_language, method_name
from calibrepro.report.tables import md_escape, md_table, tex_escape

_TEXT = {
    "en": {
        "title": "Conformal prediction sets",
        "coverage": "marginal coverage, % (finite-sample range [{low:.4g}, {high:.4g}] %)",
        "size": "mean set size",
        "covgap": "class-conditional coverage gap CovGap, %",
        "model": "Model",
        "repeats": "Means over {repeats} conformal splits of the test half (`results/<name>/conformal.csv` has "
        "their 95 % t-intervals, the size distribution, the singleton and empty rates and the size-stratified "
        "coverage).",
        "claims": "Conformal prediction: what each calibrator does to the sets",
        "claims_intro": "The findings of Dabah & Tirer (ICML 2025) and Xi et al. (TMLR 2025) for temperature "
        "scaling, asked of every calibrator against the uncalibrated model, per data set over its models "
        "(`results/<name>/conformal.csv`; \"changes little\": within {little:.0%}). Only the temperature-scaling "
        "rows are published; the others are new.",
        "findings": {
            "enlarges": "enlarges the APS and RAPS sets (mean set size)",
            "covgap": "lowers the CovGap of APS and RAPS",
            "lac_size": "changes LAC's mean set size little",
        },
        "header": ["Data", "Calibrator", "Finding", "Ours (uncalibrated → calibrated)", "Verdict"],
        "published": " (published)",
        "coverage_check": "Coverage guarantee: in {inside} of {cells} cells (model, calibrator, score, alpha) the mean "
        "coverage's 95 % interval over the repeats overlaps the finite-sample range [1 - alpha, 1 - alpha + "
        "1/(n + 1)].{misses}",
        "coverage_misses": " Below it: {below}; above it: {above}. A 95 % interval misses in about 1 of 20 cells by "
        "chance; ties in the probabilities (histogram binning's steps, saturated softmax values) make sets over-cover.",
        "axis": "temperature T (softmax(z / T))",
        "fitted": "fitted TS: T = {t:.3g}",
    },
    "ru": {
        "title": "Конформные множества предсказаний",
        "coverage": "маргинальное покрытие, % (конечновыборочный диапазон [{low:.4g}, {high:.4g}] %)",
        "size": "средний размер множества",
        "covgap": "разрыв условного по классу покрытия CovGap, %",
        "model": "Модель",
        "repeats": "Средние по {repeats} конформным разбиениям тестовой части (`results/<name>/conformal.csv`: "
        "их 95%-е t-интервалы, распределение размеров, доли одноэлементных и пустых множеств, покрытие по размеру).",
        "claims": "Конформное предсказание: что каждый калибратор делает с множествами",
        "claims_intro": "Выводы Dabah & Tirer (ICML 2025) и Xi et al. (TMLR 2025) для температурного "
        "шкалирования, проверенные для каждого калибратора относительно некалиброванной модели, по каждому набору "
        "данных по его моделям (`results/<name>/conformal.csv`; «меняется мало»: в пределах {little:.0%}). "
        "Опубликованы только строки температурного шкалирования.",
        "findings": {
            "enlarges": "увеличивает множества APS и RAPS (средний размер)",
            "covgap": "уменьшает CovGap для APS и RAPS",
            "lac_size": "мало меняет средний размер множеств LAC",
        },
        "header": ["Данные", "Калибратор", "Вывод", "Наше (до → после калибровки)", "Вердикт"],
        "published": " (опубликовано)",
        "coverage_check": "Гарантия покрытия: в {inside} из {cells} ячеек (модель, калибратор, score, alpha) 95%-й "
        "интервал среднего покрытия по повторам пересекает диапазон [1 - alpha, 1 - alpha + 1/(n + 1)].{misses}",
        "coverage_misses": " Ниже: {below}; выше: {above}. 95%-й интервал промахивается примерно в 1 из 20 ячеек "
        "случайно; совпадающие вероятности (ступени гистограммной калибровки, насыщенный softmax) дают избыточное "
        "покрытие.",
        "axis": "температура T (softmax(z / T))",
        "fitted": "TS: T = {t:.3g}",
    },
}
#: the tables' metrics: name -> (factor, decimals)
TABLE_METRICS = {"coverage": (100.0, 2), "size": (1.0, 3), "covgap": (100.0, 2)}


def _groups(cells) -> dict:
    """(dataset, score, alpha) -> {model: {method: metrics}} in file order."""
    groups: dict = {}
    for (dataset, model, method, score, alpha), values in cells.items():
        groups.setdefault((dataset, score, alpha), {}).setdefault(model, {})[method] = values
    return groups


def _tables(cells, language: str):
    """``(caption, header, rows)`` of every table."""
    t = _TEXT[check_language(language)]
    out = []
    for (dataset, score, alpha), models in _groups(cells).items():
        methods = list(dict.fromkeys(m for by_method in models.values() for m in by_method))
        for metric, (factor, decimals) in TABLE_METRICS.items():
            first = next(iter(next(iter(models.values())).values()))
            what = t[metric].format(low=100 * first["bound_low"], high=100 * first["bound_high"])
            caption = f"{dataset}, {SCORE_NAMES[score]}, α = {alpha:g}: {what}"
            rows = [[model] + [format(factor * by_method[m][metric], f".{decimals}f") if m in by_method else "—"
                               for m in methods] for model, by_method in models.items()]
            out.append((caption, [t["model"]] + [method_name(m, language) for m in methods], rows))
    return out


def render_conformal_tables(cells, language: str = "en") -> tuple[str, str]:
    """The Markdown and LaTeX text of the conformal tables (module docstring)."""
    t = _TEXT[check_language(language)]
    repeats = int(next(iter(cells.values()))["repeats"]) if cells else 0
    md = [f"# {t['title']}", "", t["repeats"].format(repeats=repeats), ""]
    tex = []
    for caption, header, rows in _tables(cells, language):
        md += [f"**{md_escape(caption)}**", "", md_table(None, header, [[md_escape(r[0]), *r[1:]] for r in rows],
                                                         numeric=[False] + [True] * (len(header) - 1)), ""]
        columns = "l" + "r" * (len(header) - 1)
        body = [" & ".join([tex_escape(r[0]), *r[1:]]) + r" \\" for r in rows]
        tex += [r"\begin{table}[ht]", r"\centering", rf"\caption{{{tex_escape(caption)}}}",
                rf"\begin{{tabular}}{{{columns}}}", r"\toprule", " & ".join(map(tex_escape, header)) + r" \\",
                r"\midrule", *body, r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(md).rstrip("\n") + "\n", "\n".join(tex)


def write_conformal_tables(conformal_csv, md_path, tex_path, *, language: str = "en") -> None:
    md, tex = render_conformal_tables(read_conformal(conformal_csv), language)
    write_text(md_path, md)
    write_text(tex_path, tex)


def render_conformal_claims(conformal_csv, language: str = "en") -> str:
    """The verdicts section of the reproduction report (:mod:`calibrepro.conformal.claims`)."""
    t = _TEXT[check_language(language)]
    cells = read_conformal(conformal_csv)
    count, misses = coverage_check(cells)

    def listed(keys) -> str:
        names = [f"{d}/{m} {method_name(c, language)} {SCORE_NAMES[s]} α={a:g}" for d, m, c, s, a in keys]
        return md_escape(", ".join(names[:10]) + (f", … (+{len(names) - 10})" if len(names) > 10 else "") or "—")

    below = [key for key in misses if cells[key]["coverage_high"] < cells[key]["bound_low"]]
    above = [key for key in misses if key not in below]
    check = t["coverage_check"].format(
        inside=count - len(misses), cells=count,
        misses=t["coverage_misses"].format(below=listed(below), above=listed(above)) if misses else "")
    rows = []
    for claim in conformal_claims(cells):
        name = method_name(claim.method, language) + (t["published"] if claim.method == PUBLISHED else "")
        rows.append([md_escape(claim.dataset), name, t["findings"][claim.finding], md_escape(claim.ours),
                     md_escape(claim.verdict)])
    table = md_table(None, t["header"], rows, numeric=[False] * 5) if rows else ""
    return "\n".join([f"## {t['claims']}", "", check, "", t["claims_intro"].format(little=LITTLE), "", table, ""])


def build_sweep_figure(sweep, temperature: float | None, title: str, language: str = "en"):
    """Two panels: mean set size and CovGap (%) against T, a line per score and alpha; ``temperature``: the
    fitted TS temperature, marked (None: not configured)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    t = _TEXT[check_language(language)]
    figure = Figure(figsize=(7.0, 2.8), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2)
    colours = {"lac": "#1f77b4", "aps": "#d62728", "raps": "#2ca02c"}
    styles = ("-", "--", ":", "-.")
    alphas = sorted({row[2] for row in sweep}, reverse=True)
    for ax, metric, factor in ((axes[0], "size", 1.0), (axes[1], "covgap", 100.0)):
        for score in dict.fromkeys(row[1] for row in sweep):
            for i, alpha in enumerate(alphas):
                points = sorted((T, v) for T, s, a, m, v in sweep if s == score and a == alpha and m == metric)
                ax.plot([p[0] for p in points], [factor * p[1] for p in points], color=colours.get(score, "0.3"),
                        linestyle=styles[i % len(styles)], linewidth=1.0, marker="o", markersize=2,
                        label=f"{SCORE_NAMES.get(score, score)}, α = {alpha:g}")
        if temperature is not None:
            ax.axvline(temperature, color="0.2", linewidth=0.8, linestyle="--",
                       label=t["fitted"].format(t=temperature))
        ax.set_xscale("log")
        temperatures = [row[0] for row in sweep] or [1.0]  # none: no alpha fits the conformal calibration part
        ticks = [tick for tick in (0.25, 0.5, 1, 2, 4) if min(temperatures) <= tick <= max(temperatures)]
        ax.set_xticks(ticks, labels=[format(tick, "g") for tick in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(t["axis"], fontsize=8)
        ax.set_ylabel(t["size"] if metric == "size" else "CovGap, %", fontsize=8)
        ax.tick_params(labelsize=7, length=2.5, width=0.6, pad=2)
        ax.grid(color="0.9", linewidth=0.5)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=max(1, min(4, len(labels))), fontsize=7, frameon=False)
    figure.suptitle(title, fontsize=10)
    return figure


def write_sweep_figure(sweep_csv, temperature: float | None, png, pdf, *, title: str, language: str = "en") -> None:
    from calibrepro.report.figures import PDF_METADATA, PNG_METADATA

    figure = build_sweep_figure(read_sweep(sweep_csv), temperature, title, language)
    with atomic_path(png) as tmp:
        figure.savefig(tmp, format="png", dpi=200, metadata=PNG_METADATA)
    with atomic_path(pdf) as tmp:
        figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
