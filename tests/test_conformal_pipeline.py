"""The conformal part of a run: its configuration, its steps on a model's files, the verdicts, tables and figure."""

from __future__ import annotations

import numpy as np
import pytest

from calibrepro.conformal.claims import conformal_claims
from calibrepro.conformal.results import read_conformal, read_sweep
from calibrepro.config import ConfigError, load_schema, validate_config
from calibrepro.report.conformal import render_conformal_claims, render_conformal_tables
from calibrepro.splits import load_split
from calibrepro.steps import calibration, conformal
from workflow_helpers import ROOT, synthetic_logits

SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
SETTINGS = {"scores": ["lac", "aps", "raps"], "alphas": [0.1, 0.05], "randomized": True, "penalty": 0.01,
            "k_reg": 5, "seed": 0}


def test_config_defaults_and_figures():
    models = {"d": {"a": {"source": "logits", "path": "a.npz"}, "b": {"source": "logits", "path": "b.npz"}}}
    config = validate_config({"models": models}, SCHEMA)
    assert config["conformal"] == {"enabled": True, "scores": ["lac", "aps", "raps"], "alphas": [0.1, 0.05],
                                   "repeats": 10, "calibration_fraction": 0.5, "randomized": True, "penalty": 0.01,
                                   "k_reg": 5, "seed": 0, "figures": ["d/a"]}
    with pytest.raises(ConfigError, match=r"^conformal\.figures: d/c is not a configured model \(models\.d\.c\)$"):
        validate_config({"models": models, "conformal": {"figures": ["d/c"]}}, SCHEMA)
    with pytest.raises(ConfigError, match=r"conformal\.alphas\.0: 1\.5"):
        validate_config({"models": models, "conformal": {"alphas": [1.5]}}, SCHEMA)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One model's split, calibrators, conformal splits and conformal rows, as the rules make them."""
    folder = tmp_path_factory.mktemp("conformal")
    logits = folder / "m.npz"
    synthetic_logits(logits, n=1200, k=5, seed=2)
    split, splits, part = folder / "split.npz", folder / "conformal_splits.npz", folder / "m.csv"
    calibration.split_step(logits, 0.5, 0, split, dataset="d")
    calibrators = {method: folder / f"{method}.json" for method in ("uncalibrated", "temperature_scaling", "isotonic")}
    calibration.fit_step(logits, split, calibrators)
    conformal.conformal_split_step(split, splits, repeats=4, calibration_fraction=0.5, seed=0, dataset="d")
    conformal.conformal_step(logits, split, splits, part, calibrators=calibrators, dataset="d", model="m", **SETTINGS)
    return folder, logits, split, splits, part, calibrators


def test_conformal_data_are_the_test_half_never_the_calibrators_data(run):
    folder, logits, split, splits, *_ = run
    calibration_half, test_half, _ = load_split(split)
    with np.load(splits) as archive:
        cal, test = archive["calibration"], archive["test"]
    assert cal.shape == (4, 300) and test.shape == (4, 300)
    for c, t in zip(cal, test):
        assert not np.intersect1d(c, calibration_half).size and not np.intersect1d(t, calibration_half).size
        assert not np.intersect1d(c, t).size and np.array_equal(np.sort(np.r_[c, t]), np.sort(test_half))
    assert len({tuple(c) for c in cal}) == 4  # the repeats differ


def test_conformal_rows_cover_every_calibrator_score_and_alpha(run):
    part = run[4]
    cells = read_conformal(part)
    assert list(cells)[:2] == [("d", "m", "uncalibrated", "lac", 0.1), ("d", "m", "uncalibrated", "lac", 0.05)]
    assert len(cells) == 3 * 3 * 2
    for (_, _, method, score, alpha), values in cells.items():
        assert values["repeats"] == 4 and values["n_calibration"] == 300
        assert values["coverage_low"] <= values["coverage"] <= values["coverage_high"]
        assert values["bound_high"] == pytest.approx(1 - alpha + 1 / 301)
        assert 1 - alpha - 0.05 < values["coverage"] < values["bound_high"] + 0.05  # 4 repeats of 300: loose
        assert 0 <= values["covgap"] <= 1 and values["size"] >= values["singleton"]


def test_figure_step_writes_the_sweep_and_the_figure(run):
    folder, logits, split, splits, part, calibrators = run
    sweep, png, pdf = folder / "sweep.csv", folder / "f.png", folder / "f.pdf"
    conformal.conformal_figure_step(logits, split, splits, sweep, png, pdf, ts_calibrator=calibrators["temperature_scaling"],
                                    dataset="d", model="m", **SETTINGS)
    rows = read_sweep(sweep)
    assert len(rows) == len(conformal.TEMPERATURES) * 3 * 2 * 2
    sizes = {t: v for t, s, a, m, v in rows if s == "aps" and a == 0.1 and m == "size"}
    assert sizes[min(sizes)] < sizes[max(sizes)]  # a hotter softmax: larger APS sets
    assert png.stat().st_size > 10_000 and pdf.read_bytes().startswith(b"%PDF")


def test_tables_and_verdicts_of_the_run(run):
    part = run[4]
    md, tex = render_conformal_tables(read_conformal(part))
    assert "**d, APS, α = 0.1: mean set size**" in md and "\\begin{tabular}{lrrr}" in tex
    text = render_conformal_claims(part)
    assert text.count("\n| d    | T-scaling (published) |") == 3 and text.count("\n| d    | Isotonic   ") == 3


def cells_of(values):
    """conformal.csv cells of data set d, models m1, m2, alpha 0.1: (method, score) -> (size, covgap) per model."""
    cells = {}
    for (method, score), per_model in values.items():
        for model, (size, covgap) in zip(("m1", "m2"), per_model):
            cells[("d", model, method, score, 0.1)] = {"size": size, "covgap": covgap}
    return cells


def test_verdicts_hold_fail_and_are_not_checked():
    cells = cells_of({
        ("uncalibrated", "aps"): [(2.0, 0.05), (3.0, 0.06)], ("temperature_scaling", "aps"): [(2.5, 0.04), (3.1, 0.05)],
        ("uncalibrated", "lac"): [(1.5, 0.1), (1.6, 0.1)], ("temperature_scaling", "lac"): [(1.5, 0.1), (2.4, 0.1)],
    })
    claims = {claim.finding: claim for claim in conformal_claims(cells)}
    assert claims["enlarges"].verdict == "holds"
    assert claims["enlarges"].ours == "APS α=0.1: 2.5 → 2.8 (+12.0 %), 2/2 models"
    assert claims["covgap"].verdict == "holds"
    assert claims["lac_size"].verdict == "does not hold (LAC α=0.1: +25.8 %)"
    del cells[("d", "m1", "uncalibrated", "aps", 0.1)], cells[("d", "m2", "uncalibrated", "aps", 0.1)]
    claims = {claim.finding: claim for claim in conformal_claims(cells)}
    assert claims["enlarges"].verdict == "not checked: no APS/RAPS rows of uncalibrated and temperature_scaling"


def test_coverage_check_names_the_cells_outside_the_finite_sample_range():
    from calibrepro.conformal.claims import coverage_check

    base = {"bound_low": 0.9, "bound_high": 0.91}
    cells = {("d", "m", "a", "lac", 0.1): {**base, "coverage_low": 0.89, "coverage_high": 0.905},
             ("d", "m", "b", "lac", 0.1): {**base, "coverage_low": 0.92, "coverage_high": 0.95},
             ("d", "m", "c", "aps", 0.1): {**base, "coverage_low": 0.85, "coverage_high": 0.899}}
    assert coverage_check(cells) == (3, [("d", "m", "b", "lac", 0.1), ("d", "m", "c", "aps", 0.1)])


def test_small_test_halves_leave_out_an_alpha_and_stratification_with_a_warning(tmp_path):
    logits, split, splits, part = tmp_path / "m.npz", tmp_path / "s.npz", tmp_path / "c.npz", tmp_path / "m.csv"
    labels = np.r_[np.repeat([0, 1, 2], 10), [3, 3]]  # class 3: one sample in the test half
    synthetic_logits(logits, k=4, labels=labels, seed=3)
    calibration.split_step(logits, 0.5, 0, split, dataset="d")
    calibrators = {"uncalibrated": tmp_path / "u.json"}
    calibration.fit_step(logits, split, calibrators)
    conformal.conformal_split_step(split, splits, repeats=3, calibration_fraction=0.5, seed=0, dataset="d",
                                   log=tmp_path / "split.log")
    assert "the conformal splits are NOT stratified" in (tmp_path / "split.log").read_text()
    conformal.conformal_step(logits, split, splits, part, calibrators=calibrators, dataset="d", model="m",
                             log=tmp_path / "sets.log", **{**SETTINGS, "alphas": [0.2, 0.05]})
    assert {key[4] for key in read_conformal(part)} == {0.2}  # 8 conformal calibration samples: 0.05 needs 19
    assert "d/m: alpha 0.05 LEFT OUT: 8 conformal calibration samples are too few (at least 19" in \
        (tmp_path / "sets.log").read_text()
