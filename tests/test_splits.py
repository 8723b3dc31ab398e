"""The calibration/test split is the thesis's stratified scikit-learn split."""

import numpy as np
import pytest
from sklearn.model_selection import train_test_split

from calibrepro.splits import load_split, make_split, save_split


@pytest.fixture
def labels():
    return np.random.default_rng(1).integers(0, 10, size=1000)


def test_split_is_exactly_the_thesis_formula(labels):
    calibration, test = make_split(labels, 0.5, seed=0)
    expected_calibration, expected_test = train_test_split(
        np.arange(len(labels)), test_size=0.5, random_state=0, stratify=labels
    )
    np.testing.assert_array_equal(calibration, expected_calibration)
    np.testing.assert_array_equal(test, expected_test)


def test_halves_are_disjoint_cover_everything_and_are_stratified(labels):
    calibration, test = make_split(labels, 0.5, seed=3)
    assert np.intersect1d(calibration, test).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([calibration, test])), np.arange(len(labels)))
    per_class_cal = np.bincount(labels[calibration], minlength=10)
    per_class_all = np.bincount(labels, minlength=10)
    assert np.all(np.abs(per_class_cal - per_class_all / 2) <= 1)


def test_seeds_give_different_splits_and_fractions_are_exact(labels):
    first, _ = make_split(labels, 0.5, seed=0)
    second, _ = make_split(labels, 0.5, seed=1)
    assert not np.array_equal(np.sort(first), np.sort(second))
    calibration, test = make_split(labels, 0.7, seed=0)
    assert (len(calibration), len(test)) == (700, 300)


def test_split_file_round_trip(tmp_path, labels):
    calibration, test = make_split(labels, 0.5, seed=0)
    save_split(tmp_path / "s.npz", calibration, test, labels)
    loaded = load_split(tmp_path / "s.npz")
    for got, expected in zip(loaded, (calibration, test, labels)):
        np.testing.assert_array_equal(got, expected)
