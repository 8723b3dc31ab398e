"""Split-conformal intervals beside recalibration: disjoint data, the coverage guarantee, the step and its tables."""

from __future__ import annotations

import numpy as np

from calibrepro.regression.conformal import read_intervals, repeat_halves, write_interval_tables
from calibrepro.regression.predictions import Predictions, part_of, save_predictions
from calibrepro.regression.steps import conformal_step

RECALIBRATORS = ["uncalibrated", "isotonic_two_sided", "std_scaling"]


def predictions_file(path, n=1200, seed=0, scale=1.6):
    """Gaussian predictives whose std is too small by ``scale``: the uncalibrated intervals under-cover."""
    rng = np.random.default_rng(seed)
    mean, std = rng.normal(size=n), rng.uniform(0.5, 1.5, size=n)
    y = mean + scale * std * rng.standard_normal(n)
    half = n // 2
    parts = [part_of(y[rows], rows, {"mean": mean[rows], "std": std[rows]})
             for rows in (np.arange(half), np.arange(half, n))]
    save_predictions(path, Predictions("gaussian", parts[1], parts[0]), mean[half:], std[half:])


def test_halves_split_the_test_part_and_differ():
    halves = repeat_halves(11, 3, seed=0, split=1)
    for calibration, scored in halves:
        assert len(calibration) == 5 and np.array_equal(np.sort(np.r_[calibration, scored]), np.arange(11))
    assert not np.array_equal(halves[0][0], halves[1][0])


def test_conformal_intervals_cover_and_recalibration_sits_beside(tmp_path):
    path, output = tmp_path / "split0.npz", tmp_path / "conformal.csv"
    predictions_file(path)
    conformal_step([("d", "m", 0, str(path))], output, recalibrators={"d": RECALIBRATORS}, alphas=[0.1, 0.05],
                   repeats=20, seed=0)
    cells = read_intervals(output)
    methods = list(dict.fromkeys(key[2] for key in cells))
    assert methods == ["conformal_normalised", "conformal_absolute", *RECALIBRATORS]
    for alpha in (0.1, 0.05):
        for method in ("conformal_normalised", "conformal_absolute"):  # n = 300: within the bound up to the noise
            assert 1 - alpha - 0.02 <= cells[("d", "m", method, alpha, "coverage")][0] <= 1 - alpha + 1 / 301 + 0.02
        assert cells[("d", "m", "uncalibrated", alpha, "coverage")][0] < 1 - alpha - 0.1  # std too small by 1.6
        # the normalised score adapts to sigma: narrower than the absolute one at the same coverage
        assert cells[("d", "m", "conformal_normalised", alpha, "width")][0] < \
            cells[("d", "m", "conformal_absolute", alpha, "width")][0]
    md, tex = tmp_path / "t.md", tmp_path / "t.tex"
    write_interval_tables(output, md, tex)
    text = md.read_text()
    assert "**alpha = 0.1: nominal coverage 90 %**" in text and "| d    | m     |" in text
    assert tex.read_text().count(r"\begin{tabular}") == 2


def test_an_alpha_too_small_for_the_test_part_is_left_out_with_a_warning(tmp_path):
    path = tmp_path / "split0.npz"
    predictions_file(path, n=40)  # a test part of 20: halves of 10
    log = tmp_path / "c.log"
    conformal_step([("d", "m", 0, str(path))], tmp_path / "c.csv", recalibrators={"d": ["uncalibrated"]},
                   alphas=[0.1, 0.05], repeats=2, seed=0, log=log)
    assert {key[3] for key in read_intervals(tmp_path / "c.csv")} == {0.1}
    assert "d/m, split 0: alpha 0.05 LEFT OUT: half the test part is too few samples for it" in log.read_text()
