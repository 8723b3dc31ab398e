"""Calibration over training: one figure per data set and the table of the first, best and last epoch.

The figure (seed 004's and Guo et al. 2017's fig. 3 style) has a column per network (with and without
label smoothing side by side) and two rows: the training loss and the test NLL against the epoch, then
the test ECE and MCE (Guo et al. 2017, eqs. 3 and 4) in %, uncalibrated solid and after temperature
scaling dashed. The table gives, per network, its first and last evaluated epochs and the epoch of lowest
test NLL ("best": where early stopping on the NLL would stop; an observation on the test half, not a
choice): training loss, test error, NLL, ECE, MCE, confidence - accuracy, ECE and MCE after TS, and T.
Numbers from ``training_curves.csv`` (:mod:`calibrepro.report.curves_file`).
"""

from __future__ import annotations

from typing import Mapping

from calibrepro.io import atomic_path, write_text
from calibrepro.report.curve_claims import TS, UNCAL
from calibrepro.report.curves_file import TRAINING
from calibrepro.report.tables import md_escape, md_table, tex_escape

#: the table's columns: header, (method, metric), format of the value
COLUMNS = (
    ("training loss", (TRAINING, "loss"), "{:.4f}"),
    ("error %", (UNCAL, "error"), "pct"),
    ("NLL", (UNCAL, "nll"), "{:.4f}"),
    ("ECE %", (UNCAL, "ece"), "pct"),
    ("MCE %", (UNCAL, "mce"), "pct"),
    ("conf. - acc. %", (UNCAL, "overconfidence"), "pct"),
    ("ECE TS %", (TS, "ece"), "pct"),
    ("MCE TS %", (TS, "mce"), "pct"),
    ("T", (TS, "temperature"), "{:.3f}"),
)


def _cell(value: float | None, form: str) -> str:
    if value is None:
        return ""
    return f"{100 * value:.2f}" if form == "pct" else form.format(value)


def table_rows(curves: Mapping) -> list[list[str]]:
    """``[dataset, model, which, epoch, *values]`` of every network: its first, best (lowest NLL) and last epochs."""
    rows = []
    for (dataset, model), curve in curves.items():
        nll = curve[(UNCAL, "nll")]
        first, last = min(nll), max(nll)
        best = min(nll, key=lambda epoch: (nll[epoch], epoch))
        for which, epoch in (("first", first), ("best (lowest NLL)", best), ("last", last)):
            values = [_cell(curve.get(key, {}).get(epoch), form) for _, key, form in COLUMNS]
            rows.append([dataset, model, which, str(epoch), *values])
    return rows


def render_tables(curves: Mapping, bins: int) -> tuple[str, str]:
    """The Markdown and LaTeX tables."""
    caption = (f"Calibration over training: test half of the first split seed, ECE and MCE with {bins} equal-width "
               "bins, TS = temperature scaling fitted on the calibration half at that epoch; best = the epoch of "
               "lowest test NLL (observed, not chosen).")
    header = ["data set", "network", "epoch", "#", *(name for name, _, _ in COLUMNS)]
    body = table_rows(curves)
    md = md_table(caption, header, [[md_escape(c) for c in row[:3]] + row[3:] for row in body],
                  numeric=[False, False, False] + [True] * (len(header) - 3))
    lines = ["\\begin{table}", "\\centering", f"\\caption{{{tex_escape(caption)}}}", "\\label{tab:curves}",
             "\\begin{tabular}{lll" + "r" * (len(header) - 3) + "}", "\\toprule",
             " & ".join(tex_escape(h) for h in header) + " \\\\", "\\midrule"]
    lines += [" & ".join(tex_escape(cell) for cell in row) + " \\\\" for row in body]
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}", ""]
    return md, "\n".join(lines)


def write_tables(curves: Mapping, md_path, tex_path, bins: int) -> None:
    md, tex = render_tables(curves, bins)
    write_text(md_path, md)
    write_text(tex_path, tex)


def _plot(ax, series: Mapping[int, float], scale: float, **style) -> None:
    epochs = sorted(series)
    ax.plot(epochs, [scale * series[e] for e in epochs], **style)


def build_figure(dataset: str, curves: Mapping[str, Mapping]):
    """The figure of one data set: ``curves`` is network -> (method, metric) -> {epoch: value}."""
    from matplotlib.figure import Figure

    columns = len(curves)
    figure = Figure(figsize=(3.6 * columns, 5.6), layout="constrained")
    axes = figure.subplots(2, columns, squeeze=False, sharey="row")  # networks side by side on one scale
    for column, (model, curve) in enumerate(curves.items()):
        top, bottom = axes[0][column], axes[1][column]
        _plot(top, curve[(TRAINING, "loss")], 1, color="black", label="training loss")
        _plot(top, curve[(UNCAL, "nll")], 1, color="tab:red", label="test NLL")
        _plot(top, curve[(TS, "nll")], 1, color="tab:red", linestyle="--", label="test NLL, TS")
        for metric, colour in (("ece", "tab:blue"), ("mce", "tab:orange")):
            _plot(bottom, curve[(UNCAL, metric)], 100, color=colour, label=f"{metric.upper()}")
            _plot(bottom, curve[(TS, metric)], 100, color=colour, linestyle="--", label=f"{metric.upper()}, TS")
        top.set_title(model, fontsize=9)
        top.set_ylabel("loss / NLL", fontsize=8)
        bottom.set_ylabel("test calibration error (%)", fontsize=8)
        bottom.set_xlabel("epoch", fontsize=8)
        for ax in (top, bottom):
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    for row in axes:
        row[0].legend(fontsize=7, frameon=False)
    figure.suptitle(f"{dataset}: calibration over training (solid: uncalibrated, dashed: temperature scaling)",
                    fontsize=9)
    return figure


def write_figure(dataset: str, curves: Mapping[str, Mapping], png, pdf) -> None:
    from calibrepro.report.figures import PDF_METADATA, PNG_METADATA

    figure = build_figure(dataset, curves)
    with atomic_path(png) as tmp:
        figure.savefig(tmp, format="png", dpi=150, metadata=PNG_METADATA)
    with atomic_path(pdf) as tmp:
        figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
