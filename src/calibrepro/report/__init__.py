"""The report: thesis-style tables, reliability diagrams and the reproduction report.

Plain functions taking file paths (the Snakemake rules call them; nothing here imports snakemake):

* :func:`calibrepro.report.tables.write_table` - one metric's table as Markdown and LaTeX;
* :func:`calibrepro.report.figures.write_reliability_figure` - reliability diagrams, PNG and PDF;
* :func:`calibrepro.report.reproduction.write_reproduction_report` - published vs regenerated;
* :func:`calibrepro.report.published.load_published` - the bundled thesis values or a user's file.

Names, captions and number formats of both languages live in :mod:`calibrepro.report.labels`.
Submodules are imported lazily, so that importing the tables does not import matplotlib.
"""

from __future__ import annotations

import importlib

__all__ = ["write_table", "write_reliability_figure", "write_reproduction_report", "load_published"]

_WHERE = {
    "write_table": "tables",
    "write_reliability_figure": "figures",
    "write_reproduction_report": "reproduction",
    "load_published": "published",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"calibrepro.report.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'calibrepro.report' has no attribute {name!r}")
