"""Reliability diagrams: layout, labels in both languages, byte-stable PNG/PDF, rendering from threads."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from matplotlib.collections import LineCollection, PolyCollection

from calibrepro.reliability import ReliabilityFileError, wilson_interval
from calibrepro.report.figures import (
    COLORS,
    bin_ece,
    build_reliability_figure,
    write_reliability_figure,
)
from calibrepro.report.labels import METHOD_ORDER

BINS = 15


def record(shift: float, empty_low: int = 8) -> dict:
    """Bins below ``empty_low`` empty (null), the rest with counts rising towards high confidence."""
    count, confidence, accuracy = [], [], []
    for m in range(BINS):
        if m < empty_low:
            count.append(0)
            confidence.append(None)
            accuracy.append(None)
        else:
            centre = (m + 0.5) / BINS
            count.append(10 * (m - empty_low + 1) ** 2)
            confidence.append(centre)
            accuracy.append(max(0.0, min(1.0, centre - shift)))
    return {"count": count, "confidence": confidence, "accuracy": accuracy}


THESIS_METHODS = METHOD_ORDER[:6]  # the thesis's six columns (the registry lists more after them)


def reliability(methods=THESIS_METHODS) -> dict:
    # keys sorted, as calibrepro.io.write_json writes them: the figure must restore the thesis order
    return {
        "dataset": "cifar10",
        "model": "googlenet",
        "seed": 0,
        "bins": BINS,
        "methods": {m: record(0.01 * (i + 1)) for i, m in sorted(enumerate(methods), key=lambda x: x[1])},
    }


@pytest.fixture
def reliability_json(tmp_path) -> Path:
    path = tmp_path / "seed0.json"
    path.write_text(json.dumps(reliability(), indent=2, sort_keys=True))
    return path


def visible_axes(figure):
    return [ax for ax in figure.axes if ax.get_visible()]


def test_six_panels_in_thesis_order_russian():
    figure = build_reliability_figure(reliability(), language="ru")
    axes = visible_axes(figure)
    assert len(axes) == 6
    assert [ax.get_title() for ax in axes] == [
        "До калибровки", "Hist-binning", "Isotonic", "T-scaling", "V-scaling", "V-scaling + bias"
    ]
    # 2 x 3: three panels per row, row 0 above row 1
    positions = sorted({round(ax.get_position().y0, 3) for ax in axes})
    assert len(positions) == 2
    assert figure._suptitle.get_text() == "CIFAR-10, googlenet"
    assert {ax.get_xlabel() for ax in axes[3:]} == {"Уверенность"}
    assert axes[0].get_ylabel() == axes[3].get_ylabel() == "Значение"
    legend = figure.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["Средняя уверенность", "Точность", "Вес бина"]
    assert figure.get_size_inches()[0] == pytest.approx(7.0)


def test_bars_are_red_blue_green_and_match_the_bins():
    data = reliability()
    figure = build_reliability_figure(data, language="en", title="Figure 2: CIFAR-10, googlenet")
    assert figure._suptitle.get_text() == "Figure 2: CIFAR-10, googlenet"
    ax = visible_axes(figure)[0]
    assert ax.get_title() == "Uncalibrated"
    assert ax.get_xlabel() == "" and visible_axes(figure)[3].get_xlabel() == "Confidence"
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    # one collection per series, 7 non-empty bins each
    assert [len(c.get_paths()) for c in bars] == [7, 7, 7]
    from matplotlib.colors import to_hex

    assert [to_hex(c.get_facecolor()[0]) for c in bars] == [COLORS[k] for k in ("confidence", "accuracy", "weight")]
    source = data["methods"]["uncalibrated"]
    total = sum(source["count"])
    heights = [[path.vertices[:, 1].max() for path in c.get_paths()] for c in bars]
    assert heights[0] == pytest.approx([c for c in source["confidence"] if c is not None])
    assert heights[1] == pytest.approx([a for a in source["accuracy"] if a is not None])
    assert heights[2] == pytest.approx([n / total for n in source["count"] if n])
    assert sum(heights[2]) == pytest.approx(1.0)
    # the accuracy bar of bin m sits on the bin's centre
    centres = [(path.vertices[:, 0].min() + path.vertices[:, 0].max()) / 2 for path in bars[1].get_paths()]
    assert centres == pytest.approx([(m + 0.5) / BINS for m in range(8, BINS)])
    # the thesis style draws no error bars
    assert not [c for c in ax.collections if isinstance(c, LineCollection) and c.get_zorder() == 4]


def test_wilson_error_bars_on_the_accuracy_bars():
    data = reliability(METHOD_ORDER[:1])
    source = data["methods"]["uncalibrated"]
    source["correct"] = [round(a * n) if n else 0 for a, n in zip(source["accuracy"], source["count"])]
    figure = build_reliability_figure(data, language="en", intervals=0.9)
    ax = visible_axes(figure)[0]
    (bars,) = [c for c in ax.collections if isinstance(c, LineCollection) and c.get_zorder() == 4]
    segments = bars.get_segments()[:7]  # vertical bars first, then the caps
    for m, segment in zip(range(8, BINS), segments):
        low, high = wilson_interval(source["correct"][m], source["count"][m], 0.9)
        assert segment[:, 0] == pytest.approx([(m + 0.5) / BINS] * 2)
        assert segment[:, 1] == pytest.approx([low, high])
        assert low <= source["accuracy"][m] <= high
    texts = [t.get_text() for t in ax.texts]
    assert texts == [f"ECE = {bin_ece(source) * 100:.2f}%"]
    assert [t.get_text() for t in figure.legends[0].get_texts()] == ["Mean confidence", "Accuracy", "Bin weight"]


def test_counts_print_every_bins_samples_above_its_bars():
    data = reliability(METHOD_ORDER[:1])
    source = data["methods"]["uncalibrated"]
    ax = visible_axes(build_reliability_figure(data, language="en", counts=True))[0]
    labels = [(t.get_position(), t.get_text()) for t in ax.texts if not t.get_text().startswith("ECE")]
    filled = [m for m in range(BINS) if source["count"][m]]
    assert [text for _, text in labels] == [str(source["count"][m]) for m in filled]
    for ((x, y), _), m in zip(labels, filled):
        assert x == pytest.approx((m + 0.5) / BINS)
        assert y == pytest.approx(0.015)
    # the thesis's style prints no counts
    thesis = visible_axes(build_reliability_figure(data, language="en"))[0]
    assert [t.get_text() for t in thesis.texts] == [f"ECE = {bin_ece(source) * 100:.2f}%"]


def test_bin_ece_is_the_weighted_gap():
    data = {"count": [0, 10, 30], "confidence": [None, 0.5, 0.9], "accuracy": [None, 0.4, 0.8]}
    assert bin_ece(data) == pytest.approx((10 * 0.1 + 30 * 0.1) / 40)


@pytest.mark.parametrize("n, grid", [(1, (1, 1)), (3, (1, 3)), (4, (2, 2)), (5, (2, 3))])
def test_fewer_methods(n, grid):
    figure = build_reliability_figure(reliability(METHOD_ORDER[:n]), language="en")
    axes = visible_axes(figure)
    assert len(axes) == n
    rows, cols = axes[0].get_subplotspec().get_gridspec().get_geometry()
    assert (rows, cols) == grid


def test_png_and_pdf_byte_stable(reliability_json, tmp_path):
    paths = []
    for name in ("a", "b"):
        png, pdf = tmp_path / name / "fig.png", tmp_path / name / "fig.pdf"
        write_reliability_figure(reliability_json, png, pdf, language="ru")
        paths.append((png, pdf))
    (png_a, pdf_a), (png_b, pdf_b) = paths
    assert png_a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf_a.read_bytes()[:5] == b"%PDF-"
    assert png_a.read_bytes() == png_b.read_bytes()
    assert pdf_a.read_bytes() == pdf_b.read_bytes()
    assert b"CreationDate" not in pdf_a.read_bytes()
    assert not list(tmp_path.glob("**/*.part"))
    from matplotlib.image import imread

    height, width = imread(png_a).shape[:2]
    assert width == 1400  # 7 in at 200 dpi


def test_threads_render_the_same_bytes(reliability_json, tmp_path):
    def render(i):
        png, pdf = tmp_path / f"t{i}.png", tmp_path / f"t{i}.pdf"
        write_reliability_figure(reliability_json, png, pdf, language="en" if i % 2 else "ru")
        return i % 2, png.read_bytes(), pdf.read_bytes()

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(render, range(4)))
    for parity in (0, 1):
        outputs = {(png, pdf) for p, png, pdf in results if p == parity}
        assert len(outputs) == 1


def test_does_not_import_pyplot(reliability_json, tmp_path):
    code = (
        "import sys\n"
        "from calibrepro.report.figures import write_reliability_figure\n"
        f"write_reliability_figure({str(reliability_json)!r}, {str(tmp_path / 'x.png')!r}, {str(tmp_path / 'x.pdf')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_reliability_file(tmp_path):
    path = tmp_path / "bad.json"
    data = reliability()
    data["methods"]["isotonic"]["count"] = [1, 2]
    path.write_text(json.dumps(data))
    with pytest.raises(ReliabilityFileError, match=r"bad\.json: methods\.isotonic\.count"):
        write_reliability_figure(path, tmp_path / "a.png", tmp_path / "a.pdf")
    assert not (tmp_path / "a.png").exists()
    with pytest.raises(ValueError, match="language"):
        build_reliability_figure(reliability(), language="de")
