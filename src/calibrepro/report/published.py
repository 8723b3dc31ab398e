"""Published values to compare with: the thesis's appendix (bundled) or a user's file in the same format.

The bundled ``calibrepro/data/thesis_appendix.csv`` was parsed once from the thesis's section 9 by
``tools/parse_thesis_appendix.py`` (5 tables x 32 rows x 6 methods = 960 cells); the pipeline
never reads the thesis itself.

Long format, one line per printed cell::

    table,dataset,model,method,metric,value,bold
    1,cifar10,densenet121,uncalibrated,accuracy,93.960,true

``value`` is the number exactly as printed (percent metrics in %, e.g. ECE ``1.90``); its number of
decimals is the printed precision the comparison uses. ``table`` (a label such as ``1``) and
``bold`` (``true``/``false``) are optional in a user's file: a missing ``table`` is filled with the
metric key, a missing ``bold`` with ``False``. Metric and method keys are the pipeline's. One cell may
appear in several tables (a value and the value another paper published for the same cell, as the
bundled ``blog_classification.csv`` holds them), once per table.

An optional ``size`` column holds a calibration-set size for cells of a calibration-set-size
sweep (the blog's ECE against the calibration-set size): such cells are compared with the size
study (:mod:`calibrepro.report.size_study`), the others (``size`` empty) with ``metrics.csv``.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

import pandas as pd

REQUIRED = ("dataset", "model", "method", "metric", "value")
COLUMNS = ("table",) + REQUIRED + ("bold", "size")
BUNDLED = "thesis_appendix.csv"
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


class PublishedFileError(ValueError):
    """A published-values file does not have the expected format."""


def bundled_path() -> Path:
    """Path of the bundled thesis appendix (inside the installed package)."""
    return Path(str(resources.files("calibrepro") / "data" / BUNDLED))


def decimals_of(value: str) -> int:
    """Number of printed decimals of a value string (``"93.960"`` -> 3, ``"12"`` -> 0)."""
    return len(value.split(".", 1)[1]) if "." in value else 0


def load_published(path=None) -> pd.DataFrame:
    """Load published values: the bundled thesis appendix when ``path`` is None, else the CSV at ``path``.

    Returns a DataFrame with columns ``table, dataset, model, method, metric, value, bold, size`` in
    file order: ``value`` is a string as printed (stripped), ``bold`` a bool, the rest strings
    (``size`` empty for cells of the main tables). Raises
    :class:`PublishedFileError` for missing columns, non-numeric values or duplicated cells.
    """
    source = bundled_path() if path is None else Path(os.fspath(path))
    if not source.is_file():
        raise PublishedFileError(f"{source}: no such file")
    try:
        frame = pd.read_csv(source, dtype=str, keep_default_na=False, encoding="utf-8")
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as error:
        raise PublishedFileError(f"{source}: not a readable CSV ({error})") from error
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise PublishedFileError(f"{source}: missing column(s) {missing}; expected {list(COLUMNS)}")
    frame = frame.apply(lambda column: column.str.strip())
    if "table" not in frame.columns:
        frame["table"] = frame["metric"]
    if "bold" not in frame.columns:
        frame["bold"] = "false"
    if "size" not in frame.columns:
        frame["size"] = ""
    bad_size = frame.index[(frame["size"] != "") & ~frame["size"].str.fullmatch(r"[1-9]\d*")]
    if len(bad_size):
        row = bad_size[0]
        raise PublishedFileError(
            f"{source}, line {row + 2}: size {frame.at[row, 'size']!r} is not a calibration-set size (a positive integer)"
        )
    bold = frame["bold"].str.lower()
    unknown = sorted(set(bold) - _TRUE - _FALSE)
    if unknown:
        raise PublishedFileError(f"{source}: column 'bold' must be true/false, found {unknown[:5]}")
    frame["bold"] = bold.isin(_TRUE)
    for column in REQUIRED:
        empty = frame.index[frame[column] == ""]
        if len(empty):
            raise PublishedFileError(f"{source}, line {empty[0] + 2}: empty {column!r}")
    bad = frame.index[~frame["value"].str.match(_NUMBER)]
    if len(bad):
        row = bad[0]
        raise PublishedFileError(f"{source}, line {row + 2}: value {frame.at[row, 'value']!r} is not a plain number")
    duplicated = frame.duplicated(["table", "dataset", "model", "method", "metric", "size"], keep="first")
    if duplicated.any():  # one value per cell and table: two publications of one cell go in two tables
        row = frame.index[duplicated][0]
        cell = "/".join(frame.loc[row, ["dataset", "model", "method", "metric"]])
        cell += f" at size {frame.at[row, 'size']}" if frame.at[row, "size"] else ""
        raise PublishedFileError(f"{source}, line {row + 2}: a second value for {cell} in table {frame.at[row, 'table']!r}")
    return frame[list(COLUMNS)].reset_index(drop=True)


def main_table_cells(published: pd.DataFrame) -> pd.DataFrame:
    """The cells compared with ``metrics.csv``: those without a calibration-set size."""
    return published[published["size"] == ""].reset_index(drop=True)


def size_sweep_cells(published: pd.DataFrame) -> pd.DataFrame:
    """The cells of calibration-set-size sweeps (``size`` set), compared with the size study."""
    return published[published["size"] != ""].reset_index(drop=True)
