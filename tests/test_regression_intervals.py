"""The regression metrics' bootstrap intervals: the method ``auto`` takes (the coverage study's choice, kept in
``RegressionMetric.interval``), clipping to the metric's range, reruns, and the study's known truth."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from calibrepro import bootstrap as B
from calibrepro.regression import metrics as M
from calibrepro.regression.distributions import Gaussian
from calibrepro.regression.uncertainty import (
    BLOCK_HORIZONS,
    block_counts,
    load_replicates,
    mean_intervals,
    resample_weights,
    save_replicates,
)

ROOT = Path(__file__).resolve().parents[1]
REGRESSION_METHODS = ("percentile", "basic", "debiased")  # BCa needs a jackknife the regression part has not


def bench_coverage():
    spec = importlib.util.spec_from_file_location("bench_coverage", ROOT / "benchmarks" / "bench_coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def skewed_files(tmp_path, estimate=0.05, shift=0.002, splits=3):
    """Replicate files of every metric whose bootstrap lies above the estimate (as a plug-in MSCE's does)."""
    rng = np.random.default_rng(1)
    files, reps = [], {}
    for split in range(splits):
        values = {("uncalibrated", name): estimate + shift + rng.gamma(2.0, 0.004, size=500) for name in M.REGRESSION_METRICS}
        for key, r in values.items():
            reps.setdefault(key[1], []).append(r)
        files.append(tmp_path / f"split{split}.npz")
        save_replicates(files[-1], ("wine", "mc_dropout", split), values)
    estimates = {("wine", "mc_dropout", "uncalibrated", name): estimate for name in M.REGRESSION_METRICS}
    return files, estimates, {name: np.mean(r, axis=0) for name, r in reps.items()}


def test_auto_takes_each_regression_metric_s_own_method(tmp_path):
    files, estimates, mean_reps = skewed_files(tmp_path)
    got = mean_intervals(files, estimates, 0.95, "auto")
    for name, spec in M.REGRESSION_METRICS.items():
        assert spec.interval in REGRESSION_METHODS
        assert B.interval_method(name, "auto", "regression") == spec.interval
        expected = B.interval(mean_reps[name], 0.05, 0.95, spec.interval, bounds=spec.bounds)
        assert got[("wine", "mc_dropout", "uncalibrated", name)] == expected
        others = {B.interval(mean_reps[name], 0.05, 0.95, m, bounds=spec.bounds) for m in REGRESSION_METHODS}
        assert len(others) == 3  # the data tell the methods apart, so the equality above is the choice's
    for choice in REGRESSION_METHODS:  # any other choice overrides every metric's own
        forced = mean_intervals(files, estimates, 0.95, choice)
        assert forced[("wine", "mc_dropout", "uncalibrated", "msce")] == B.interval(
            mean_reps["msce"], 0.05, 0.95, choice, bounds=(0.0, None))


def test_regression_intervals_are_clipped_to_the_metric_range(tmp_path):
    """A bootstrap far above the estimate mirrors the basic interval below 0: it is clipped at 0 (MSCE, RMSE,
    CRPS, sharpness, area), at 1 for coverage; NLL is unbounded and keeps its negative end."""
    files, estimates, mean_reps = skewed_files(tmp_path, estimate=0.01, shift=0.05)
    got = mean_intervals(files, estimates, 0.95, "basic")
    for name, spec in M.REGRESSION_METRICS.items():
        bounds = got[("wine", "mc_dropout", "uncalibrated", name)]
        low, high = spec.bounds
        raw = B.basic_interval(mean_reps[name], 0.01, 0.95)
        assert raw.low < 0
        assert bounds.low == (raw.low if low is None else max(raw.low, low))
        assert high is None or bounds.high <= high
        assert bounds.low <= bounds.centre <= bounds.high


def test_regression_replicates_and_intervals_are_byte_identical_on_rerun(tmp_path):
    index = np.repeat(np.arange(40), 3)  # windows of 3 hours: resampled together
    weights = resample_weights(index, 200, 7, "wine", "mc_dropout", 0)
    assert np.array_equal(weights, resample_weights(index, 200, 7, "wine", "mc_dropout", 0))
    assert (weights.reshape(200, 40, 3) == weights.reshape(200, 40, 3)[..., :1]).all()
    rng = np.random.default_rng(0)
    sigma = np.exp(rng.normal(size=index.size))
    terms = M.sample_terms(Gaussian(np.zeros(index.size), sigma), 1.3 * sigma * rng.normal(size=index.size))
    values = {("isotonic", name): spec.value(terms, weights) for name, spec in M.REGRESSION_METRICS.items()}
    for name in ("a", "b"):
        save_replicates(tmp_path / f"{name}.npz", ("wine", "mc_dropout", 0), values)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    assert load_replicates(tmp_path / "a.npz")[1].keys() == values.keys()
    estimates = {("wine", "mc_dropout", "isotonic", n): spec.value(terms) for n, spec in M.REGRESSION_METRICS.items()}
    first = mean_intervals([tmp_path / "a.npz"], estimates, 0.95, "auto")
    assert first == mean_intervals([tmp_path / "b.npz"], estimates, 0.95, "auto") and len(first) == 9


@pytest.mark.parametrize("s", [0.7, 1.5])
def test_the_coverage_study_s_closed_form_truth_matches_the_metrics_on_a_large_sample(s):
    """bench_coverage.py's population values (closed form) against the registered metrics on 200,000 draws of
    its own generator: the coverage study's "truth" is the value of the metrics the pipeline computes."""
    bench = bench_coverage()
    names = list(M.REGRESSION_METRICS)
    truth = dict(zip(names, bench.regression_population(s, names)))
    predictive, y, _ = bench.regression_test_set(s, 200_000, 0, np.random.default_rng(5))
    got = M.compute_regression_metrics(predictive, y)
    for name in names:
        tolerance = 2e-4 if name.startswith(("msce", "coverage")) else 3e-3
        assert got[name] == pytest.approx(truth[name], rel=tolerance * 10, abs=tolerance), name


def test_a_table_s_samples_are_resampled_one_by_one_as_before():
    """One row per sample: the multinomial counts of the classification bootstrap, same seed, same draws."""
    index = np.array([4, 9, 2, 7, 5])  # a split's sample rows, not in order
    weights = resample_weights(index, 30, 3, "wine", "mc_dropout", 1)
    counts = B.resample_counts(5, 30, B.bootstrap_seed(3, "regression", "wine", "mc_dropout", 1))
    assert np.array_equal(weights, counts[:, np.argsort(np.argsort(index))].astype(float))


def test_a_time_series_is_resampled_in_circular_blocks_of_consecutive_windows():
    """Windows of H rows: blocks of BLOCK_HORIZONS * H consecutive windows, wrapping around; every resample
    draws as many windows as there are; a block as long as the series draws each window once."""
    counts = block_counts(50, 200, 6, 0)
    assert counts.shape == (200, 50) and (counts.sum(axis=1) == 50).all()
    assert (block_counts(10, 5, 10, 1) == 1).all() and (block_counts(10, 5, 99, 1) == 1).all()
    drawn = counts > 0
    neighbours = (drawn & np.roll(drawn, -1, axis=1)).mean()
    assert neighbours > 0.5 > drawn.mean() ** 2  # neighbours are drawn together, unlike one by one (0.4)
    hours = 4
    index = np.repeat(np.arange(100), hours)
    weights = resample_weights(index, 50, 0, "energy", "ensemble", 0)
    windows = weights[:, ::hours]
    assert np.array_equal(weights, np.repeat(windows, hours, axis=1))
    expected = block_counts(100, 50, BLOCK_HORIZONS * hours, B.bootstrap_seed(0, "regression", "energy", "ensemble", 0))
    assert np.array_equal(windows, expected)
