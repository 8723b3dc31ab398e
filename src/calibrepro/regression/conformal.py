"""Split-conformal intervals beside recalibration: coverage and mean width, on data the recalibrators never saw.

For a regressor's predictive on one split (its predictions file: the calibration part the recalibrators are
fitted on, and the test part), with ``mu`` and ``sigma`` the predictive's mean and standard deviation:

* ``conformal_normalised``: the score ``|y - mu| / sigma`` (Lei et al. 2018, "Distribution-free predictive
  inference for regression", JASA 113, sec. 5.2, the locally weighted residual), interval ``mu -+ q sigma``;
* ``conformal_absolute``: the score ``|y - mu|`` (Lei et al. 2018, sec. 2.2, split conformal), interval
  ``mu -+ q``;

``q`` the ``ceil((n + 1)(1 - alpha))``-th smallest score of ``n`` conformal calibration rows
(:func:`calibrepro.conformal.scores.threshold`), so that the interval holds a new target with probability at
least ``1 - alpha``. The recalibrators are fitted on the calibration part, so the conformal calibration rows
are drawn from the **test part**: each of ``repeats`` seeded random halves fits ``q``, the other half is scored.
Beside them, on the same scored rows, each recalibrator's central ``1 - alpha`` interval (its recalibrated
predictive's ``alpha/2`` and ``1 - alpha/2`` quantiles; Kuleshov et al. 2018's isotonic map among them).

Rows of ``results/<name>/regression/conformal.csv``: ``dataset,model,split,method,alpha,metric,value``,
``metric`` ``coverage`` (the share of scored targets inside the interval) or ``width`` (the mean interval
width, in the target's units), each the mean over the repeats.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence

import numpy as np

from calibrepro.conformal.scores import threshold
from calibrepro.io import read_tidy_csv, write_csv, write_text

COLUMNS = ("dataset", "model", "split", "method", "alpha", "metric", "value")
#: the conformal methods, in the tables' order
CONFORMAL_METHODS = ("conformal_normalised", "conformal_absolute")


class RegressionConformalError(ValueError):
    """A regression conformal results file that cannot be read."""


def repeat_halves(n: int, repeats: int, seed: int, split: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(calibration, scored)`` rows of the test part for each repeat: seeded random halves."""
    halves = []
    for repeat in range(repeats):
        order = np.random.default_rng([int(seed), int(split), repeat]).permutation(n)
        halves.append((order[: n // 2], order[n // 2:]))
    return halves


def _central(predictive, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    n = len(predictive.mean())
    bounds = predictive.ppf(np.broadcast_to(np.array([alpha / 2, 1 - alpha / 2]), (n, 2)))
    return bounds[:, 0], bounds[:, 1]


def interval_rows(task, predictions_path, recalibrators: Sequence[str], *, dataset: str, model: str, split: int,
                  alphas: Sequence[float], repeats: int, seed: int) -> tuple[list[tuple], list[float]]:
    """The rows of one regressor's split (module docstring) and the alphas left out: those its test part's half is
    too small for (every interval would be unbounded); ``task``: the regression task of :mod:`calibrepro.tasks`."""
    from calibrepro.conformal.splits import usable_alphas
    from calibrepro.tasks import fit_calibrator

    calibration, test = task.halves(predictions_path, None, "calibration", "test")
    y = np.asarray(test.targets, dtype=np.float64)
    mu, sigma = np.asarray(test.inputs.mean(), np.float64), np.asarray(test.inputs.std(), np.float64)
    residual = np.abs(y - mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        normalised = np.where(sigma > 0, residual / sigma, np.where(residual > 0, np.inf, 0.0))
    halves = repeat_halves(len(y), repeats, seed, split)
    alphas, left_out = usable_alphas(len(y) // 2, alphas)
    where = f"{dataset}/{model}, split {split}: the test part's conformal half"
    fitted = {method: fit_calibrator(task, method, calibration) for method in recalibrators}
    rows = []
    for alpha in alphas:
        values: dict[str, list[tuple[float, float]]] = OrderedDict((m, []) for m in (*CONFORMAL_METHODS, *fitted))
        central = {method: _central(recalibrator.transform(test.inputs), alpha)
                   for method, recalibrator in fitted.items()}
        for cal, scored in halves:
            q = threshold(normalised[cal], alpha, where)
            values["conformal_normalised"].append((float(np.mean(normalised[scored] <= q)),
                                                   float(np.mean(2 * q * sigma[scored]))))
            q = threshold(residual[cal], alpha, where)
            values["conformal_absolute"].append((float(np.mean(residual[scored] <= q)), 2 * q))
            for method, (low, high) in central.items():
                inside = (y[scored] >= low[scored]) & (y[scored] <= high[scored])
                values[method].append((float(inside.mean()), float(np.mean(high[scored] - low[scored]))))
        for method, pairs in values.items():
            for index, metric in enumerate(("coverage", "width")):
                mean = math.fsum(pair[index] for pair in pairs) / len(pairs)
                rows.append((dataset, model, split, method, float(alpha), metric, mean))
    return rows, left_out


def write_intervals(path, rows) -> None:
    write_csv(path, COLUMNS, rows)


def read_intervals(path) -> "OrderedDict[tuple[str, str, str, float, str], dict[int, float]]":
    """``(dataset, model, method, alpha, metric) -> {split: value}`` in file order."""
    cells: OrderedDict = OrderedDict()
    for line, row in read_tidy_csv(path, COLUMNS, RegressionConformalError):
        try:
            key = (row["dataset"], row["model"], row["method"], float(row["alpha"]), row["metric"])
            cells.setdefault(key, {})[int(row["split"])] = float(row["value"])
        except ValueError:
            raise RegressionConformalError(f"{path}, line {line}: a split, alpha or value is no number") from None
    return cells


def render_table(cells, alpha: float) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the table at ``alpha``: per data set and model, each method's coverage (%) and mean width,
    means over the splits."""
    methods = list(dict.fromkeys(key[2] for key in cells if key[3] == alpha))
    header = ["Data", "Model"] + [f"{m}: {what}" for m in methods for what in ("coverage, %", "width")]
    rows = []
    for dataset, model in dict.fromkeys((key[0], key[1]) for key in cells):
        row = [dataset, model]
        for method in methods:
            for metric, factor, digits in (("coverage", 100.0, 1), ("width", 1.0, 4)):
                splits = cells.get((dataset, model, method, alpha, metric))
                row.append("—" if not splits else format(factor * math.fsum(splits.values()) / len(splits),
                                                          f".{digits}g" if metric == "width" else f".{digits}f"))
        rows.append(row)
    return header, rows


def write_interval_tables(conformal_csv, md_path, tex_path) -> None:
    """``reports/<name>/regression/tables/conformal.md`` and ``.tex``: one table per alpha (:func:`render_table`)."""
    from calibrepro.report.tables import md_escape, md_table, tex_escape

    cells = read_intervals(conformal_csv)
    md = ["# Split-conformal intervals beside recalibration", "",
          "Coverage (%) and mean width of the central 1 - alpha intervals on a half of each test part, means over "
          "repeated halves and the splits; the conformal intervals' threshold is fitted on the other half, the "
          "recalibrators on the calibration part (`results/<name>/regression/conformal.csv`).", ""]
    tex = []
    for alpha in sorted({key[3] for key in cells}, reverse=True):
        header, rows = render_table(cells, alpha)
        caption = f"alpha = {alpha:g}: nominal coverage {100 * (1 - alpha):g} %"
        md += [f"**{caption}**", "", md_table(None, header, [[md_escape(c) for c in r[:2]] + r[2:] for r in rows],
                                            numeric=[False, False] + [True] * (len(header) - 2)), ""]
        tex += [r"\begin{table}[ht]", r"\centering", rf"\caption{{{tex_escape(caption)}}}",
                rf"\begin{{tabular}}{{ll{'r' * (len(header) - 2)}}}", r"\toprule",
                " & ".join(map(tex_escape, header)) + r" \\", r"\midrule",
                *[" & ".join([tex_escape(r[0]), tex_escape(r[1]), *r[2:]]) + r" \\" for r in rows],
                r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    write_text(md_path, "\n".join(md).rstrip("\n") + "\n")
    write_text(tex_path, "\n".join(tex))
