"""Tables in the thesis's style (appendix, tables 1-5), as GitHub Markdown and as a LaTeX fragment.

One row per dataset/model (first-appearance order of ``metrics.csv``), the columns "Данные",
"Модель" and one per method; percent metrics x100; 3 decimals for accuracy, Brier and NLL,
2 for the ECE/MCE family; bold = every method whose unrounded value equals the row's best
unrounded value (see :mod:`calibrepro.report.metrics_file`). With several seeds a cell reads
``mean ± std`` (sample std over the seeds, same decimals as the metric) and bold goes by the mean.
A missing cell prints as a dash. With the run's convergence records
(:mod:`calibrepro.report.convergence_file`), a cell whose calibrator's fit did not converge (at any
seed used) is marked with a double dagger, one whose regularisation search stopped at its cap with
its best score at the grid's edge with a section sign; each mark is explained under the caption.

The ``.tex`` output is a ``table`` environment to ``\\input`` into a paper: booktabs rules, the
caption above the tabular as in the thesis, ``\\label{tab:calibrepro-<metric>}``, and the tabular
scaled down to ``\\linewidth`` only when it is wider. Output is byte-identical for the same input.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import jinja2

from calibrepro.io import write_text
from calibrepro.report.labels import (
    INTERVAL_NAMES,
    ROW_HEADERS,
    caption_text,
    check_language,
    format_number,
    header_lines,
    method_name,
    metric_spec,
)
from calibrepro.report.convergence_file import Convergence, read_convergence
from calibrepro.report.metrics_file import Cell, Metrics, read_metrics, table_cells
from calibrepro.report.uncertainty_files import Comparisons, Intervals, read_comparisons, read_intervals

TEMPLATES = Path(__file__).parent / "templates"

_TABLE_WORD = {"ru": "Таблица", "en": "Table"}
_SEEDS_NOTE = {
    "ru": "Среднее ± стандартное отклонение по разбиениям выборки (seed: {seeds}); жирным – лучшее среднее.",
    "en": "Mean ± standard deviation over splits of the data (seeds {seeds}); bold: best mean.",
}
_MISSING = {"md": "—", "tex": "--"}
_TIES_NOTE = {
    "ru": "Жирным также выделены методы, статистически неотличимые от лучшего: {level}%-й парный бутстреп-интервал "
    "их разности с лучшим (B = {b}) содержит 0{seeds}.",
    "en": "Bold also marks every method statistically tied with the best: the paired bootstrap {level}% interval of "
    "its difference to the best (B = {b}) contains 0{seeds}.",
}
_TIES_SEEDS = {"ru": " (при каждом разбиении)", "en": " (in every split)"}
_INTERVAL_NOTE = {
    "ru": "В скобках – {level}%-й бутстреп-интервал ({methods}) по тестовой выборке (B = {b}){seeds}.",
    "en": "In brackets: the {level}% bootstrap interval ({methods}) over the test half (B = {b}){seeds}.",
}
_CENTRE_MARK = {"md": "†", "tex": "$^\\dagger$"}
_CENTRE_NOTE = {
    "ru": "† – оценка лежит вне своего интервала; вместо неё приведена оценка с поправкой на смещение, к которой "
    "интервал относится.",
    "en": "†: the estimate lies outside its interval; shown instead is the bias-corrected estimate the interval "
    "belongs to.",
}
#: the marks of a cell's fit (:func:`fit_marks`), in the order they are printed, and their notes
_FIT_MARKS = {
    "not_converged": {"md": "‡", "tex": "$^\\ddagger$"},
    "search_capped": {"md": "§", "tex": "$^\\S$"},
}
_FIT_NOTES = {
    "not_converged": {
        "ru": "‡ – подгонка калибратора не сошлась (критерий остановки не достигнут; см. его JSON: stop_reason).",
        "en": "‡: the calibrator's fit did not converge (its stopping criterion was not met; see its JSON: stop_reason).",
    },
    "search_capped": {
        "ru": "§ – поиск силы регуляризации остановился на своём пределе с лучшей оценкой на краю сетки: "
        "лучшая сила может лежать за ней (расширьте calibrator_options: lambdas, mus).",
        "en": "§: the search for the regularisation strength stopped at its cap with its best score at the edge of "
        "the grid: the best strength may lie beyond it (widen calibrator_options: lambdas, mus).",
    },
}
_INTERVAL_SEEDS = {"ru": "; с несколькими разбиениями – средние границы", "en": "; with several splits, mean bounds"}


@functools.lru_cache(maxsize=None)
def environment(kind: str) -> jinja2.Environment:
    """Jinja2 environment for ``md`` (default delimiters) or ``tex`` (``<< >>``, ``<% %>``, ``<# #>``)."""
    options = dict(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    if kind == "tex":
        options.update(
            block_start_string="<%",
            block_end_string="%>",
            variable_start_string="<<",
            variable_end_string=">>",
            comment_start_string="<#",
            comment_end_string="#>",
        )
    return jinja2.Environment(**options)


# --------------------------------------------------------------------------- escaping

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "–": "--",
    "—": "---",
    "±": r"$\pm$",
    "‡": r"$^\ddagger$",
    "§": r"$^\S$",
    "λ": r"$\lambda$",
    "μ": r"$\mu$",
    "·": r"$\cdot$",
}


def tex_escape(text: str) -> str:
    """Escape LaTeX's special characters (``model_x0_5`` -> ``model\\_x0\\_5``)."""
    return "".join(_TEX_SPECIAL.get(char, char) for char in text)


def tex_caption(text: str) -> str:
    """A caption with light markup (``*emphasis*``, ``{l2}``) as LaTeX."""
    text = tex_escape(text.replace("{l2}", "\x00"))
    text = re.sub(r"\*(.+?)\*", r"\\emph{\1}", text)
    return text.replace("\x00", "$l_2$")


def md_caption(text: str) -> str:
    return text.replace("{l2}", "l2")


def md_escape(text: str) -> str:
    """Escape what would break a GFM table cell or start emphasis in a name.

    Underscores inside a word (``vgg11_bn``) are left alone: GFM never reads them as emphasis.
    """
    text = re.sub(r"([\\|*`<>\[\]])", r"\\\1", text)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)


# --------------------------------------------------------------------------- cells


def format_cell(
    cell: Cell | None,
    metric: str,
    kind: str,
    multi_seed: bool,
    interval: tuple[float, float, float] | None = None,
    fit: tuple[str, ...] = (),
) -> str:
    """The printed text of one cell for ``kind`` "md" or "tex"; ``interval`` (low, high, centre) replaces the std.

    Where the estimate lies outside its interval (a biased statistic's percentile-type interval can),
    the cell shows the interval's centre, the bias-corrected estimate, marked with a dagger.
    ``fit``: the marks of the fit behind the cell (:func:`fit_marks`: ``not_converged``, a double
    dagger; ``search_capped``, a section sign).
    """
    spec = metric_spec(metric)
    if cell is None or cell.n == 0:
        return _MISSING[kind]
    text = spec.format(cell.mean)
    if interval is not None:
        if not interval[0] <= cell.mean <= interval[1]:
            text = spec.format(interval[2]) + _CENTRE_MARK[kind]
        text = f"{text} [{spec.format(interval[0])}, {spec.format(interval[1])}]"
    elif multi_seed and cell.n > 1:
        std = format_number(spec.display(cell.std), spec.decimals)
        text = f"{text} ± {std}" if kind == "md" else f"{text} $\\pm$ {std}"
    if cell.bold:
        text = f"**{text}**" if kind == "md" else f"\\textbf{{{text}}}"
    for mark in fit:
        text += _FIT_MARKS[mark][kind]
    return text


def _tex_header(name: str) -> str:
    lines = [tex_escape(part) for part in header_lines(name)]
    if len(lines) == 1:
        return lines[0]
    return "\\begin{tabular}[b]{@{}c@{}}" + "\\\\".join(lines) + "\\end{tabular}"


def _caption(metric: str, language: str, bins: int, seeds: list[int]) -> str:
    text = caption_text(metric, language, bins)
    if len(seeds) > 1:
        text += " " + _SEEDS_NOTE[language].format(seeds=", ".join(str(s) for s in seeds))
    return text


def _level(level: float) -> str:
    return format(level * 100, "g")


def mark_ties(cells: dict, comparisons: Comparisons, metric: str, seeds: list[int]) -> dict:
    """Cells with bold added where the method is tied with its row's best at every seed used."""
    out = {}
    for (dataset, model, method), cell in cells.items():
        by_seed = comparisons.tied.get((dataset, model, method, metric), {})
        tied = bool(seeds) and all(by_seed.get(seed, False) for seed in seeds)
        out[(dataset, model, method)] = replace(cell, bold=cell.bold or tied)
    return out


def cell_intervals(intervals: Intervals, metric: str, seeds: list[int]) -> dict:
    """``(dataset, model, method) -> (low, high, centre)``: the interval, or the means over the seeds used."""
    out = {}
    for (dataset, model, method, name), by_seed in intervals.cells.items():
        if name != metric or not all(seed in by_seed for seed in seeds):
            continue
        out[(dataset, model, method)] = tuple(
            math.fsum(by_seed[seed][column] for seed in seeds) / len(seeds) for column in (1, 2, 3)
        )
    return out


def interval_methods(intervals: Intervals, metric: str, language: str) -> str:
    """The caption's name of the interval method(s) of ``metric``'s rows."""
    names = INTERVAL_NAMES[language]
    return ", ".join(names.get(m, m) for m in sorted(intervals.methods.get(metric, ())))


def fit_marks(convergence: Convergence | None, seeds: list[int]) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """``(dataset, model, method) -> marks`` of the cells whose fit, at any seed used, did not converge
    (``not_converged``) or ended its regularisation search at its cap (``search_capped``)."""
    marks: dict[tuple[str, str, str], tuple[str, ...]] = {}
    if convergence is None:
        return marks
    for mark, fits in (("not_converged", convergence.not_converged), ("search_capped", convergence.search_capped)):
        for dataset, model, method, seed in fits:
            key = (dataset, model, method)
            if seed in seeds and mark not in marks.get(key, ()):
                marks[key] = (*marks.get(key, ()), mark)
    return marks


def _uncertainty_notes(language: str, metric: str, used: list[int], cells: dict, comparisons: Comparisons | None,
                       intervals: Intervals | None, bounds: dict) -> str:
    """The caption's notes on tie marks (``comparisons``) and interval cells (``intervals``), each after a space."""
    multi = len(used) > 1
    notes = ""
    if comparisons is not None:
        notes += " " + _TIES_NOTE[language].format(
            level=_level(comparisons.level), b=comparisons.resamples, seeds=_TIES_SEEDS[language] if multi else ""
        )
    if intervals is not None:
        notes += " " + _INTERVAL_NOTE[language].format(
            level=_level(intervals.level), b=intervals.resamples, seeds=_INTERVAL_SEEDS[language] if multi else "",
            methods=interval_methods(intervals, metric, language),
        )
        if any(cells.get(key) is not None and cells[key].n and not bound[0] <= cells[key].mean <= bound[1]
               for key, bound in bounds.items()):
            notes += " " + _CENTRE_NOTE[language]
    return notes


def _fit_notes(language: str, marks: dict, cells: dict) -> str:
    """The caption's notes on the fit marks that some cell of the table carries, each after a space."""
    shown = {mark for key, of_cell in marks.items() if key in cells for mark in of_cell}
    return "".join(" " + _FIT_NOTES[mark][language] for mark in _FIT_MARKS if mark in shown)


# --------------------------------------------------------------------------- rendering


def render_table(
    metrics: Metrics | str | os.PathLike,
    metric: str,
    kind: str,
    *,
    language: str = "ru",
    seeds: list[int] | None = None,
    bins: int = 15,
    comparisons: Comparisons | None = None,
    intervals: Intervals | None = None,
    convergence: Convergence | None = None,
) -> str:
    """The table of ``metric`` as text; ``kind`` is "md" or "tex"; ``seeds`` restricts the seeds used.

    ``comparisons``: also bold every method tied with its row's best (paired bootstrap), with a note
    in the caption. ``intervals``: cells read ``estimate [low, high]`` instead of ``mean ± std``.
    ``convergence``: mark the cells whose fit did not converge or whose search was capped, with notes.
    """
    language = check_language(language)
    if kind not in ("md", "tex"):
        raise ValueError(f"kind must be 'md' or 'tex', got {kind!r}")
    if not isinstance(metrics, Metrics):
        metrics = read_metrics(metrics)
    rows, methods, used, cells = table_cells(metrics, metric, seeds)
    if comparisons is not None:
        cells = mark_ties(cells, comparisons, metric, used)
    bounds = {} if intervals is None else cell_intervals(intervals, metric, used)
    marks = fit_marks(convergence, used)
    caption = (_caption(metric, language, bins, used) + _uncertainty_notes(language, metric, used, cells, comparisons,
                                                                          intervals, bounds)
               + _fit_notes(language, marks, cells))
    body = [
        [dataset, model]
        + [format_cell(cells.get((dataset, model, m)), metric, kind, len(used) > 1, bounds.get((dataset, model, m)),
                       marks.get((dataset, model, m), ()))
           for m in methods]
        for dataset, model in rows
    ]
    names = [method_name(m, language) for m in methods]
    if kind == "md":
        return _markdown(metric, language, caption, names, body)
    return _latex(metric, language, caption, names, body, seeds=used)


def _markdown(metric: str, language: str, caption: str, names: list[str], body: list[list[str]]) -> str:
    """The GitHub Markdown table: the caption (with the thesis's table number), a padded header, the rows."""
    spec = metric_spec(metric)
    if spec.thesis_table is not None:
        caption = f"{_TABLE_WORD[language]} {spec.thesis_table}: {caption}"
    header = list(ROW_HEADERS[language]) + names
    body = [[md_escape(r[0]), md_escape(r[1])] + r[2:] for r in body]
    return md_table(md_caption(caption), header, body, numeric=[False, False] + [True] * len(names))


def md_table(caption: str | None, header: list[str], body: list[list[str]], *, numeric: list[bool]) -> str:
    """A GitHub Markdown table under ``caption``, its columns padded to one width: the ``numeric`` ones
    right-aligned, the others left-aligned (cells already escaped). ``caption`` None: the table alone,
    without its last line break (a table inside a longer document)."""
    widths = [max(3, *(len(line[i]) for line in [header] + body)) for i in range(len(header))]

    def pad(line):
        return [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(line, widths, numeric)]

    rule = [(("-" * (w + 1)) + ":") if num else (":" + "-" * (w + 1)) for w, num in zip(widths, numeric)]
    text = environment("md").get_template("table.md.j2").render(
        caption=caption, header=pad(header), rule=rule, rows=[pad(r) for r in body]
    )
    return text if caption is not None else text.rstrip("\n")


def _latex(metric: str, language: str, caption: str, names: list[str], body: list[list[str]], *,
           seeds: list[int]) -> str:
    """The LaTeX ``table`` fragment: the rows grouped by data set (a rule between groups)."""
    header = [_tex_header(h) for h in ROW_HEADERS[language]] + [_tex_header(n) for n in names]
    groups: list[list[list[str]]] = []
    previous = None
    for line in body:
        if line[0] != previous:
            groups.append([])
            previous = line[0]
        groups[-1].append([tex_escape(line[0]), tex_escape(line[1])] + line[2:])
    return environment("tex").get_template("table.tex.j2").render(
        metric=metric,
        label=re.sub(r"[^A-Za-z0-9-]", "-", metric),
        caption=tex_caption(caption),
        header=header,
        groups=groups,
        n_rows=len(body),
        n_methods=len(names),
        seeds=seeds,
        language=language,
    )


def write_table(
    metrics_csv,
    metric: str,
    md_path,
    tex_path,
    *,
    language: str = "ru",
    seeds: list[int] | None = None,
    bins: int = 15,
    convergence_csv=None,
    comparisons_csv=None,
    intervals_csv=None,
) -> None:
    """Write the table of ``metric`` from ``metrics_csv`` as Markdown (``md_path``) and LaTeX (``tex_path``).

    ``language``: "ru" (thesis captions and headers) or "en". ``seeds``: the seeds to use (default:
    every seed in the file; several give ``mean ± std`` cells). ``bins``: the number of bins named in
    the ECE/MCE captions. ``convergence_csv``: mark the cells of fits that did not converge or whose
    search was capped (the run's convergence records). ``comparisons_csv``: bold every statistically
    tied method too (config ``report.mark_ties``). ``intervals_csv``: cells with bootstrap intervals
    (``report.cells: interval``). Both files are written atomically.
    """
    metrics = read_metrics(metrics_csv)
    options = dict(
        language=language, seeds=seeds, bins=bins,
        convergence=None if convergence_csv is None else read_convergence(convergence_csv),
        comparisons=None if comparisons_csv is None else read_comparisons(comparisons_csv),
        intervals=None if intervals_csv is None else read_intervals(intervals_csv),
    )
    md = render_table(metrics, metric, "md", **options)
    tex = render_table(metrics, metric, "tex", **options)
    write_text(md_path, md)
    write_text(tex_path, tex)
