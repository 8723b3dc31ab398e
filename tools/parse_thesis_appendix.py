#!/usr/bin/env python3
"""Parse the appendix of the thesis (section 9, tables 1-5) into the bundled published-values file.

Maintainer tool, run by hand once; the pipeline never runs it and never reads the thesis::

    python tools/parse_thesis_appendix.py ../shared/seeds/000_*.txt \
        -o src/calibrepro/data/thesis_appendix.csv

Input: the thesis as text. Section 9 (from the line ``## 9 Приложения`` to the end of the file)
holds five tables, each introduced by a caption line ``Таблица N: ...``, then a tab-separated header
``Данные  Модель  До калибровки  Hist-binning  Isotonic  T-scaling  V-scaling  V-scaling + bias``
and one tab-separated row per dataset/model; ``<b>...</b>`` marks a bold cell.

Output: a long CSV, one line per cell, columns ``table,dataset,model,method,metric,value,bold``,
``value`` exactly as printed (a string such as ``93.960``), ``bold`` ``true``/``false``. The script
checks the shape (5 tables x 32 rows x 6 methods = 960 cells, the same rows in every table, numbers
only) and fails loudly on anything unexpected instead of writing a partial file.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

SECTION = "## 9 Приложения"

#: thesis column header -> method key of the pipeline
METHODS = {
    "До калибровки": "uncalibrated",
    "Hist-binning": "histogram_binning",
    "Isotonic": "isotonic",
    "T-scaling": "temperature_scaling",
    "V-scaling": "vector_scaling",
    "V-scaling + bias": "vector_scaling_bias",
}

#: (pattern found in the caption, metric key); table 1's caption has the OCR typo "Ассигасу" (Cyrillic)
CAPTION_METRICS = [
    (re.compile(r"^(Accuracy|Ассигасу)\b", re.IGNORECASE), "accuracy"),
    (re.compile(r"^Brier Score\b"), "brier"),
    (re.compile(r"^ECE\b"), "ece"),
    (re.compile(r"^MCE\b"), "mce"),
    (re.compile(r"^\*?Negative Log-Likelihood\b"), "nll"),
]

CAPTION = re.compile(r"^Таблица (\d+): (.*)$")
BOLD = re.compile(r"^<b>(.*)</b>$")
NUMBER = re.compile(r"^\d+\.\d+$")

EXPECTED_TABLES = 5
EXPECTED_ROWS = 32
COLUMNS = ["table", "dataset", "model", "method", "metric", "value", "bold"]


class AppendixError(ValueError):
    """The appendix does not have the expected shape."""


def parse(text: str) -> list[dict]:
    """Return one dict per published cell, in table, row, column order."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == SECTION)
    except StopIteration:
        raise AppendixError(f"no line {SECTION!r} in the input") from None

    cells: list[dict] = []
    table = metric = None
    methods: list[str] | None = None
    seen_metrics: dict[str, int] = {}
    for number, raw in enumerate(lines[start + 1 :], start=start + 2):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        caption = CAPTION.match(line)
        if caption:
            table = int(caption.group(1))
            text_caption = caption.group(2).strip()
            matches = [key for pattern, key in CAPTION_METRICS if pattern.search(text_caption)]
            if len(matches) != 1:
                raise AppendixError(f"line {number}: cannot tell the metric of caption {text_caption!r}")
            metric = matches[0]
            if metric in seen_metrics:
                raise AppendixError(f"line {number}: metric {metric} already in table {seen_metrics[metric]}")
            seen_metrics[metric] = table
            methods = None
            continue
        fields = line.split("\t")
        if fields[0] == "Данные":
            if table is None:
                raise AppendixError(f"line {number}: header before any caption")
            if fields[1] != "Модель" or any(name not in METHODS for name in fields[2:]):
                raise AppendixError(f"line {number}: unexpected header {fields!r}")
            methods = [METHODS[name] for name in fields[2:]]
            continue
        if methods is None:
            raise AppendixError(f"line {number}: a row outside a table: {line!r}")
        if len(fields) != 2 + len(methods):
            raise AppendixError(f"line {number}: {len(fields)} fields, expected {2 + len(methods)}: {line!r}")
        dataset, model = fields[0].strip(), fields[1].strip()
        for method, cell in zip(methods, fields[2:]):
            cell = cell.strip()
            bold = BOLD.match(cell)
            value = bold.group(1).strip() if bold else cell
            if not NUMBER.match(value):
                raise AppendixError(f"line {number}: cell {cell!r} of {dataset}/{model}/{method} is not a number")
            cells.append(
                {
                    "table": table,
                    "dataset": dataset,
                    "model": model,
                    "method": method,
                    "metric": metric,
                    "value": value,
                    "bold": "true" if bold else "false",
                }
            )
    check(cells)
    return cells


def check(cells: list[dict]) -> None:
    """Fail unless there are 5 tables x 32 rows x 6 methods, the same rows everywhere, one value per cell."""
    tables: dict[int, list[tuple[str, str]]] = {}
    for cell in cells:
        rows = tables.setdefault(cell["table"], [])
        key = (cell["dataset"], cell["model"])
        if not rows or rows[-1] != key:
            rows.append(key)
    if sorted(tables) != list(range(1, EXPECTED_TABLES + 1)):
        raise AppendixError(f"expected tables 1..{EXPECTED_TABLES}, found {sorted(tables)}")
    reference = tables[1]
    for table, rows in tables.items():
        if len(rows) != EXPECTED_ROWS or len(set(rows)) != EXPECTED_ROWS:
            raise AppendixError(f"table {table}: {len(rows)} rows ({len(set(rows))} distinct), expected {EXPECTED_ROWS}")
        if rows != reference:
            raise AppendixError(f"table {table}: its rows differ from table 1's")
    expected = EXPECTED_TABLES * EXPECTED_ROWS * len(METHODS)
    if len(cells) != expected:
        raise AppendixError(f"{len(cells)} cells, expected {expected}")
    keys = {(c["dataset"], c["model"], c["method"], c["metric"]) for c in cells}
    if len(keys) != len(cells):
        raise AppendixError("a cell appears twice")


def to_csv(cells: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(cells)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("thesis", type=Path, help="the thesis as text (../shared/seeds/000_*.txt)")
    parser.add_argument("-o", "--output", type=Path, help="CSV to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        cells = parse(args.thesis.read_text(encoding="utf-8"))
    except AppendixError as error:
        print(f"{args.thesis}: {error}", file=sys.stderr)
        return 1
    text = to_csv(cells)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        bold = sum(c["bold"] == "true" for c in cells)
        print(f"wrote {args.output}: {len(cells)} cells ({bold} bold)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
