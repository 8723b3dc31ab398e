"""Reproducible calibration/test splits of a data set's evaluation samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

from calibrepro.io import atomic_path


def make_split(labels: np.ndarray, calibration_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split of ``range(N)`` into (calibration, test) index arrays.

    Exactly the thesis's split (design.md §1):
    ``train_test_split(np.arange(N), test_size=1 - calibration_fraction, random_state=seed, stratify=labels)``,
    the first half fitting the calibrators. ``1 - calibration_fraction`` is rounded to 12
    decimals so that e.g. 0.7 gives a test size of exactly 0.3 (identical to the plain
    expression for the thesis's 0.5). The indices keep scikit-learn's (shuffled) order, as in
    the thesis: fits sum their losses in that order, so sorting could move a last digit.
    """
    labels = np.asarray(labels)
    test_size = round(1.0 - calibration_fraction, 12)
    calibration, test = train_test_split(
        np.arange(len(labels)), test_size=test_size, random_state=seed, stratify=labels
    )
    return calibration, test


def save_split(path: str | Path, calibration: np.ndarray, test: np.ndarray, labels: np.ndarray) -> None:
    """Write the index arrays (and the labels they were drawn from, to check other models against)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(
                handle,
                calibration=calibration.astype(np.int64),
                test=test.astype(np.int64),
                labels=np.asarray(labels, dtype=np.int64),
            )


def load_split(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(calibration, test, labels)`` of a split file."""
    with np.load(path, allow_pickle=False) as archive:
        return archive["calibration"], archive["test"], archive["labels"]
