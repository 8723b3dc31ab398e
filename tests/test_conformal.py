"""Conformal prediction sets: the scores by their definitions, the threshold, the guarantee, the JSON round trip,
the pipeline's repeated evaluation against the estimator, and the bad inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibrepro.calibrators.base import softmax
from calibrepro.conformal import ConformalClassifier, ConformalError, conformal_from_json, make_conformal
from calibrepro.conformal.metrics import evaluate_repeats, set_metrics, summarise
from calibrepro.conformal.scores import quantile_index, rank_order, sorted_scores, threshold
from calibrepro.conformal.splits import make_conformal_splits


def synthetic(n=3000, k=10, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = scale * rng.standard_normal((n, k)) + 3 * np.eye(k)[labels]
    return softmax(logits, "float64"), labels


def loop_scores(p, score, u=None, penalty=0.01, k_reg=5):
    """Every label's score by its definition, one row and label at a time (module docstring of scores.py)."""
    out = np.zeros_like(p)
    for i, row in enumerate(p):
        for y in range(len(row)):
            above = [j for j in range(len(row)) if row[j] > row[y] or (row[j] == row[y] and j < y)]
            rank = len(above) + 1
            if score == "lac":
                out[i, y] = 1 - row[y]
                continue
            share = 1.0 if u is None else u[i]
            out[i, y] = sum(row[above]) + share * row[y]
            if score == "raps":
                out[i, y] += penalty * max(0, rank - k_reg)
    return out


@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
@pytest.mark.parametrize("randomized", [False, True])
def test_vectorised_scores_equal_their_definitions(score, randomized):
    p, _ = synthetic(n=40, k=7, seed=3)
    p[0, :] = p[0, [0, 0, 2, 3, 4, 5, 6]] / p[0, [0, 0, 2, 3, 4, 5, 6]].sum()  # a tie: the lower class ranks first
    u = np.random.default_rng(1).uniform(size=len(p)) if randomized else None
    order = rank_order(p)
    ranked = sorted_scores(p, order, score, u, penalty=0.05, k_reg=2)
    in_class_order = np.empty_like(ranked)
    np.put_along_axis(in_class_order, order, ranked, axis=1)
    np.testing.assert_allclose(in_class_order, loop_scores(p, score, u, penalty=0.05, k_reg=2), rtol=0, atol=1e-12)


def test_threshold_is_the_ceil_n_plus_one_quantile():
    scores = np.arange(1, 100, dtype=float)[::-1]  # 99 scores 99..1
    assert quantile_index(99, 0.1) == 90  # (99 + 1) * 0.9 = 90 exactly, not 91
    assert threshold(scores, 0.1) == 90.0
    assert threshold(scores, 0.5) == 50.0
    with pytest.raises(ConformalError, match=r"^the calibration set: 18 calibration samples are too few for alpha "
                                             r"0\.05: ceil\(\(n \+ 1\)\(1 - alpha\)\) = 19 > n, so every prediction set "
                                             r"would be every label; use at least 19 samples or a larger alpha$"):
        threshold(np.ones(18), 0.05)
    assert threshold(np.arange(19.0), 0.05) == 18.0  # n = 19 = 1/alpha - 1: the largest score


@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
def test_coverage_lies_in_the_finite_sample_bounds(score):
    """Mean coverage over 100 repeats within [1 - alpha, 1 - alpha + 1/(n + 1)] up to 3 standard errors."""
    p, labels = synthetic(n=2000, seed=1)
    calibration, test = make_conformal_splits(labels, np.arange(len(labels)), 100, 0.5, seed=0)
    for alpha, repeats in evaluate_repeats(p, labels, calibration, test, score=score, alphas=[0.1, 0.05]).items():
        coverage = np.array([r["coverage"] for r in repeats])
        noise = 3 * coverage.std(ddof=1) / math.sqrt(len(coverage))
        assert 1 - alpha - noise <= coverage.mean() <= 1 - alpha + 1 / (calibration.shape[1] + 1) + noise


def test_randomised_aps_is_smaller_than_the_deterministic():
    p, labels = synthetic(n=4000, seed=2, scale=1.0)
    sizes = {}
    for randomized in (True, False):
        cp = make_conformal("aps", 0.1, randomized=randomized).fit(p[:2000], labels[:2000])
        sets = cp.predict(p[2000:])
        sizes[randomized] = sets.sum(axis=1)
        if not randomized:  # a deterministic APS set is empty exactly where the top label's mass exceeds q
            np.testing.assert_array_equal(sizes[False] == 0, p[2000:].max(axis=1) > cp.threshold_)
    assert sizes[True].mean() < sizes[False].mean()


@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
def test_json_round_trip_predicts_the_same_sets(score):
    p, labels = synthetic()
    cp = make_conformal(score, 0.05, random_state=7).fit(p[:1500], labels[:1500])
    restored = conformal_from_json(json.loads(json.dumps(cp.to_json())))
    assert restored.threshold_ == cp.threshold_ and restored.get_params() == cp.get_params()
    np.testing.assert_array_equal(restored.predict(p[1500:]), cp.predict(p[1500:]))
    np.testing.assert_array_equal(cp.predict(p[1500:]), cp.predict(p[1500:]))  # seeded: the same on every call


@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
def test_pipeline_repeats_equal_the_estimator_fitted_per_repeat(score):
    """evaluate_repeats sorts once for every repeat; its numbers are those of a ConformalClassifier per repeat."""
    p, labels = synthetic(n=1200, seed=4)
    calibration, test = make_conformal_splits(labels, np.arange(len(labels)), 3, 0.5, seed=5)
    results = evaluate_repeats(p, labels, calibration, test, score=score, alphas=[0.1], randomized=False)
    for repeat, (cal, tst) in enumerate(zip(calibration, test)):
        cp = ConformalClassifier(score, 0.1, randomized=False).fit(p[cal], labels[cal])
        sets = cp.predict(p[tst])
        expected = set_metrics(sets.sum(axis=1), sets[np.arange(len(tst)), labels[tst]], labels[tst], 0.1, 10)
        got = results[0.1][repeat]
        assert got["threshold"] == cp.threshold_
        assert {key: got[key] for key in expected} == expected


def test_set_metrics_by_hand():
    sizes = np.array([1, 1, 2, 0, 5])
    covered = np.array([True, False, True, False, True])
    labels = np.array([0, 0, 1, 1, 2])
    values = set_metrics(sizes, covered, labels, 0.5, 12)
    assert values["coverage"] == 0.6 and values["size"] == 1.8
    assert values["singleton"] == 0.4 and values["empty"] == 0.2
    assert values["covgap"] == pytest.approx((0.0 + 0.0 + 0.5) / 3)  # classes 0, 1: 1/2 covered; class 2: 1
    assert values["size_share_0-1"] == 0.6 and values["coverage_size_0-1"] == pytest.approx(1 / 3)
    assert values["size_share_11-100"] == 0.0 and "coverage_size_11-100" not in values  # K = 12: bin 11-12
    summary = summarise([{"coverage": 0.9}, {"coverage": 0.92}])
    assert summary["coverage"] == pytest.approx(0.91) and summary["coverage_low"] < 0.9 < summary["coverage_high"]


@pytest.mark.parametrize("change, message", [
    ({"alpha": 1.5}, r"^alpha 1\.5 must lie strictly between 0 and 1"),
    ({"alpha": 0.0}, r"^alpha 0\.0 must lie strictly between 0 and 1"),
    ({"score": "thr"}, r"^unknown conformity score 'thr'; known: lac, aps, raps$"),
])
def test_bad_settings(change, message):
    with pytest.raises(ConformalError, match=message):
        make_conformal(**{"score": "aps", "alpha": 0.1, **change})


def test_bad_calibration_data():
    p, labels = synthetic(n=100)
    with pytest.raises(ConformalError, match=r"^cal\.npz: every label is 3; a calibration set needs samples of at "
                                             r"least two classes$"):
        ConformalClassifier().fit(p, np.full(100, 3), where="cal.npz")
    bad = p.copy()
    bad[5] *= 1.1
    with pytest.raises(ConformalError, match=r"^cal\.npz: row 5 is no probability vector \(sum 1\.1,"):
        ConformalClassifier().fit(bad, labels, where="cal.npz")
    with pytest.raises(ConformalError, match=r"^cal\.npz: 9 calibration samples are too few for alpha 0\.05"):
        ConformalClassifier(alpha=0.05).fit(p[:9], labels[:9], where="cal.npz")
    fitted = ConformalClassifier().fit(p, labels)
    with pytest.raises(ConformalError, match=r"^probabilities: 3 classes, the conformal classifier was fitted on 10$"):
        fitted.predict(softmax(np.zeros((2, 3)), "float64"))
    with pytest.raises(ConformalError, match=r"has no option 'lambda'"):
        make_conformal("raps", 0.1, **{"lambda": 0.1})


def tied(n, k, seed):
    """Probabilities with ties: rounded rows, rows of equal probabilities, zeros; and their labels."""
    p, labels = synthetic(n=n, k=k, seed=seed, scale=1.0)
    p[: n // 4] = np.round(p[: n // 4], 2) + 1e-3
    p[n // 4: n // 4 + 10] = 1.0
    p[n // 4 + 10: n // 4 + 20, : k // 2] = 0.0
    return p / p.sum(axis=1, keepdims=True), labels


def reference_repeats(p, labels, calibration, test, score, alphas, randomized, seed=0, penalty=0.01, k_reg=5):
    """evaluate_repeats the simple way: every row's stable argsort and every score, the sets marked label by label."""
    from calibrepro.conformal.metrics import repeat_draws
    from calibrepro.conformal.scores import label_ranks, prediction_sets

    order = rank_order(p)
    results = {alpha: [] for alpha in alphas}
    for repeat, (cal, tst) in enumerate(zip(calibration, test)):
        u = repeat_draws(seed, repeat, score, len(labels), randomized)
        scores = sorted_scores(p, order, score, u, penalty=penalty, k_reg=k_reg)
        true = scores[np.arange(len(labels)), label_ranks(order, labels)]
        for alpha in alphas:
            q = threshold(true[cal], alpha)
            sets = prediction_sets(scores[tst], order[tst], q)
            values = set_metrics(sets.sum(axis=1), sets[np.arange(len(tst)), labels[tst]], labels[tst], alpha,
                                 p.shape[1])
            results[alpha].append({**values, "threshold": q})
    return results


@pytest.mark.parametrize("k", [3, 40])
def test_rank_table_equals_the_stable_sort(k):
    """RankTable sorts the values only and counts the label's rank: the stable argsort's numbers, ties included."""
    from calibrepro.conformal.scores import RankTable, label_ranks

    p, labels = tied(600, k, seed=k)
    order = rank_order(p)
    table = RankTable(p, labels)
    ranked = np.take_along_axis(p, order, axis=1)
    assert np.array_equal(table.ranked, ranked) and np.array_equal(table.cumulative, np.cumsum(ranked, axis=1))
    assert np.array_equal(table.ranks, label_ranks(order, labels))
    again = RankTable(p[::-1].copy(), labels[::-1], reuse=RankTable(p, labels))  # another table's memory
    assert np.array_equal(again.ranked, ranked[::-1]) and np.array_equal(again.ranks, table.ranks[::-1])


@pytest.mark.parametrize("score", ["lac", "aps", "raps"])
@pytest.mark.parametrize("randomized", [True, False])
def test_repeats_equal_a_simple_reference(score, randomized):
    """evaluate_repeats (one value sort, lookups and bisections) gives exactly the numbers of the reference (a stable
    argsort, every score, every set marked), randomised draws and ties included."""
    p, labels = tied(1500, 40, seed=6)
    calibration, test = make_conformal_splits(labels, np.arange(len(labels)), 3, 0.5, seed=1)
    got = evaluate_repeats(p, labels, calibration, test, score=score, alphas=[0.1, 0.05, 0.5], randomized=randomized)
    assert got == reference_repeats(p, labels, calibration, test, score, [0.1, 0.05, 0.5], randomized)


def test_the_sweep_figure_of_a_model_without_a_usable_alpha_is_drawn_empty(tmp_path):
    """Every alpha too small for a tiny conformal calibration part leaves the sweep empty (the step logs why):
    the figure is drawn without lines instead of failing the run."""
    from calibrepro.report.conformal import build_sweep_figure

    figure = build_sweep_figure([], 1.3, "tiny / model")
    figure.savefig(tmp_path / "empty.png")
    assert (tmp_path / "empty.png").stat().st_size > 0
    assert all(not ax.get_lines()[:-1] for ax in figure.axes)  # only the fitted temperature's line
