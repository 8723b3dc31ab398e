"""Regression tables, figures and reproduction report from a known metrics.csv."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from calibrepro.io import tidy_csv
from calibrepro.regression.figures import write_regression_figure
from calibrepro.regression.report import (
    COLUMNS,
    mean_estimates,
    number,
    read_published,
    table_names,
    t_interval,
    write_regression_reproduction,
    write_regression_tables,
)
from calibrepro.regression.uncertainty import mean_intervals, save_replicates

SOURCES = {"wine": "uci_wine", "mine": "table"}


def metrics_csv(tmp_path):
    """wine: MC-Dropout's MSCE 0.05/0.06/0.07 before and 0.02/0.03/0.04 after isotonic; aleatoric RMSE; mine: one model."""
    rows = []
    for split, (before, after) in enumerate([(0.05, 0.02), (0.06, 0.03), (0.07, 0.04)]):
        rows += [("wine", "mc_dropout", "uncalibrated", split, "msce", before),
                 ("wine", "mc_dropout", "isotonic", split, "msce", after),
                 ("wine", "mc_dropout", "uncalibrated", split, "rmse", 0.6),
                 ("wine", "aleatoric", "uncalibrated", split, "rmse", 0.62)]
    rows.append(("mine", "ensemble", "uncalibrated", 0, "msce", 0.001234567))
    path = tmp_path / "metrics.csv"
    path.write_text(tidy_csv(COLUMNS, rows))
    return path


def outputs(tmp_path, names):
    return {name: (tmp_path / f"{name}.md", tmp_path / f"{name}.tex") for name in names}


def test_seed_layout_tables_show_published_values_beside_ours(tmp_path):
    paths = outputs(tmp_path, table_names(["msce", "rmse"]))
    write_regression_tables(metrics_csv(tmp_path), paths, sources=SOURCES)
    one_sided = paths["msce_one_sided"][0].read_text()
    # Kuleshov et al. (as quoted by the seed) 0.096 -> 0.028, the seed's 0.068 -> 0.036, ours mean ± sd over 3 splits
    assert "| wine | mc_dropout | 0.096 | 0.068 | 0.06000 ± 0.01000 | 0.028 | 0.036 | 0.03000 ± 0.01000 |" in one_sided
    assert "over 3 split(s)" in one_sided
    assert "| wine | 0.163 | 0.6000 ± 0 | 0.122 | 0.6200 ± 0 |" in paths["aleatoric_rmse"][0].read_text()
    msce = paths["metric_msce"][0].read_text()
    assert "| mine | ensemble | 0.001235 | — |" in msce  # a data set without published values: no column missing
    tex = paths["msce_one_sided"][1].read_text()
    assert "\\label{tab:calibrepro-regression-msce-one-sided}" in tex and "mc\\_dropout" in tex and "$\\pm$" in tex
    first = {name: (md.read_bytes(), tex.read_bytes()) for name, (md, tex) in paths.items()}
    write_regression_tables(metrics_csv(tmp_path), paths, sources=SOURCES)
    assert first == {name: (md.read_bytes(), tex.read_bytes()) for name, (md, tex) in paths.items()}


def test_reproduction_report_without_bootstrap_uses_the_t_interval_over_splits(tmp_path):
    output = tmp_path / "reproduction.md"
    write_regression_reproduction(metrics_csv(tmp_path), output, sources=SOURCES)
    text = output.read_text()
    half = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)  # sd 0.01 over 3 splits
    low, high = t_interval({0: 0.05, 1: 0.06, 2: 0.07})
    assert (low, high) == pytest.approx((0.06 - half, 0.06 + half))
    # 0.068 (seed, before) lies inside [0.0352, 0.0848]; Kuleshov's 0.096 does not
    assert (f"| wine | mc_dropout | uncalibrated | msce | seed 002 | 0.068 | 0.06000 | — | yes | "
            f"[{number(low)}, {number(high)}] |") in text
    assert "| wine | mc_dropout | uncalibrated | msce | Kuleshov et al. 2018 (as quoted by the seed) | 0.096 |" in text
    # wine's 4 MSCE cells (0.028, 0.036, 0.068 inside) and 2 RMSE cells (sd 0: a point interval); none for "mine"
    assert "3 of 6 published values lie inside our interval." in text


def test_reproduction_report_shows_the_bootstrap_interval_of_the_mean_over_splits(tmp_path):
    """Replicate r of the mean over the splits is the mean of the splits' replicates r; its percentile interval
    (the shared bootstrap code) decides "inside"; the t-interval stays beside it."""
    rng = np.random.default_rng(0)
    files, reps = [], []
    for split, before in enumerate([0.05, 0.06, 0.07]):
        reps.append(before + 0.001 * rng.normal(size=400))  # narrow: the seed's 0.068 is outside
        files.append(tmp_path / f"split{split}.npz")
        save_replicates(files[-1], ("wine", "mc_dropout", split), {("uncalibrated", "msce"): reps[-1]})
    metrics = metrics_csv(tmp_path)
    intervals = mean_intervals(files, mean_estimates(metrics), 0.9, "percentile")
    assert set(intervals) == {("wine", "mc_dropout", "uncalibrated", "msce")}
    got = intervals[("wine", "mc_dropout", "uncalibrated", "msce")]
    assert (got.low, got.high) == pytest.approx(tuple(np.quantile(np.mean(reps, axis=0), [0.05, 0.95])))
    output = tmp_path / "reproduction.md"
    write_regression_reproduction(metrics, output, sources=SOURCES, intervals=intervals, level=0.9)
    text = output.read_text()
    low, high = t_interval({0: 0.05, 1: 0.06, 2: 0.07})
    assert (f"| wine | mc_dropout | uncalibrated | msce | seed 002 | 0.068 | 0.06000 | [{number(got.low)}, "
            f"{number(got.high)}] | no | [{number(low)}, {number(high)}] |") in text
    assert "our 90 % interval" in text and "2 of 6 published values lie inside our interval." in text
    assert mean_intervals([save_empty(tmp_path)], mean_estimates(metrics), 0.9, "auto") == {}


def save_empty(tmp_path):
    """A split's replicates file of a run without the bootstrap (uncertainty.enabled: false)."""
    path = tmp_path / "none.npz"
    save_replicates(path, ("wine", "mc_dropout", 0), {("uncalibrated", "msce"): np.empty(0)})
    return path


def test_published_values_are_the_seed_s():
    published = read_published()
    assert published[("uci_wine", "mc_dropout", "uncalibrated", "msce", "kuleshov2018")] == 0.096
    assert published[("uci_crime", "mc_dropout", "isotonic", "msce", "kuleshov2018")] == 0.015
    assert published[("uci_crime", "mc_dropout", "isotonic", "msce", "seed")] == 0.033
    assert published[("uci_crime", "mc_dropout", "isotonic_two_sided", "msce_two_sided", "seed")] == 0.124


def test_figures_are_byte_identical_and_average_the_splits(tmp_path):
    levels = [0.0, 0.5, 1.0]
    curves = []
    for split in range(2):
        entry = {"one_sided": [0.0, 0.4 + 0.1 * split, 1.0], "two_sided": [0.0, 0.3, 1.0], "rmse": [1.0, 2.0],
                 "std": [0.5, 0.7]}
        data = {"levels": levels, "outputs": [1, 2], "order": ["uncalibrated", "std_scaling"],
                "methods": {"uncalibrated": entry, "std_scaling": entry}}
        path = tmp_path / f"split{split}.json"
        path.write_text(json.dumps(data))
        curves.append(path)
    for kind in ("reliability", "horizon"):
        png, pdf = tmp_path / f"{kind}.png", tmp_path / f"{kind}.pdf"
        write_regression_figure(curves, kind, png, pdf, title="energy, ensemble")
        first = png.read_bytes(), pdf.read_bytes()
        write_regression_figure(curves, kind, png, pdf, title="energy, ensemble")
        assert first == (png.read_bytes(), pdf.read_bytes()) and first[0].startswith(b"\x89PNG")


def test_reproduction_report_marks_ours_outside_a_bias_corrected_interval(tmp_path):
    """A basic interval of a biased MSCE may exclude our (plug-in) mean: the cell then shows, after †, the
    bias-corrected estimate the interval is centred on, and a note says so; a percentile interval never."""
    from calibrepro.bootstrap import Interval

    metrics = metrics_csv(tmp_path)  # wine mc_dropout uncalibrated msce: mean 0.06
    output = tmp_path / "reproduction.md"
    key = ("wine", "mc_dropout", "uncalibrated", "msce")
    write_regression_reproduction(metrics, output, sources=SOURCES, intervals={key: Interval(0.0, 0.05, 0.02)})
    text = output.read_text()
    assert "| 0.06000 | [0, 0.05000] † 0.02000 | no |" in text and "†: ours lies outside its interval" in text
    write_regression_reproduction(metrics, output, sources=SOURCES, intervals={key: Interval(0.0, 0.05, 0.06)})
    assert "†" not in output.read_text()


def test_the_t_interval_is_clipped_to_the_metric_range(tmp_path):
    """MSCE 0.001/0.002/0.009 over three splits: mean - t s / sqrt(3) < 0, shown (and compared) from 0."""
    rows = [("wine", "mc_dropout", "uncalibrated", split, "msce", value) for split, value in enumerate([0.001, 0.002, 0.009])]
    metrics = tmp_path / "metrics.csv"
    metrics.write_text(tidy_csv(COLUMNS, rows))
    output = tmp_path / "reproduction.md"
    write_regression_reproduction(metrics, output, sources=SOURCES)
    low, high = t_interval({0: 0.001, 1: 0.002, 2: 0.009})
    assert low < 0
    assert f"| 0.004000 | — | no | [0, {number(high)}] |" in output.read_text()
