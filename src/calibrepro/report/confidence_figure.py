"""Guo et al. (2017) fig. 1 for the networks of a run: confidence histogram above the reliability diagram.

One column per network, its uncalibrated softmax on the test half (the reliability bins of
:mod:`calibrepro.reliability`, equal-width). Top: the fraction of test samples per confidence bin, with
the accuracy (dashed) and the mean confidence (dotted) marked: confidence to the right of accuracy is
overconfidence (Guo et al. 2017, sec. 2, "avg. confidence" against "accuracy"). Bottom: the accuracy of
each bin against its confidence, the diagonal being perfect calibration, and the ECE (eq. 3) in the
corner.
"""

from __future__ import annotations

from typing import Mapping

from calibrepro.io import atomic_path
from calibrepro.reliability import read_reliability

METHOD = "uncalibrated"


def summary(record: Mapping) -> tuple[float, float, float]:
    """``(accuracy, mean confidence, ECE)`` of one method's bins: count-weighted means (Guo et al. 2017, eq. 3)."""
    counts, correct = record["count"], record["correct"]
    n = sum(counts)
    confidence = sum(c * m for c, m in zip(counts, record["confidence"]) if c)
    ece = sum(abs(c * m - k) for c, m, k in zip(counts, record["confidence"], correct) if c) / n
    return sum(correct) / n, confidence / n, ece


def build_figure(dataset: str, records: Mapping[str, Mapping], bins: int):
    """The figure of ``records``: network -> its uncalibrated reliability bins."""
    from matplotlib.figure import Figure

    width = 1.0 / bins
    centres = [(b + 0.5) * width for b in range(bins)]
    figure = Figure(figsize=(3.0 * len(records), 5.6), layout="constrained")
    axes = figure.subplots(2, len(records), squeeze=False, sharex=True)
    for column, (model, record) in enumerate(records.items()):
        top, bottom = axes[0][column], axes[1][column]
        n = sum(record["count"])
        accuracy, confidence, ece = summary(record)
        top.bar(centres, [c / n for c in record["count"]], width=width, color="tab:blue", edgecolor="black", lw=0.4)
        top.axvline(accuracy, color="black", linestyle="--", lw=1, label=f"accuracy {100 * accuracy:.1f} %")
        top.axvline(confidence, color="tab:red", linestyle=":", lw=1.5, label=f"avg. confidence {100 * confidence:.1f} %")
        top.set_title(model, fontsize=9)
        top.legend(fontsize=7, frameon=False, loc="upper left")
        heights = [a or 0.0 for a in record["accuracy"]]
        bottom.bar(centres, heights, width=width, color="tab:blue", edgecolor="black", lw=0.4, label="outputs")
        bottom.bar(centres, [(c or 0.0) - h if k else 0.0 for c, h, k in zip(centres, heights, record["count"])],
                   bottom=heights, width=width, color="tab:red", alpha=0.3, edgecolor="tab:red", lw=0.4, label="gap")
        bottom.plot([0, 1], [0, 1], color="grey", linestyle="--", lw=1)
        bottom.text(0.96, 0.04, f"ECE {100 * ece:.2f} %", ha="right", va="bottom", fontsize=8,
                    transform=bottom.transAxes, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
        bottom.set_xlim(0, 1)
        bottom.set_ylim(0, 1)
        bottom.set_xlabel("confidence", fontsize=8)
        bottom.legend(fontsize=7, frameon=False, loc="upper left")
        for ax in (top, bottom):
            ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("fraction of samples", fontsize=8)
    axes[1][0].set_ylabel("accuracy", fontsize=8)
    figure.suptitle(f"{dataset}: confidence and calibration before calibration (Guo et al. 2017, fig. 1)", fontsize=9)
    return figure


def write_confidence_figure(dataset: str, reliability: Mapping[str, str], png, pdf) -> None:
    """Draw the figure of the networks ``reliability`` names (network -> its reliability JSON)."""
    from calibrepro.report.figures import PDF_METADATA, PNG_METADATA

    data = {model: read_reliability(path) for model, path in reliability.items()}
    records = {model: payload["methods"][METHOD] for model, payload in data.items()}
    bins = len(next(iter(records.values()))["count"])
    figure = build_figure(dataset, records, bins)
    with atomic_path(png) as tmp:
        figure.savefig(tmp, format="png", dpi=150, metadata=PNG_METADATA)
    with atomic_path(pdf) as tmp:
        figure.savefig(tmp, format="pdf", metadata=PDF_METADATA)
