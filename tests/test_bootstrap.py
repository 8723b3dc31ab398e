"""Bootstrap intervals: fast resampling equals brute force, coverage, paired differences, the bootstrap step."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy.special import softmax
from scipy.stats import binom
from threadpoolctl import threadpool_limits

from calibrepro import bootstrap as B
from calibrepro import metrics as M
from calibrepro.metrics import binned, scores, smooth
from calibrepro.metrics.bins import bin_index, top_label
from calibrepro import resampling as R


def synthetic(n: int, k: int, seed: int, scale: float = 2.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, size=n)
    logits = rng.normal(size=(n, k)) * scale
    logits[np.arange(n), labels] += 2.0
    probs = softmax(logits, axis=1)
    if n > 1:
        probs[: max(1, n // 20)] = probs[max(1, n // 20)]  # exact ties across samples
    return probs, labels


@pytest.mark.parametrize("n, k", [(300, 10), (250, 4), (200, 30), (9, 3), (1, 2)])
def test_fast_replicates_equal_brute_force_recomputation(n, k):
    probs, labels = synthetic(n, k, seed=n + k)
    names = list(M.METRICS)
    counts = B.resample_counts(n, 6, seed=1)
    fast = R.Resampling(probs, labels, names, bins=15).replicates(counts)
    bandwidth = smooth.smooth_ece_bandwidth(*top_label(probs, labels))  # the resamples keep the estimate's
    for r in range(counts.shape[0]):
        index = np.repeat(np.arange(n), counts[r])  # the resample as a multiset, samples in order
        brute = M.compute_metrics(probs[index], labels[index], [m for m in names if m != "smooth_ece"], bins=15)
        conf, correct = top_label(probs[index], labels[index])
        brute["smooth_ece"] = smooth.smooth_ece_at(conf, correct, bandwidth)  # fixed bandwidth
        for name in names:
            assert fast[name][r] == pytest.approx(brute[name], abs=1e-12, rel=1e-12), name


def test_smooth_ece_fine_grid_path_equals_the_dense_map(monkeypatch):
    probs, labels = synthetic(300, 5, seed=9)
    counts = B.resample_counts(300, 20, seed=2)
    dense = R.Resampling(probs, labels, ["smooth_ece"]).replicates(counts)["smooth_ece"]
    monkeypatch.setattr(R, "_SMOOTH_MAP_ENTRIES", 0)  # force the FFT path
    resampler = R.Resampling(probs, labels, ["smooth_ece"])
    assert resampler._replicate["smooth_ece"].map is None
    np.testing.assert_allclose(resampler.replicates(counts)["smooth_ece"], dense, rtol=1e-10, atol=1e-13)


def test_counts_are_multinomial_and_do_not_depend_on_the_block_size(monkeypatch):
    counts = B.resample_counts(500, 40, seed=7)
    assert counts.shape == (40, 500) and (counts.sum(axis=1) == 500).all()
    monkeypatch.setattr(B, "_BLOCK_ENTRIES", 1200)  # blocks of 2 resamples
    assert (B.resample_counts(500, 40, seed=7) == counts).all()
    assert not (B.resample_counts(500, 40, seed=8) == counts).all()
    with pytest.raises(ValueError, match="at least 1"):
        B.resample_counts(10, 0, seed=0)


def test_replicates_do_not_depend_on_the_block_size(monkeypatch):
    probs, labels = synthetic(400, 10, seed=2)
    counts = B.resample_counts(400, 30, seed=3)
    whole = B.bootstrap_replicates([("m", probs)], labels, list(M.METRICS), counts)
    monkeypatch.setattr(B, "_BLOCK_ENTRIES", 4000)  # blocks of 10 resamples
    blocks = B.bootstrap_replicates([("m", probs)], labels, list(M.METRICS), counts)
    for name in M.METRICS:
        np.testing.assert_allclose(blocks["m"][name], whole["m"][name], rtol=1e-13, atol=1e-15)


def test_row_prefix_sums_handle_empty_segments_and_cuts_at_the_end():
    rng = np.random.default_rng(11)
    values = rng.random((4, 7))
    cuts = np.sort(rng.integers(0, 8, size=(4, 5)), axis=1)
    cuts[0] = [0, 0, 3, 3, 7]  # empty segments, a cut before the first and after the last sample
    cuts[3] = 7
    flat = np.append(values.ravel(), 0.0)
    expected = np.array([[values[r, :c].sum() for c in row] for r, row in enumerate(cuts)])
    np.testing.assert_allclose(R._row_prefix_sums(flat, cuts), expected, rtol=1e-15, atol=0)


def test_replicates_do_not_depend_on_the_number_of_blas_threads():
    probs, labels = synthetic(3000, 60, seed=6)
    counts = B.resample_counts(3000, 120, seed=7)
    with threadpool_limits(1):
        single = B.bootstrap_replicates([("m", probs)], labels, list(M.METRICS), counts)["m"]
    with threadpool_limits(4):
        several = B.bootstrap_replicates([("m", probs)], labels, list(M.METRICS), counts)["m"]
    for name in M.METRICS:
        assert single[name].tobytes() == several[name].tobytes(), name  # bit for bit


def test_percentile_interval_is_the_quantile_pair():
    values = np.arange(1, 101, dtype=float)  # 1..100
    assert B.percentile_interval(values, 0.9) == pytest.approx((np.quantile(values, 0.05), np.quantile(values, 0.95)))
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match="level"):
            B.percentile_interval(values, bad)


def test_paired_difference_of_a_method_with_itself_is_exactly_zero():
    probs, labels = synthetic(500, 10, seed=4)
    other = softmax(np.log(probs) * 0.7, axis=1)
    counts = B.resample_counts(500, 200, seed=5)
    reps = B.bootstrap_replicates([("a", probs), ("b", other)], labels, ["ece", "nll"], counts)
    estimates = {"a": binned.ece(probs, labels), "b": binned.ece(other, labels)}
    paired = B.paired_differences({m: reps[m]["ece"] for m in reps}, estimates, "a", 0.95)
    assert paired["a"] == (0.0, 0.0, 0.0)
    difference, low, high = paired["b"]
    assert difference == estimates["b"] - estimates["a"]
    assert (low, high) == B.percentile_interval(reps["b"]["ece"] - reps["a"]["ece"], 0.95)


def test_percentile_intervals_cover_the_truth_at_the_nominal_rate():
    """Known truth: a finite population of probability vectors; each replicate draws a test half from it.

    Labels are drawn from a miscalibrated model of the truth (the true class probabilities are the
    predicted ones raised to the power 0.5, renormalised), so accuracy, Brier, NLL and the binned
    ECE have population values computable exactly. With R replicates the number of covering
    intervals is Binomial(R, p); the test accepts the central 99.9 % range at p = 0.95, widened
    by 0.03 on the low side for the percentile interval's known small-sample under-coverage.
    """
    rng = np.random.default_rng(2024)
    k, pool, n, replicates, resamples, level = 5, 4000, 400, 300, 300, 0.95
    logits = rng.normal(size=(pool, k)) * 2.5
    probs = softmax(logits, axis=1)
    truth = softmax(logits * 0.5, axis=1)  # the real label distribution: the model is overconfident
    pred = np.argmax(probs, axis=1)
    conf = probs[np.arange(pool), pred]
    p_correct = truth[np.arange(pool), pred]
    true_values = {
        "accuracy": p_correct.mean(),
        "brier": np.mean(np.sum(probs**2, axis=1) - 2 * np.sum(probs * truth, axis=1) + 1),
        "nll": np.mean(-np.sum(truth * np.log(probs), axis=1)),
        # population ECE: per bin |E[correct] - E[conf]| weighted by the bin's share of the pool
        "ece": np.abs(np.bincount(bin_index(conf, 15), weights=p_correct - conf, minlength=15)).sum() / pool,
    }
    names = list(true_values)
    covered = {name: 0 for name in names}
    for r in range(replicates):
        index = rng.integers(0, pool, size=n)
        labels = np.array([rng.choice(k, p=truth[i]) for i in index])
        counts = B.resample_counts(n, resamples, seed=r)
        reps = B.bootstrap_replicates([("m", probs[index])], labels, names, counts)["m"]
        for name in names:
            low, high = B.percentile_interval(reps[name], level)
            covered[name] += low <= true_values[name] <= high
    low_count = binom.ppf(0.0005, replicates, level) - 0.03 * replicates
    high_count = binom.ppf(0.9995, replicates, level)
    for name in names:
        assert low_count <= covered[name] <= high_count, (name, covered[name] / replicates)


def test_bootstrap_step_estimates_equal_the_metrics_file(tmp_path):
    from calibrepro.calibrators import make_calibrator
    from calibrepro.io import write_json
    from calibrepro.steps.calibration import evaluate_step
    from calibrepro.steps.uncertainty import bootstrap_step
    from calibrepro.splits import make_split, save_split

    rng = np.random.default_rng(0)
    n, k = 600, 5
    labels = np.arange(n) % k
    logits = (rng.normal(size=(n, k)) * 2).astype(np.float32)
    logits[np.arange(n), labels] += 2
    np.savez(tmp_path / "logits.npz", logits=logits, labels=labels)
    calibration, test = make_split(labels, 0.5, 0)
    save_split(tmp_path / "split.npz", calibration, test, labels)
    methods = ["uncalibrated", "temperature_scaling", "isotonic"]
    calibrators = {}
    for method in methods:
        calibrators[method] = tmp_path / f"{method}.json"
        write_json(calibrators[method], make_calibrator(method).fit(logits[calibration], labels[calibration]).to_json())
    names = ["accuracy", "ece", "nll", "smooth_ece"]
    common = dict(metrics=names, bins=15, dataset="d", model="m", seed=0)
    evaluate_step(tmp_path / "logits.npz", tmp_path / "split.npz", tmp_path / "eval.csv", tmp_path / "rel.json",
                  calibrators=calibrators, **common)
    bootstrap_step(tmp_path / "logits.npz", tmp_path / "split.npz", tmp_path / "eval.csv", tmp_path / "int.csv",
                   tmp_path / "cmp.csv", calibrators=calibrators, resamples=200, level=0.9, bootstrap_seed=0, **common)
    with open(tmp_path / "eval.csv") as handle:
        values = {(r["method"], r["metric"]): r["value"] for r in csv.DictReader(handle)}
    with open(tmp_path / "int.csv") as handle:
        intervals = list(csv.DictReader(handle))
    assert len(intervals) == len(methods) * len(names)
    for row in intervals:
        assert row["estimate"] == values[(row["method"], row["metric"])]  # the same text: the same float
        assert float(row["low"]) <= float(row["centre"]) <= float(row["high"]) and row["level"] == "0.9"
        assert row["B"] == "200" and row["interval"] == M.METRICS[row["metric"]].interval  # auto: the metric's own
    with open(tmp_path / "cmp.csv") as handle:
        comparisons = list(csv.DictReader(handle))
    for row in comparisons:
        if row["method"] == row["best"]:
            assert (row["difference"], row["low"], row["high"], row["tied"]) == ("0.0", "0.0", "0.0", "1")
        else:
            assert row["tied"] == str(int(float(row["low"]) <= 0 <= float(row["high"])))
            best = float(values[(row["best"], row["metric"])])
            assert float(row["difference"]) == float(values[(row["method"], row["metric"])]) - best
    accuracy_best = {r["best"] for r in comparisons if r["metric"] == "accuracy"}
    best_value = max(float(values[(m, "accuracy")]) for m in methods)
    assert all(float(values[(b, "accuracy")]) == best_value for b in accuracy_best)
    # rerun: byte-identical
    first = (tmp_path / "int.csv").read_bytes(), (tmp_path / "cmp.csv").read_bytes()
    bootstrap_step(tmp_path / "logits.npz", tmp_path / "split.npz", tmp_path / "eval.csv", tmp_path / "int.csv",
                   tmp_path / "cmp.csv", calibrators=calibrators, resamples=200, level=0.9, bootstrap_seed=0, **common)
    assert ((tmp_path / "int.csv").read_bytes(), (tmp_path / "cmp.csv").read_bytes()) == first
    assert math.isfinite(float(intervals[0]["low"]))
    # a method chosen for all: BCa, in the intervals and the paired comparisons alike
    bootstrap_step(tmp_path / "logits.npz", tmp_path / "split.npz", tmp_path / "eval.csv", tmp_path / "int.csv",
                   tmp_path / "cmp.csv", calibrators=calibrators, resamples=200, level=0.9, bootstrap_seed=0,
                   interval="bca", **common)
    with open(tmp_path / "int.csv") as handle:
        assert {row["interval"] for row in csv.DictReader(handle)} == {"bca"}
    with open(tmp_path / "cmp.csv") as handle:
        assert {row["interval"] for row in csv.DictReader(handle)} == {"bca"}


def test_a_registered_mean_of_terms_metric_is_resampled_and_has_a_direction(monkeypatch):
    """Another task's metric needs only its spec: the bootstrap and the tables' direction read it."""
    squared_margin = M.Metric(
        "root_mean_square_confidence", lambda p, y, bins=15: float(np.sqrt(np.mean(top_label(p, y)[0] ** 2))),
        True, M.MeanOfTerms(lambda p, y: top_label(p, y)[0] ** 2, finish=np.sqrt),
    )
    monkeypatch.setitem(M._REGISTERED, squared_margin.name, squared_margin)
    probs, labels = synthetic(200, 4, seed=3)
    counts = B.resample_counts(200, 5, seed=4)
    fast = B.bootstrap_replicates([("m", probs)], labels, [squared_margin.name, "brier"], counts)["m"]
    for r in range(5):
        index = np.repeat(np.arange(200), counts[r])
        assert fast[squared_margin.name][r] == pytest.approx(squared_margin(probs[index], labels[index]), rel=1e-12)
    assert M.higher_is_better(squared_margin.name) and not M.higher_is_better("brier")
    from calibrepro.report.labels import metric_spec

    assert metric_spec(squared_margin.name).higher_is_better and metric_spec("accuracy").higher_is_better
    with pytest.raises(ValueError, match="already registered"):
        M.register(M.Metric("ece", binned.ece))


SKEWED = np.arange(101) ** 2 / 100.0  # quantiles by linear interpolation: 2.5 % -> 0.065, 50 % -> 25, 97.5 % -> 95.065


def test_basic_interval_known_answer():
    bounds = B.interval(SKEWED, 20.0, 0.95, "basic")
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((40 - 95.065, 40 - 0.065, 15.0))


def test_debiased_interval_known_answer():
    bounds = B.interval(SKEWED, 20.0, 0.95, "debiased")  # median bias 25 - 20 = 5, subtracted twice
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((0.065 - 10, 95.065 - 10, 15.0))


def test_intervals_are_clipped_to_the_metric_range_keeping_coverage():
    # SKEWED's basic interval around 20 is [-55.065, 39.935]: its lower end goes to 0
    bounds = B.interval(SKEWED, 20.0, 0.95, "basic", bounds=(0.0, None))
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((0.0, 40 - 0.065, 15.0))
    # debiased around 1: [0.065 - 48, 95.065 - 48], centre 1 - 24 -> clipped to 0 as well
    bounds = B.interval(SKEWED, 1.0, 0.95, "debiased", bounds=(0.0, 50.0))
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((0.0, 47.065, 0.0))
    # wholly below the range (bias larger than twice the estimate): the range's nearest point
    assert B.interval(SKEWED + 10.0, 1.0, 0.95, "basic", bounds=(0.0, 1.0)) == B.Interval(0.0, 0.0, 0.0)
    # a truth inside the range is covered by the clipped interval exactly when by the unclipped one
    rng = np.random.default_rng(4)
    for _ in range(200):
        replicates, estimate = rng.gamma(2.0, 0.01, size=300), rng.uniform(0.0, 0.05)
        raw = B.interval(replicates, estimate, 0.9, "basic")
        cut = B.interval(replicates, estimate, 0.9, "basic", bounds=M.spec("ece").bounds)
        assert 0.0 <= cut.low <= cut.centre <= cut.high <= 1.0
        for truth in rng.uniform(0.0, 0.1, size=20):
            assert (raw.low <= truth <= raw.high) == (cut.low <= truth <= cut.high)
    assert all(M.spec(name).bounds[0] == 0.0 for name in M.METRICS if name != "overconfidence")
    assert M.spec("overconfidence").bounds == (-1.0, 1.0)  # signed: below 0 is underconfident


def test_percentile_interval_known_answer_keeps_the_estimate_as_centre():
    bounds = B.interval(SKEWED, 20.0, 0.95, "percentile")
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((0.065, 95.065, 20.0))


def test_bca_interval_known_answers():
    from scipy.special import ndtri

    normal = ndtri((np.arange(200_000) + 0.5) / 200_000)  # replicates distributed exactly as N(0, 1)
    symmetric = np.array([-1.0, 0.0, 1.0])  # jackknife without skew: acceleration 0
    # z0 = estimate for N(0, 1) replicates, so with a = 0 BCa is [2 t - 1.96, 2 t + 1.96] around 2 t
    bounds = B.interval(normal, 0.3, 0.95, "bca", symmetric)
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((0.6 - 1.959964, 0.6 + 1.959964, 0.6), abs=2e-3)
    # jackknife d = (1, 1, -2): a = -6 / (6 * 6**1.5); with z0 = 0 the bounds are
    # Phi^-1 quantiles at -1.96 / (1 - 1.96 a) and 1.96 / (1 + 1.96 a)
    bounds = B.interval(normal, 0.0, 0.95, "bca", np.array([0.0, 0.0, 3.0]))
    assert (bounds.low, bounds.high, bounds.centre) == pytest.approx((-2.2616, 1.7294, 0.0), abs=2e-3)
    with pytest.raises(ValueError, match="jackknife"):
        B.interval(normal, 0.0, 0.95, "bca")


def test_paired_differences_use_the_chosen_interval_method():
    rng = np.random.default_rng(3)
    a, b = rng.gamma(2.0, size=500), rng.gamma(2.0, size=500)
    paired = B.paired_differences({"a": a, "b": b}, {"a": 1.0, "b": 1.5}, "a", 0.9, method="basic")
    expected = B.interval(b - a, 0.5, 0.9, "basic")
    assert paired["b"] == (0.5, expected.low, expected.high) and paired["a"] == (0.0, 0.0, 0.0)


def test_grouped_jackknife_leaves_out_each_group_once():
    probs, labels = synthetic(103, 4, seed=8)
    values = B.jackknife_values(probs, labels, ["accuracy", "ece"], groups=10)
    member = np.arange(103) % 10
    assert values["ece"].shape == (10,)
    assert values["accuracy"][3] == scores.accuracy(probs[member != 3], labels[member != 3])
