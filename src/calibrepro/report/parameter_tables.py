"""The tables of fitted parameters: a parameters file (:mod:`calibrepro.report.parameters_file`) as Markdown and LaTeX.

One table per method, in the file's order (the run's), headed by the method's name and the paper it comes
from: a row per data set and model (and seed, or split, where the file has several), a column per number
the method's fits have (:data:`calibrepro.report.labels.PARAMETER_NAMES`), in the file's order. Numbers
print with four significant digits (:func:`calibrepro.report.labels.format_parameter`; the CSV holds them
exactly), integers as they are, the yes/no numbers as words; a number a fit lacks is a dash. Methods
without numbers (the uncalibrated column) have no table. The ``.tex`` file holds one booktabs ``table``
per method, labelled ``tab:calibrepro-parameters-<method>`` (``-regression-parameters-`` for regression).
Equal files give equal bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from calibrepro.io import write_csv, write_text
from calibrepro.report.labels import (
    PARAMETER_CAPTIONS, PARAMETER_NAMES, PARAMETERS_TITLE, ROW_HEADERS, SEED_HEADERS, YES_NO, check_language,
    format_parameter, method_name,
)
from calibrepro.report.parameters_file import FLAGS, COLUMNS, Parameters, read_parameters
from calibrepro.report.tables import environment, md_escape, md_table, tex_caption, tex_escape


def _value(parameter: str, value: int | float, language: str) -> str:
    if parameter in FLAGS:
        return YES_NO[language][0 if value else 1]
    return format_parameter(value)


#: ``titles(method, language) -> (display name, paper)`` of a task's methods; the report knows the calibrators'
#: (:func:`calibrator_title`), another task passes its own (``calibrepro.regression.recalibration.recalibrator_title``)
Titles = Callable[[str, str], tuple[str, str]]


def calibrator_title(method: str, language: str) -> tuple[str, str]:
    """A calibrator's display name and the paper it comes from (its class's ``reference``; "" when unknown)."""
    from calibrepro.calibrators import CALIBRATORS

    cls = CALIBRATORS.get(method)
    return method_name(method, language), cls.reference if cls is not None else ""


def sections(parameters: Parameters, language: str, titles: Titles = calibrator_title) -> list[tuple[str, tuple[str, str], list[str], list[list[str]]]]:
    """``(method, (name, reference), header, rows)`` of each method's table; plain text (not yet escaped)."""
    language = check_language(language)
    several = len({row[3] for row in parameters.rows}) > 1
    keys = [*ROW_HEADERS[language], *([SEED_HEADERS[parameters.task][language]] if several else [])]
    out = []
    for method in dict.fromkeys(row[2] for row in parameters.rows):
        rows = [row for row in parameters.rows if row[2] == method]
        names = list(dict.fromkeys(row[4] for row in rows))
        cells: dict[tuple, dict[str, str]] = {}
        for dataset, model, _, seed, name, value in rows:
            cells.setdefault((dataset, model, seed), {})[name] = _value(name, value, language)
        header = keys + [PARAMETER_NAMES.get(name, {}).get(language, name) for name in names]
        body = [[dataset, model, *([str(seed)] if several else []), *(values.get(name, "—") for name in names)]
                for (dataset, model, seed), values in cells.items()]
        out.append((method, titles(method, language), header, body))
    return out


def render_parameters(parameters: Parameters, kind: str, *, language: str = "en",
                      titles: Titles = calibrator_title) -> str:
    """The tables of ``parameters`` as text; ``kind`` is "md" or "tex"; ``titles`` names each method."""
    caption = PARAMETER_CAPTIONS[parameters.task][check_language(language)]
    found = sections(parameters, language, titles)
    if kind == "md":
        tables = [md_table(f"**{md_escape(name)}**" + (f" ({md_escape(reference)})" if reference else ""),
                           [md_escape(h) for h in header],
                           [[md_escape(cell) for cell in row] for row in body],
                           numeric=[False] * 2 + [True] * (len(header) - 2))
                  for _, (name, reference), header, body in found]
        return "\n".join([f"{caption}\n", *tables])
    if kind != "tex":
        raise ValueError(f"kind must be 'md' or 'tex', got {kind!r}")
    prefix = "parameters" if parameters.task == "classification" else "regression-parameters"
    return environment("tex").get_template("parameters.tex.j2").render(
        caption=tex_caption(caption), language=language,
        tables=[{"label": f"{prefix}-{re.sub(r'[^A-Za-z0-9-]', '-', method)}",
                 "title": tex_escape(_tex_title(name, reference, language)),
                 "columns": "ll" + "r" * (len(header) - 2), "header": [tex_escape(h) for h in header],
                 "rows": [[tex_escape(cell) for cell in row] for row in body]}
                for method, (name, reference), header, body in found],
    )


def _tex_title(name: str, reference: str, language: str) -> str:
    return f"{PARAMETERS_TITLE[language]}: {name}" + (f" ({reference})" if reference else "")


def write_fitted_parameters(fits, csv_path, md_path, tex_path, *, task: str, language: str = "en",
                            titles: Titles = calibrator_title) -> int:
    """Write the parameters file ``csv_path`` of ``fits`` (the rows of each fit, by
    :func:`~calibrepro.report.parameters_file.fit_rows`, in the run's order) and its tables, read back from it,
    as Markdown and LaTeX; return the number of rows. Each file is written atomically."""
    if task not in COLUMNS:
        raise ValueError(f"task must be one of {', '.join(COLUMNS)}, got {task!r}")
    rows = [row for fit in fits for row in fit]
    write_csv(csv_path, COLUMNS[task], rows)
    write_parameter_tables(csv_path, md_path, tex_path, language=language, titles=titles)
    return len(rows)


def write_parameter_tables(csv_path: str | os.PathLike, md_path, tex_path, *, language: str = "en",
                           titles: Titles = calibrator_title) -> None:
    """Write the tables of the parameters file ``csv_path`` as Markdown (``md_path``) and LaTeX (``tex_path``)."""
    parameters = read_parameters(csv_path)
    write_text(md_path, render_parameters(parameters, "md", language=language, titles=titles))
    write_text(tex_path, render_parameters(parameters, "tex", language=language, titles=titles))
