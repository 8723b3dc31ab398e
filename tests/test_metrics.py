"""Metrics of thesis section 3.2: hand-computed cases, properties, agreement with scikit-learn."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss, log_loss

from calibrepro.metrics import METRICS, binned, compute_metrics, scores, smooth
from calibrepro.metrics.bins import bin_index, top_label
from calibrepro.reliability import reliability_bins

# Four binary samples used by several hand computations (M = 5 bins of width 0.2):
#   confidences 0.9 (correct), 0.8 (wrong), 0.6 (correct), 1.0 (correct)
PROBS4 = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [1.0, 0.0]])
LABELS4 = np.array([0, 1, 0, 0])


def test_registry_names():
    assert list(METRICS) == [
        "accuracy",
        "brier",
        "nll",
        "ece",
        "mce",
        "ece_l2",
        "ece_equal_mass",
        "mce_equal_mass",
        "classwise_ece",
        "ece_l2_debiased",
        "smooth_ece",
        "overconfidence",
    ]


def test_overconfidence_is_mean_confidence_minus_accuracy():
    # confidences 0.9, 0.8, 0.6, 1.0 (mean 0.825), three of four correct
    assert scores.overconfidence(PROBS4, LABELS4) == pytest.approx(0.825 - 0.75)
    assert scores.overconfidence(PROBS4, 1 - LABELS4) == pytest.approx(0.825 - 0.25)


# ------------------------------------------------------------------------------------ bins
def test_bin_index_edges_zero_and_one():
    # ((m-1)/M, m/M]: an edge belongs to the bin on its left, 0 to the first, 1.0 to the last
    values = [0.0, 1e-300, 0.2, np.nextafter(0.2, 1), 0.4, 0.6, 0.8, np.nextafter(0.8, 0), 1.0]
    assert bin_index(np.array(values), 5).tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 4]


@pytest.mark.parametrize("bins", [1, 2, 10, 15, 25, 29, 41, 100])
def test_bin_index_every_edge_exactly(bins):
    # fl(7/25) * 25 rounds above 7, so a bare ceil(p * M) would put 7/25 into bin 8
    edges = np.arange(bins + 1) / bins
    idx = bin_index(edges, bins)
    assert idx[0] == 0
    assert idx[1:].tolist() == list(range(bins))
    above = bin_index(np.nextafter(edges[1:-1], 2), bins)
    assert above.tolist() == list(range(1, bins))


def test_bin_index_float32_input_uses_exact_edges():
    # float32(1/15) is above the real 1/15 -> second bin; the float below it -> first bin
    x = np.float32(1 / 15)
    assert float(x) > 1 / 15
    assert bin_index(np.array([x], dtype=np.float32), 15).tolist() == [1]
    assert bin_index(np.array([np.nextafter(x, np.float32(0))], dtype=np.float32), 15).tolist() == [0]


# ------------------------------------------------------------------------------------ hand-computed cases
def test_accuracy_ties_go_to_lowest_index():
    probs = np.array([[0.5, 0.5, 0.0], [0.2, 0.4, 0.4], [0.1, 0.2, 0.7]])
    assert scores.accuracy(probs, [0, 1, 2]) == 1.0
    assert scores.accuracy(probs, [1, 2, 2]) == pytest.approx(1 / 3)


def test_brier_hand_computed():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    # (0.3^2 + 0.2^2 + 0.1^2 = 0.14) and (0.1^2 + 0.9^2 + 0.8^2 = 1.46): mean 0.8
    assert scores.brier(probs, [0, 1]) == pytest.approx(0.8, abs=1e-15)
    assert scores.brier(np.eye(3), [0, 1, 2]) == 0.0
    assert scores.brier(np.eye(3), [1, 2, 0]) == 2.0


def test_nll_hand_computed_with_exact_zeros():
    probs = np.array([[1.0, 0.0], [0.0, 1.0]])
    # row 1: clipped to [1-1e-15, 1e-15] (sum 1); row 2: true class clipped to 1e-15
    expected = (-math.log((1 - 1e-15) / ((1 - 1e-15) + 1e-15)) - math.log(1e-15 / (1e-15 + (1 - 1e-15)))) / 2
    assert scores.nll(probs, [0, 0]) == pytest.approx(expected, rel=1e-12)
    assert np.isfinite(scores.nll(probs, [1, 0]))
    assert scores.nll([[0.25, 0.75]], [1]) == pytest.approx(-math.log(0.75), rel=1e-15)


def test_ece_mce_l2_hand_computed():
    # bins (M=5): 0.9 and 1.0 -> (0.8, 1]: conf 0.95, acc 1; 0.8 -> (0.6, 0.8]: conf 0.8, acc 0;
    # 0.6 -> (0.4, 0.6]: conf 0.6, acc 1
    assert binned.ece(PROBS4, LABELS4, bins=5) == pytest.approx(0.5 * 0.05 + 0.25 * 0.8 + 0.25 * 0.4, abs=1e-15)
    assert binned.mce(PROBS4, LABELS4, bins=5) == pytest.approx(0.8, abs=1e-15)
    l2 = math.sqrt(0.5 * 0.05**2 + 0.25 * 0.8**2 + 0.25 * 0.4**2)
    assert binned.ece_l2(PROBS4, LABELS4, bins=5) == pytest.approx(l2, abs=1e-15)


def test_ece_confidence_exactly_on_edge_goes_left():
    # confidence 0.6 is the upper edge of bin 3 of 5; 0.6 + 1ulp would be bin 4
    probs = np.array([[0.6, 0.4], [0.7, 0.3]])
    rb = reliability_bins(probs, [0, 1], bins=5)
    assert rb["count"] == [0, 0, 1, 1, 0]
    up = np.array([[np.nextafter(0.6, 1), 1 - np.nextafter(0.6, 1)], [0.7, 0.3]])
    assert reliability_bins(up, [0, 1], bins=5)["count"] == [0, 0, 0, 2, 0]


def test_equal_mass_hand_computed():
    # sorted confidences 0.6(ok) 0.8(wrong) | 0.9(ok) 1.0(ok): gaps |0.5-0.7| and |1-0.95|
    assert binned.ece_equal_mass(PROBS4, LABELS4, bins=2) == pytest.approx(0.5 * 0.2 + 0.5 * 0.05, abs=1e-15)
    assert binned.mce_equal_mass(PROBS4, LABELS4, bins=2) == pytest.approx(0.2, abs=1e-15)
    # N < M: empty chunks are skipped; one sample per bin
    assert binned.ece_equal_mass(PROBS4, LABELS4, bins=8) == pytest.approx((0.1 + 0.8 + 0.4 + 0.0) / 4, abs=1e-15)


def test_equal_mass_split_sizes_like_array_split():
    rng = np.random.default_rng(5)
    conf = rng.uniform(0.5, 1, 17)
    probs = np.stack([conf, 1 - conf], axis=1)
    labels = rng.integers(0, 2, 17)
    order = np.argsort(conf, kind="stable")
    correct = (labels == 0).astype(float)
    expected = sum(len(ch) / 17 * abs(correct[ch].mean() - conf[ch].mean()) for ch in np.array_split(order, 4))
    assert binned.ece_equal_mass(probs, labels, bins=4) == pytest.approx(expected, abs=1e-15)


def test_classwise_ece_hand_computed():
    # class 0: bins (0.8,1]: sum p 1.9 vs 2 positives; (0.6,0.8]: 0.8 vs 0; (0.4,0.6]: 0.6 vs 1 -> 1.3
    # class 1: (0,0.2] holds 0.1, 0.2 (edge) and 0.0: 0.3 vs 1; (0.2,0.4]: 0.4 vs 0 -> 1.1
    # average over the K=2 classes (Kull et al.; the thesis's 1/M is a typo): 2.4 / 4 / 2
    assert binned.classwise_ece(PROBS4, LABELS4, bins=5) == pytest.approx(0.3, abs=1e-15)


def test_classwise_ece_matches_naive_definition():
    rng = np.random.default_rng(0)
    n, k, bins = 3000, 7, 15
    logits = rng.normal(size=(n, k)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    probs[:10] = np.round(probs[:10] * 15) / 15  # values exactly on edges
    probs[10, :] = 0.0
    probs[10, 3] = 1.0
    labels = rng.integers(0, k, n)
    total = 0.0
    for j in range(k):
        pj, yj = probs[:, j], labels == j
        for m in range(1, bins + 1):
            lo, hi = (m - 1) / bins, m / bins
            inb = (pj > lo) & (pj <= hi) if m > 1 else (pj <= hi)
            if inb.any():
                total += inb.sum() / n * abs(yj[inb].mean() - pj[inb].mean())
    assert binned.classwise_ece(probs, labels, bins) == pytest.approx(total / k, rel=1e-12, abs=1e-15)


def test_reliability_bins_json_ready():
    rb = reliability_bins(PROBS4, LABELS4, bins=5)
    assert rb["count"] == [0, 0, 1, 1, 2]
    assert rb["confidence"][:2] == [None, None] and rb["accuracy"][:2] == [None, None]
    assert rb["confidence"][2:] == pytest.approx([0.6, 0.8, 0.95])
    assert rb["accuracy"][2:] == [1.0, 0.0, 1.0]
    assert all(type(c) is int for c in rb["count"])


# ------------------------------------------------------------------------------------ properties
def _calibrated_sample(n, rng):
    """Binary predictions whose confidence c is right with probability exactly c."""
    conf = rng.uniform(0.5, 1.0, n)
    first = rng.integers(0, 2, n)  # which column holds the top probability
    probs = np.where(first[:, None] == 0, np.stack([conf, 1 - conf], 1), np.stack([1 - conf, conf], 1))
    correct = rng.uniform(size=n) < conf
    labels = np.where(correct, first, 1 - first)
    return probs, labels


def test_ece_of_calibrated_sample_goes_to_zero():
    rng = np.random.default_rng(0)
    values = [binned.ece(*_calibrated_sample(n, rng)) for n in (1_000, 30_000, 1_000_000)]
    assert values[0] > values[1] > values[2]
    assert values[2] < 0.003
    assert binned.ece_equal_mass(*_calibrated_sample(1_000_000, rng)) < 0.003


def test_ece_of_overconfident_sample_is_the_gap():
    # confidence 0.9 everywhere, 60 % right: every sample in one bin, ECE = MCE = 0.3
    probs = np.tile([0.9, 0.1], (10, 1))
    labels = np.array([0] * 6 + [1] * 4)
    assert binned.ece(probs, labels) == pytest.approx(0.3)
    assert binned.mce(probs, labels) == pytest.approx(0.3)


def test_compute_metrics_equals_individual_functions():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(500, 12)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = rng.integers(0, 12, 500)
    names = list(METRICS)
    shared = compute_metrics(probs, labels, names, bins=10)
    assert list(shared) == names
    for name in names:
        assert shared[name] == METRICS[name](probs, labels, bins=10), name
        assert isinstance(shared[name], float)
    assert compute_metrics(probs, labels, ["mce", "accuracy"]) == {
        "mce": binned.mce(probs, labels),
        "accuracy": scores.accuracy(probs, labels),
    }


def test_float32_input_is_computed_in_float64():
    rng = np.random.default_rng(2)
    probs = rng.dirichlet(np.ones(5), 200).astype(np.float32)
    labels = rng.integers(0, 5, 200)
    for name, fn in METRICS.items():
        assert fn(probs, labels) == fn(probs.astype(np.float64), labels), name


# ------------------------------------------------------------------------------------ scikit-learn
def test_binary_brier_agrees_with_sklearn():
    rng = np.random.default_rng(3)
    p1 = rng.uniform(size=1000)
    probs = np.stack([1 - p1, p1], axis=1)
    labels = rng.integers(0, 2, 1000)
    # sum over the two classes = twice the binary (positive-class) Brier score
    assert scores.brier(probs, labels) == pytest.approx(2 * brier_score_loss(labels, p1), rel=1e-13)


def test_multiclass_brier_agrees_with_sklearn():
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(6), 800)
    labels = rng.integers(0, 6, 800)
    try:
        ref = brier_score_loss(labels, probs, scale_by_half=False)
    except TypeError:  # scikit-learn < 1.7 has no multi-class Brier
        pytest.skip("this scikit-learn has no multi-class brier_score_loss")
    assert scores.brier(probs, labels) == pytest.approx(ref, rel=1e-13)


def _old_log_loss(labels, probs, eps=1e-15):
    """scikit-learn <= 1.4 ``log_loss(eps=1e-15)``: clip, renormalise rows, mean of -log p_y."""
    y_pred = np.clip(np.asarray(probs, dtype=np.float64), eps, 1 - eps)
    y_pred /= y_pred.sum(axis=1)[:, np.newaxis]
    onehot = np.eye(y_pred.shape[1])[labels]
    loss = -(onehot * np.log(y_pred, where=onehot > 0, out=np.zeros_like(y_pred))).sum(axis=1)
    return np.average(loss)


def test_nll_reproduces_old_sklearn_log_loss_bit_for_bit():
    rng = np.random.default_rng(6)
    probs = rng.dirichlet(np.full(10, 0.2), 4000)
    probs[probs < 1e-3] = 0.0  # exact zeros, as binning methods output
    probs /= probs.sum(1, keepdims=True)
    labels = rng.integers(0, 10, 4000)
    assert scores.nll(probs, labels) == _old_log_loss(labels, probs)


def test_nll_agrees_with_current_sklearn_log_loss_without_clipping():
    rng = np.random.default_rng(7)
    probs = rng.dirichlet(np.ones(4), 1000)
    labels = rng.integers(0, 4, 1000)
    assert scores.nll(probs, labels) == pytest.approx(log_loss(labels, probs, labels=range(4)), rel=1e-13)


# ------------------------------------------------------------------------------------ input checks
@pytest.mark.parametrize(
    "probs, labels, message",
    [
        (np.ones(3), [0, 1, 2], "2-D"),
        (np.ones((3, 2)) / 2, [0, 1], "shape"),
        (np.ones((2, 2)) / 2, [0, 2], "lie in"),
        (np.ones((2, 2)) / 2, [0.5, 1], "integers"),
        (np.array([[np.nan, 1.0], [0.5, 0.5]]), [0, 1], "NaN"),
    ],
)
def test_bad_inputs_raise(probs, labels, message):
    with pytest.raises(ValueError, match=message):
        binned.ece(probs, labels)


def test_unknown_metric_name():
    with pytest.raises(ValueError, match="unknown metric"):
        compute_metrics(PROBS4, LABELS4, ["ece", "sharpness"])


# ------------------------------------------------------------------------------------ debiased l2 and smooth ECE
def _reference_cases():
    """Softmax outputs of several shapes and calibrations, with exact ties and a tiny sample."""
    from scipy.special import softmax

    rng = np.random.default_rng(12)
    cases = []
    for n, k, scale in [(400, 10, 3.0), (2000, 100, 1.5), (300, 3, 0.7), (5000, 10, 0.4), (40, 4, 2.0)]:
        logits = rng.normal(size=(n, k)) * scale
        labels = rng.integers(0, k, size=n)
        logits[np.arange(n), labels] += 2.0
        probs = softmax(logits, axis=1)
        probs[: n // 10] = probs[n // 10]  # a block of exactly equal confidences
        cases.append((probs, labels))
    return cases


def test_ece_l2_debiased_hand_computed():
    # 2 equal-mass bins of 2: {0.6 ok, 0.8 wrong}, {0.9 ok, 1.0 ok}
    # bin 1: A = 0.5, C = 0.7: (0.2^2 - 0.25/1) = -0.21; bin 2: A = 1, C = 0.95: 0.0025 - 0 = 0.0025
    # weights 1/2: sum = -0.10375 < 0 -> clipped at 0
    assert binned.ece_l2_debiased(PROBS4, LABELS4, bins=2) == 0.0
    probs = np.array([[0.9, 0.1]] * 4 + [[0.6, 0.4]] * 4)
    labels = np.array([1, 1, 1, 0, 0, 0, 0, 0])  # conf 0.9 bin: 1/4 correct; conf 0.6 bin: 4/4 correct
    # bin {0.6 x4}: A = 1, C = 0.6 -> 0.16; bin {0.9 x4}: A = 0.25, C = 0.9 -> 0.4225 - 0.1875/3 = 0.36
    expected = math.sqrt(0.5 * 0.16 + 0.5 * 0.36)
    assert binned.ece_l2_debiased(probs, labels, bins=2) == pytest.approx(expected, abs=1e-15)


def test_ece_l2_debiased_equals_the_authors_package():
    calibration = pytest.importorskip("calibration")  # PyPI uncertainty-calibration (test extra)
    for probs, labels in _reference_cases():
        for bins in (15, 10):
            theirs = calibration.lower_bound_scaling_ce(
                probs, labels, p=2, debias=True, num_bins=bins, binning_scheme=calibration.get_equal_bins,
                mode="top-label",
            )
            assert binned.ece_l2_debiased(probs, labels, bins=bins) == pytest.approx(theirs, abs=1e-9)
        # their top-level entry point picks the same scheme for continuous outputs
        assert binned.ece_l2_debiased(probs, labels) == pytest.approx(
            calibration.get_calibration_error(probs, labels, p=2, debias=True, mode="top-label"), abs=1e-9
        )


def test_smooth_ece_equals_relplot():
    relplot = pytest.importorskip("relplot")  # PyPI relplot (test extra), the authors' package
    for probs, labels in _reference_cases():
        conf, correct = top_label(probs, labels)
        assert smooth.smooth_ece(probs, labels) == pytest.approx(relplot.smECE(conf, correct), abs=1e-9)
        assert smooth.smooth_ece_at(conf, correct, 0.05) == pytest.approx(relplot.smECE_sigma(conf, correct, 0.05), abs=1e-9)


def test_smooth_ece_bandwidth_is_the_fixed_point():
    probs, labels = _reference_cases()[0]
    conf, correct = top_label(probs, labels)
    sigma = smooth.smooth_ece_bandwidth(conf, correct)
    # bisection keeps sigma on the side where sigma >= smECE_sigma, within 2^-10 of the crossing
    assert sigma >= smooth.smooth_ece_at(conf, correct, sigma)
    below = sigma - 2.0 ** -smooth.SMOOTH_ECE_BISECTIONS
    assert below < smooth.smooth_ece_at(conf, correct, below)


def test_smooth_ece_of_a_perfectly_calibrated_sample_is_small_and_of_a_wrong_one_large():
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.5, 1.0, size=20_000)
    probs = np.stack([conf, 1 - conf], axis=1)
    calibrated = (rng.random(20_000) >= conf).astype(int)  # label 0 with probability conf
    assert smooth.smooth_ece(probs, calibrated) < 0.01
    always_right = np.zeros(20_000, dtype=int)  # accuracy 1 at mean confidence 0.75
    assert smooth.smooth_ece(probs, always_right) == pytest.approx(0.25, abs=0.01)
