"""Reliability data: bins with integer correct counts, the JSON file, its validation, Wilson intervals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibrepro.reliability import (
    ReliabilityFileError,
    accuracy_intervals,
    read_reliability,
    reliability_bins,
    wilson_interval,
    write_reliability,
)

PROBS = np.array([[0.9, 0.1], [0.8, 0.2], [0.6, 0.4], [1.0, 0.0], [0.85, 0.15]])
LABELS = np.array([0, 1, 0, 0, 0])


def test_bins_hold_integer_correct_counts():
    rb = reliability_bins(PROBS, LABELS, bins=5)
    # bins ((m-1)/5, m/5]: 0.6 -> 3rd, 0.8 -> 4th, 0.85, 0.9, 1.0 -> 5th
    assert rb["count"] == [0, 0, 1, 1, 3]
    assert rb["correct"] == [0, 0, 1, 0, 3]
    assert all(type(k) is int for k in rb["correct"])
    assert rb["accuracy"][2:] == [1.0, 0.0, 1.0]
    assert rb["confidence"][4] == pytest.approx((0.9 + 1.0 + 0.85) / 3)


def test_write_read_round_trip_and_validation(tmp_path):
    path = tmp_path / "r.json"
    methods = {"uncalibrated": reliability_bins(PROBS, LABELS, bins=5)}
    write_reliability(path, dataset="d", model="m", seed=0, bins=5, methods=methods)
    data = read_reliability(path)
    assert data["methods"] == methods and data["bins"] == 5 and data["dataset"] == "d"
    # a file without correct counts (written before they existed) gets them from accuracy x count
    old = json.loads(path.read_text())
    del old["methods"]["uncalibrated"]["correct"]
    path.write_text(json.dumps(old))
    assert read_reliability(path)["methods"]["uncalibrated"]["correct"] == [0, 0, 1, 0, 3]
    old["methods"]["uncalibrated"]["correct"] = [0, 0, 2, 0, 3]  # more correct than samples
    path.write_text(json.dumps(old))
    with pytest.raises(ReliabilityFileError, match=r"r\.json: methods\.uncalibrated\.correct must be 5 integers"):
        read_reliability(path)
    path.write_text("{not json")
    with pytest.raises(ReliabilityFileError, match=r"r\.json: cannot read reliability data"):
        read_reliability(path)


def test_wilson_interval_known_values():
    # Wilson (1927): centre (k + z^2/2) / (n + z^2), half width z sqrt(k(n-k)/n + z^2/4) / (n + z^2)
    z = 1.959963984540054
    for k, n in ((0, 10), (3, 10), (10, 10), (45, 50)):
        centre = (k + z * z / 2) / (n + z * z)
        half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
        assert wilson_interval(k, n, 0.95) == pytest.approx((centre - half, centre + half), abs=1e-12)
    low, high = wilson_interval(0, 10)
    assert low == pytest.approx(0.0, abs=1e-15) and high == pytest.approx(0.2775, abs=1e-4)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_accuracy_intervals_contain_the_accuracy():
    record = reliability_bins(PROBS, LABELS, bins=5)
    bounds = accuracy_intervals(record, 0.9)
    assert np.isnan(bounds[:2]).all()
    for (low, high), acc in zip(bounds[2:], record["accuracy"][2:]):
        assert low <= acc <= high
