"""``reports/<name>/reproduction.md``: regenerated values against the published ones, cell by cell.

The cells are compared by the rules of :mod:`calibrepro.report.comparison` (identical at the printed
precision, difference, within split noise, inside our interval, bold). The report lists the misses
first, then a summary per table, per method and per model, the cells that could not be compared,
and finally every compared cell.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pandas as pd

from calibrepro.io import write_text
from calibrepro.report.comparison import Comparison, compare
from calibrepro.report.labels import INTERVAL_NAMES, check_language, format_number, method_name, short_name
from calibrepro.report.metrics_file import Metrics, read_metrics
from calibrepro.report.blog_claims import Numbers, check_claims, claims_lines
from calibrepro.report.published import load_published, main_table_cells
from calibrepro.report.tables import md_escape, md_table
from calibrepro.report.uncertainty_files import Intervals, read_intervals

_TEXT = {
    "en": {
        "title": "Reproduction of the published values",
        "published_bundled": "the thesis's appendix (tables 1-5), bundled as `calibrepro/data/thesis_appendix.csv`",
        "published_file": "`{path}`",
        "sources": "Published values: {published}. Regenerated values: `{metrics}`, split seed {seed} "
        "(seed 0 is the thesis's own split){noise}.",
        "noise_seeds": "; split noise from seeds {seeds}",
        "overall": "**Identical at the printed precision: {identical} of {compared} compared cells ({percent}).**",
        "overall_noise": " Within the split noise: {within} of {noisy}.",
        "overall_interval": " Inside our {level}% bootstrap interval: {inside} of {count}.",
        "interval_rule": "*inside interval* = the published value lies in our {level}% bootstrap interval ({methods}) "
        "of the seed-{seed} cell (B = {b} resamples of the test half, calibrators fixed), widened by half a unit "
        "of the last printed digit.",
        "interval": "Our {level}% interval",
        "inside": "Inside interval",
        "overall_none": "**No published cell has a regenerated value to compare with.**",
        "none_help": "This run's models ({ours}) have no published values in this file, so this report "
        "compares nothing. To compare them, write their "
        "published numbers to a CSV with the columns `dataset,model,method,metric,value` (values as printed, "
        "percent metrics in %, e.g. ECE `1.90`) and set `report.published` to its path in your config; "
        "`config/thesis.yaml` compares the thesis's models with its appendix.",
        "glance": "Per table: {items}.",
        "rules": "How to read: *identical* = our value formatted like the published number (same decimals, "
        "percent metrics x100) is the same string; *difference* = ours minus published, in printed units "
        "(percentage points for % metrics); *within noise* = |published - mean| <= {k} std + half a unit "
        "of the last printed digit, mean and sample std (ddof=1) over all seeds of the cell; *bold* = "
        "the methods bold in a row (best unrounded value, ties all bold) agree with the published bold cells.",
        "misses": "Misses",
        "no_misses": "None: every compared cell is identical at the printed precision.",
        "per_table": "Summary per table",
        "per_method": "Summary per method",
        "matrix": "Identical cells per table and method:",
        "per_model": "Summary per model",
        "not_compared": "Not compared",
        "missing_ours": "{count} published cell(s) of this run's models have no regenerated value: {what}.",
        "missing_published": "{count} regenerated cell(s) of the published metrics have no published value: {what}.",
        "unpublished_methods": "No published values exist for {what} (methods beyond the published table): their "
        "columns are regenerated values only.",
        "nothing_missing": "Every published cell of this run's models has a regenerated value.",
        "sweep_cells": "{count} published cell(s) of calibration-set-size sweeps are compared with the size study "
        "in its table (`tables/size_study.md`).",
        "all_cells": "All compared cells",
        "table": "Table",
        "metric": "Metric",
        "data": "Data",
        "model": "Model",
        "method": "Method",
        "published": "Published",
        "ours": "Ours (seed {seed})",
        "difference": "Difference",
        "noise": "Seeds mean ± std",
        "within": "Within noise",
        "identical": "Identical",
        "max_diff": "Max abs difference",
        "bold_rows": "Bold agrees (rows)",
        "yes": "yes",
        "no": "no",
        "na": "n/a",
        "n_cells": "Cells",
        "identical_short": "identical",
    },
    "ru": {
        "title": "Воспроизведение опубликованных значений",
        "published_bundled": "приложение диплома (таблицы 1-5), в пакете: `calibrepro/data/thesis_appendix.csv`",
        "published_file": "`{path}`",
        "sources": "Опубликованные значения: {published}. Полученные значения: `{metrics}`, seed разбиения "
        "{seed} (seed 0 – разбиение самой работы){noise}.",
        "noise_seeds": "; разброс по разбиениям – seed {seeds}",
        "overall": "**Совпадают с точностью печати: {identical} из {compared} сравненных ячеек ({percent}).**",
        "overall_noise": " В пределах разброса по разбиениям: {within} из {noisy}.",
        "overall_interval": " Внутри нашего {level}%-го бутстреп-интервала: {inside} из {count}.",
        "interval_rule": "*внутри интервала* – опубликованное значение лежит в нашем {level}%-м бутстреп-интервале "
        "({methods}) ячейки seed {seed} (B = {b} выборок тестовой части, калибраторы фиксированы), "
        "расширенном на половину единицы последнего знака.",
        "interval": "Наш {level}%-й интервал",
        "inside": "Внутри интервала",
        "overall_none": "**Ни одной опубликованной ячейке не соответствует полученное значение.**",
        "none_help": "Для моделей этого запуска ({ours}) в этом файле нет опубликованных значений, "
        "поэтому отчёт ничего не сравнивает. Чтобы сравнить их, "
        "запишите опубликованные числа в CSV со столбцами `dataset,model,method,metric,value` (значения как "
        "напечатаны, метрики в % – в процентах, например ECE `1.90`) и укажите путь к нему в `report.published`; "
        "`config/thesis.yaml` сравнивает модели диплома с его приложением.",
        "glance": "По таблицам: {items}.",
        "rules": "Как читать: *совпадает* – наше значение, напечатанное как опубликованное (столько же знаков, "
        "метрики в % умножены на 100), даёт ту же строку; *разность* – наше минус опубликованное, в единицах "
        "печати (процентные пункты для метрик в %); *в пределах разброса* – |опубликованное - среднее| <= "
        "{k} std + половина единицы последнего знака, среднее и выборочное std (ddof=1) по всем seed ячейки; "
        "*жирный* – жирные методы строки (лучшее неокруглённое значение, все при точном равенстве) совпадают "
        "с опубликованными.",
        "misses": "Несовпадения",
        "no_misses": "Нет: все сравненные ячейки совпадают с точностью печати.",
        "per_table": "Итоги по таблицам",
        "per_method": "Итоги по методам",
        "matrix": "Совпадающие ячейки по таблицам и методам:",
        "per_model": "Итоги по моделям",
        "not_compared": "Не сравнивались",
        "missing_ours": "Опубликованных ячеек моделей этого запуска без полученного значения: {count} ({what}).",
        "missing_published": "Полученных ячеек опубликованных метрик без опубликованного значения: {count} ({what}).",
        "unpublished_methods": "Для методов {what} (вне опубликованной таблицы) опубликованных значений нет: "
        "их столбцы содержат только полученные значения.",
        "nothing_missing": "Для каждой опубликованной ячейки моделей этого запуска есть полученное значение.",
        "sweep_cells": "Опубликованных ячеек зависимости от размера калибровочной выборки: {count}; они сравниваются "
        "с исследованием размера в его таблице (`tables/size_study.md`).",
        "all_cells": "Все сравненные ячейки",
        "table": "Таблица",
        "metric": "Метрика",
        "data": "Данные",
        "model": "Модель",
        "method": "Метод",
        "published": "Опубликовано",
        "ours": "Получено (seed {seed})",
        "difference": "Разность",
        "noise": "Среднее ± std по seed",
        "within": "В пределах разброса",
        "identical": "Совпадают",
        "max_diff": "Макс. модуль разности",
        "bold_rows": "Жирный совпадает (строки)",
        "yes": "да",
        "no": "нет",
        "na": "н/д",
        "n_cells": "Ячеек",
        "identical_short": "совпадают",
    },
}


# --------------------------------------------------------------------------- Markdown helpers


def interval_methods_text(intervals: Intervals, language: str) -> str:
    """The interval methods of the intervals file, each with its metrics ("basic: ECE, %, MCE, %; ...")."""
    names = INTERVAL_NAMES[language]
    by_method: dict[str, list[str]] = {}
    for metric, methods in intervals.methods.items():
        for method in sorted(methods):
            by_method.setdefault(method, []).append(short_name(metric))
    if len(by_method) == 1:
        return names.get(next(iter(by_method)), next(iter(by_method)))
    return "; ".join(f"{names.get(m, m)}: {', '.join(metrics)}" for m, metrics in sorted(by_method.items()))


def _grid(header: list[str], rows: list[list[str]], numeric: list[bool]) -> str:
    return md_table(None, header, rows, numeric=numeric)


def _ratio(part: int, whole: int) -> str:
    return f"{part}/{whole}"


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f} %" if whole else "n/a"


def _groups(items, key) -> "OrderedDict":
    groups: OrderedDict = OrderedDict()
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _max_abs(cells: list[Comparison]) -> str:
    diffs = [(abs(Decimal(c.difference)), c.decimals) for c in cells if c.difference is not None]
    if not diffs:
        return "—"
    value, _ = max(diffs)
    decimals = max(d for _, d in diffs)
    return f"{value:.{decimals}f}"


def _table_label(table: str, metric: str) -> str:
    name = short_name(metric)
    return name if table == metric else f"{table}: {name}"


def _shorten(names: list[str], limit: int = 8) -> str:
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", … (+{len(names) - limit})"


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class _Context:
    """What every section of the report reads: its words, the seed compared, which optional columns it has."""

    t: dict
    language: str
    seed: int
    #: the bootstrap intervals' level in percent ("" without intervals)
    level: str
    has_noise: bool
    has_interval: bool

    def yes_no(self, flag: bool | None) -> str:
        t = self.t
        return t["na"] if flag is None else (t["yes"] if flag else t["no"])


def _stats(cells: list[Comparison]) -> tuple[int, int, int, int]:
    """Identical cells and cells with a value at the seed; cells within the noise and cells with a noise estimate."""
    at_seed = [c for c in cells if c.identical is not None]
    noisy = [c for c in cells if c.within_noise is not None]
    return (sum(c.identical for c in at_seed), len(at_seed), sum(c.within_noise for c in noisy), len(noisy))


def render_reproduction(
    metrics: Metrics,
    published: pd.DataFrame,
    *,
    metrics_label: str = "results/<name>/metrics.csv",
    published_label: str | None = None,
    language: str = "en",
    seed: int = 0,
    noise_sigmas: float = 2.0,
    intervals: Intervals | None = None,
    sweep_cells: int = 0,
) -> str:
    """The reproduction report as Markdown text (``published_label`` None = the bundled thesis values);
    ``intervals`` adds whether each published value lies inside our bootstrap interval; ``sweep_cells``
    counts the published size-sweep cells left to the size study's table."""
    t = _TEXT[check_language(language)]
    comparisons, unmatched, extra = compare(
        metrics, published, seed=seed, noise_sigmas=noise_sigmas, intervals=intervals
    )
    ctx = _Context(
        t, language, seed, level="" if intervals is None else format(intervals.level * 100, "g"),
        has_noise=any(c.within_noise is not None for c in comparisons),
        has_interval=any(c.inside_interval is not None for c in comparisons),
    )
    out = _opening(ctx, metrics, comparisons, metrics_label, published_label)
    out += _reading_rules(ctx, noise_sigmas, intervals)
    if comparisons:
        misses = [c for c in comparisons if c.missed]
        out += [f"## {t['misses']} ({len(misses)})", ""]
        out += [_grid(*_cell_rows(ctx, misses)) if misses else t["no_misses"], ""]
        out += _summaries(ctx, comparisons, published)
    out += _not_compared(ctx, metrics, comparisons, unmatched, extra, published, sweep_cells)
    if comparisons:
        out += [f"## {t['all_cells']}", ""]
        out += [_grid(*_cell_rows(ctx, comparisons))]
    return "\n".join(out).rstrip("\n") + "\n"


def _opening(ctx: _Context, metrics: Metrics, comparisons: list[Comparison], metrics_label: str,
             published_label: str | None) -> list[str]:
    """The title, what is compared with what, and the overall result (or why nothing was compared)."""
    t = ctx.t
    noise_seeds = metrics.seeds if len(metrics.seeds) > 1 else []
    out: list[str] = [f"# {t['title']}", ""]
    published_text = (
        t["published_bundled"] if published_label is None else t["published_file"].format(path=published_label)
    )
    noise_text = t["noise_seeds"].format(seeds=", ".join(map(str, noise_seeds))) if noise_seeds else ""
    out += [t["sources"].format(published=published_text, metrics=metrics_label, seed=ctx.seed, noise=noise_text), ""]
    if not comparisons:
        ours = md_escape(_shorten([f"{dataset}/{model}" for dataset, model in metrics.rows]))
        return out + [t["overall_none"], "", t["none_help"].format(ours=ours), ""]
    identical, compared, within, noisy = _stats(comparisons)
    line = t["overall"].format(identical=identical, compared=compared, percent=_percent(identical, compared))
    if ctx.has_noise:
        line += t["overall_noise"].format(within=within, noisy=noisy)
    if ctx.has_interval:
        checked = [c for c in comparisons if c.inside_interval is not None]
        line += t["overall_interval"].format(
            level=ctx.level, inside=sum(c.inside_interval for c in checked), count=len(checked)
        )
    items = []
    for (table, metric), cells in _groups(comparisons, lambda c: (c.table, c.metric)).items():
        i, n, _, _ = _stats(cells)
        items.append(f"{_table_label(table, metric)} – {_ratio(i, n)} {t['identical_short']}")
    return out + [line, "", t["glance"].format(items="; ".join(items)), ""]


def _reading_rules(ctx: _Context, noise_sigmas: float, intervals: Intervals | None) -> list[str]:
    """How to read the columns (and, with intervals, what *inside interval* means)."""
    out = [ctx.t["rules"].format(k=format(noise_sigmas, "g")), ""]
    if ctx.has_interval:
        out += [ctx.t["interval_rule"].format(level=ctx.level, seed=ctx.seed, b=intervals.resamples,
                                              methods=interval_methods_text(intervals, ctx.language)), ""]
    return out


def _cell_rows(ctx: _Context, cells: list[Comparison]) -> tuple[list[str], list[list[str]], list[bool]]:
    """Header, rows and numeric columns of a table of compared cells."""
    t = ctx.t
    header = [t["table"], t["data"], t["model"], t["method"], t["published"], t["ours"].format(seed=ctx.seed),
              t["difference"]]
    numeric = [False, False, False, False, True, True, True]
    if ctx.has_noise:
        header += [t["noise"], t["within"]]
        numeric += [True, False]
    if ctx.has_interval:
        header += [t["interval"].format(level=ctx.level), t["inside"]]
        numeric += [True, False]
    rows = []
    for c in cells:
        pub = f"**{c.published}**" if c.published_bold else c.published
        ours = "—" if c.ours is None else (f"**{c.ours}**" if c.ours_bold else c.ours)
        row = [_table_label(c.table, c.metric), md_escape(c.dataset), md_escape(c.model),
               method_name(c.method, ctx.language), pub, ours, c.difference or "—"]
        if ctx.has_noise:
            if c.noise_n >= 2:
                d = c.decimals + 1
                row += [f"{format_number(c.noise_mean, d)} ± {format_number(c.noise_std, d)}",
                        ctx.yes_no(c.within_noise)]
            else:
                row += ["—", t["na"]]
        if ctx.has_interval:
            if c.interval is None:
                row += ["—", t["na"]]
            else:
                d = c.decimals + 1
                row += [f"[{format_number(c.interval[0], d)}, {format_number(c.interval[1], d)}]",
                        ctx.yes_no(c.inside_interval)]
        rows.append(row)
    return header, rows, numeric


def _summary(ctx: _Context, groups, label_columns: list[str], label_of, max_diff: bool = False):
    """Counts per group; the max |difference| only per table (one metric, one unit)."""
    t = ctx.t
    header = label_columns + [t["n_cells"], t["identical"]] + ([t["within"]] if ctx.has_noise else [])
    numeric = [False] * len(label_columns) + [True, True] + ([True] if ctx.has_noise else [])
    rows = []
    for key, cells in groups.items():
        i, n, w, m = _stats(cells)
        row = label_of(key) + [str(len(cells)), _ratio(i, n)] + ([_ratio(w, m)] if ctx.has_noise else [])
        rows.append(row + ([_max_abs(cells)] if max_diff else []))
    if max_diff:
        header, numeric = header + [t["max_diff"]], numeric + [True]
    return header, rows, numeric


def _summaries(ctx: _Context, comparisons: list[Comparison], published: pd.DataFrame) -> list[str]:
    """The summaries per table (with the bold agreement), per table and method, per method and per model."""
    t, by_table = ctx.t, _groups(comparisons, lambda c: (c.table, c.metric))
    header, rows, numeric = _summary(ctx, by_table, [t["table"]], lambda k: [_table_label(*k)], max_diff=True)
    header.append(t["bold_rows"])
    numeric.append(True)
    for row, ((_, metric), cells) in zip(rows, by_table.items()):
        row.append(_bold_agreement(cells, published[published["metric"] == metric]))
    out = [f"## {t['per_table']}", "", _grid(header, rows, numeric), ""]
    out += [t["matrix"], "", _grid(*_identical_per_method(ctx, comparisons, by_table)), ""]
    out += [f"## {t['per_method']}", "", _grid(*_summary(
        ctx, _groups(comparisons, lambda c: c.method), [t["method"]], lambda k: [method_name(k, ctx.language)]
    )), ""]
    out += [f"## {t['per_model']}", "", _grid(*_summary(
        ctx, _groups(comparisons, lambda c: (c.dataset, c.model)), [t["data"], t["model"]],
        lambda k: [md_escape(k[0]), md_escape(k[1])],
    )), ""]
    return out


def _bold_agreement(cells: list[Comparison], published_rows: pd.DataFrame) -> str:
    """Rows of one table whose bold methods agree with the published ones, of the rows where every
    published method has a regenerated seed value."""
    complete = agree = 0
    sizes = published_rows.groupby(["dataset", "model"], sort=False).size()
    for (dataset, model), group in _groups(cells, lambda c: (c.dataset, c.model)).items():
        if len(group) != sizes.get((dataset, model), -1) or any(c.ours_bold is None for c in group):
            continue
        complete += 1
        agree += all(c.ours_bold == c.published_bold for c in group)
    return _ratio(agree, complete)


def _identical_per_method(ctx: _Context, comparisons: list[Comparison], by_table) -> tuple[list, list, list]:
    """Identical cells per table and method ("ECE, %: 31/32"): header, rows, numeric columns."""
    methods = list(OrderedDict.fromkeys(c.method for c in comparisons))
    rows = []
    for (table, metric), cells in by_table.items():
        by_method = _groups(cells, lambda c: c.method)
        row = [_table_label(table, metric)]
        for method in methods:
            i, n, _, _ = _stats(by_method.get(method, []))
            row.append(_ratio(i, n) if n else "—")
        rows.append(row)
    return [ctx.t["table"]] + [method_name(m, ctx.language) for m in methods], rows, [False] + [True] * len(methods)


def _not_compared(ctx: _Context, metrics: Metrics, comparisons: list[Comparison], unmatched: pd.DataFrame,
                  extra: list, published: pd.DataFrame, sweep_cells: int) -> list[str]:
    """What could not be compared: published cells of this run's models without our value, our cells
    without a published one (and methods beyond the published table), the size-sweep cells."""
    t = ctx.t
    notes = []
    ours = set(metrics.rows)  # published cells of models this run does not have are not its business
    unmatched = unmatched[[key in ours for key in zip(unmatched["dataset"], unmatched["model"])]]
    if len(unmatched):
        names = list(OrderedDict.fromkeys(f"{d}/{m}" for d, m in zip(unmatched["dataset"], unmatched["model"])))
        notes.append("- " + t["missing_ours"].format(count=len(unmatched), what=md_escape(_shorten(names))))
    elif comparisons:  # without any, the opening lines already say that none of the run's models is published
        notes.append("- " + t["nothing_missing"])
    if extra:
        names = list(OrderedDict.fromkeys(f"{d}/{m}" for d, m, _, _ in extra))
        notes.append("- " + t["missing_published"].format(count=len(extra), what=md_escape(_shorten(names))))
        unpublished = [m for m in OrderedDict.fromkeys(key[2] for key in extra) if m not in set(published["method"])]
        if unpublished:  # methods beyond the published ones (e.g. Dir-L2, ETS): say so, no gap
            names = [method_name(m, ctx.language) for m in unpublished]
            notes.append("- " + t["unpublished_methods"].format(what=md_escape(", ".join(names))))
    if sweep_cells:
        notes.append("- " + t["sweep_cells"].format(count=sweep_cells))
    return [f"## {t['not_compared']}", ""] + notes + [""]


def write_reproduction_report(
    metrics_csv,
    md_path,
    *,
    published_csv=None,
    language: str = "en",
    seed: int = 0,
    noise_sigmas: float = 2.0,
    intervals_csv=None,
    size_study_csv=None,
    conformal_csv=None,
    curves_md=None,
) -> None:
    """Write ``md_path``: published values (``published_csv``, None = the bundled thesis appendix)
    against ``metrics_csv`` at split ``seed`` (0 = the thesis's split), with the split noise from
    every seed in the file when there are several (rule: ``noise_sigmas`` std + half a printed unit),
    and with ``intervals_csv`` whether each published value lies inside our bootstrap interval. A run
    with the blog's networks gains the blog's findings as verdicts (:mod:`calibrepro.report.blog_claims`,
    the small-set finding from ``size_study_csv``), and with ``conformal_csv`` the verdicts of the
    conformal findings (:mod:`calibrepro.report.conformal`) at the end, and ``curves_md`` (the findings of
    calibration over training, :mod:`calibrepro.report.curve_claims`) after them."""
    from calibrepro.report.size_study import read_size_study  # matplotlib: only when writing the report

    metrics = read_metrics(metrics_csv)
    published = load_published(published_csv)
    intervals = None if intervals_csv is None else read_intervals(intervals_csv)
    text = render_reproduction(
        metrics,
        main_table_cells(published),
        sweep_cells=len(published) - len(main_table_cells(published)),
        metrics_label=os.fspath(metrics_csv),
        published_label=None if published_csv is None else os.fspath(published_csv),
        language=language,
        seed=seed,
        noise_sigmas=noise_sigmas,
        intervals=intervals,
    )
    sizes = read_size_study(size_study_csv, "ece") if size_study_csv is not None else None
    claims = check_claims(Numbers(metrics.values, intervals.cells if intervals else None, sizes, seed))
    if claims:
        text = text.rstrip("\n") + "\n\n" + "\n".join(claims_lines(claims, intervals.level if intervals else None))
    if conformal_csv is not None:
        from calibrepro.report.conformal import render_conformal_claims

        text += "\n" + render_conformal_claims(conformal_csv, language)
    if curves_md is not None:
        text += "\n" + Path(curves_md).read_text(encoding="utf-8")
    write_text(md_path, text)
