"""Regression splits and predictions files: disjoint seeded parts, chronological series, exact round trips."""

from __future__ import annotations

import numpy as np
import pytest

from calibrepro.regression.predictions import (
    Predictions,
    PredictionsFileError,
    load_predictions,
    part_of,
    rows_of,
    save_predictions,
)
from calibrepro.regression.splits import (
    RegressionSplitError,
    load_arrays,
    load_split,
    make_split,
    save_arrays,
    save_split,
)

SETTINGS = {"test_fraction": 0.1, "calibration_fraction": 0.2, "seed": 0}


def test_random_splits_are_disjoint_seeded_and_cover_the_data():
    first = make_split("d", 500, 0, **SETTINGS)
    parts = [first.train, first.calibration, first.test]
    assert [len(p) for p in parts] == [360, 90, 50]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(500))
    assert all(np.array_equal(p, np.sort(p)) for p in parts)
    again, other = make_split("d", 500, 0, **SETTINGS), make_split("d", 500, 1, **SETTINGS)
    assert np.array_equal(first.test, again.test) and np.array_equal(first.calibration, again.calibration)
    assert not np.array_equal(first.test, other.test)


def test_fixed_benchmark_splits_keep_their_test_part():
    train = np.array([np.arange(0, 90), np.arange(10, 100)])
    test = np.array([np.arange(90, 100), np.arange(0, 10)])
    split = make_split("wine", 100, 1, **SETTINGS, fixed=(train, test))
    assert np.array_equal(split.test, np.arange(10))
    assert np.array_equal(np.sort(np.concatenate([split.train, split.calibration])), np.arange(10, 100))
    assert len(split.calibration) == 18
    with pytest.raises(RegressionSplitError, match="split 2 asked for, but the benchmark has 2 splits"):
        make_split("wine", 100, 2, **SETTINGS, fixed=(train, test))


def test_series_splits_are_chronological_with_a_gap():
    split = make_split("energy", 1000, 0, test_fraction=0.2, calibration_fraction=0.1, seed=0, series=True, gap=9)
    assert np.array_equal(split.test, np.arange(800, 1000))
    assert np.array_equal(split.calibration, np.arange(700, 791))  # the 9 windows whose targets reach the test part: out
    assert np.array_equal(split.train, np.arange(0, 691))


def test_too_few_samples_name_the_data_set():
    with pytest.raises(RegressionSplitError, match=r"regression\.tiny: the test part of a split has 1 samples"):
        make_split("tiny", 12, 0, **SETTINGS)


def test_split_and_arrays_files_round_trip_byte_identically(tmp_path):
    split = make_split("d", 60, 0, **SETTINGS)
    save_split(tmp_path / "a.npz", split)
    save_split(tmp_path / "b.npz", split)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    loaded = load_split(tmp_path / "a.npz")
    assert all(np.array_equal(getattr(loaded, p), getattr(split, p)) for p in ("train", "calibration", "test"))
    x, y = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    save_arrays(tmp_path / "data.npz", x, y, series=False, given={"family": "gaussian", "params": {"mean": y, "std": y + 1}})
    arrays = load_arrays(tmp_path / "data.npz")
    assert np.array_equal(arrays.x, x) and arrays.y.shape == (6, 1) and not arrays.series and arrays.fixed is None
    assert arrays.given["family"] == "gaussian" and np.array_equal(arrays.given["params"]["std"], y + 1)


def test_predictions_rows_are_sample_major_and_round_trip(tmp_path):
    y = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # two windows, three forecast hours
    params = {"loc": y + 0.5, "scale": np.ones((2, 3)), "df": np.full((2, 3), 5.0)}
    part = part_of(y, np.array([7, 9]), rows_of(params))
    assert part.y.tolist() == [1, 2, 3, 4, 5, 6]
    assert part.index.tolist() == [7, 7, 7, 9, 9, 9] and part.output.tolist() == [0, 1, 2, 0, 1, 2]
    assert part.params["loc"].tolist() == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5]
    predictions = Predictions("student_t", part, part_of(y[:1], np.array([3]), rows_of({k: v[:1] for k, v in params.items()})),
                              {"kind": "evidential"})
    save_predictions(tmp_path / "p.npz", predictions, mean=part.params["loc"], std=np.full(6, 1.29))
    loaded = load_predictions(tmp_path / "p.npz")
    assert loaded.family == "student_t" and loaded.metadata == {"kind": "evidential"}
    assert set(loaded.test.params) == {"loc", "scale", "df"} and np.array_equal(loaded.test.params["df"], params["df"].ravel())
    assert loaded.calibration.index.tolist() == [3, 3, 3]
    with np.load(tmp_path / "p.npz") as archive:  # the arrays for the test part
        assert {"y", "index", "mean", "std"} <= set(archive.files)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(PredictionsFileError, match="bad.npz: not a predictions file"):
        load_predictions(tmp_path / "bad.npz")
