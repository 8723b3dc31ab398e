"""Reproducible calibration/test splits of a data set's evaluation samples.

A logits file whose metadata records a calibration pool (``data.calibration_pool``: N held-out
training images of a network trained here, :func:`calibrepro.training.data.pool_from_training`)
holds the pool's N rows last; the split is drawn from the rows before them and the pool's rows are
stored beside it (``pool``), for the calibration-set-size study alone.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

from calibrepro.io import atomic_path


#: below this many calibration samples per class on average, fits are noisy: warn (the thesis has 500 or more)
MIN_CALIBRATION_PER_CLASS = 10


class SplitError(ValueError):
    """A data set's labels cannot be split into stratified calibration and test halves."""


class SmallCalibrationWarning(UserWarning):
    """The calibration half has few samples per class; fitted calibrators will be noisy."""


def _split(labels: np.ndarray, calibration_fraction: float, seed: int):
    test_size = round(1.0 - calibration_fraction, 12)
    return train_test_split(np.arange(len(labels)), test_size=test_size, random_state=seed, stratify=labels)


def _empty_class(labels: np.ndarray, calibration_fraction: float, seed: int) -> tuple[str, int] | None:
    """``(half, class)`` of a class that gets no sample in a half, or None when every class has both."""
    classes, counts = np.unique(labels, return_counts=True)
    rarest = int(classes[np.argmin(counts)])
    n_test = math.ceil(round(1.0 - calibration_fraction, 12) * len(labels))  # scikit-learn's rounding
    if len(labels) - n_test < len(classes):  # scikit-learn refuses halves smaller than the number of classes
        return "calibration", rarest
    if n_test < len(classes):
        return "test", rarest
    calibration, test = _split(labels, calibration_fraction, seed)
    for half, indices in (("calibration", calibration), ("test", test)):
        missing = np.setdiff1d(classes, labels[indices])
        if missing.size:
            return half, int(missing[0])
    return None


def make_split(
    labels: np.ndarray, calibration_fraction: float, seed: int, where: str = "the data set"
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split of ``range(N)`` into (calibration, test) index arrays.

    Exactly the thesis's split (docs/decisions.md, "The split"):
    ``train_test_split(np.arange(N), test_size=1 - calibration_fraction, random_state=seed, stratify=labels)``,
    the first half fitting the calibrators. ``1 - calibration_fraction`` is rounded to 12
    decimals so that e.g. 0.7 gives a test size of exactly 0.3 (identical to the plain
    expression for the thesis's 0.5). The indices keep scikit-learn's (shuffled) order, as in
    the thesis: fits sum their losses in that order, so sorting could move a last digit.

    Raises :class:`SplitError` naming ``where``, the class, its sample count and a fraction that
    works when a class cannot be given a sample in both halves; warns
    (:class:`SmallCalibrationWarning`) when the calibration half has fewer than
    :data:`MIN_CALIBRATION_PER_CLASS` samples per class on average.
    """
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    if counts.size and counts.min() < 2:
        rare = int(classes[np.argmin(counts)])
        raise SplitError(
            f"{where}: class {rare} has only 1 sample; a stratified calibration/test split needs at least 2 per "
            "class (one for each half). Add samples of that class, or remove it from every model's file."
        )
    empty = _empty_class(labels, calibration_fraction, seed)
    if empty is not None:
        half, label = empty
        count = int(counts[np.searchsorted(classes, label)])
        candidates = [f / 20 for f in range(1, 20) if _empty_class(labels, f / 20, seed) is None]
        hint = (
            f"split.calibration_fraction: {min(candidates, key=lambda f: abs(f - calibration_fraction))} would work"
            if candidates
            else "no calibration_fraction gives every class a sample in both halves; add samples of the rare classes"
        )
        raise SplitError(
            f"{where}: split.calibration_fraction {calibration_fraction} leaves class {label} ({count} samples) "
            f"with no sample in the {half} half; {hint}"
        )
    calibration, test = _split(labels, calibration_fraction, seed)
    per_class = len(calibration) / len(classes)
    if per_class < MIN_CALIBRATION_PER_CLASS:
        warnings.warn(
            f"{where}: the calibration half has {len(calibration)} samples for {len(classes)} classes "
            f"({per_class:.1f} per class on average, fewer than {MIN_CALIBRATION_PER_CLASS}); the fitted "
            "calibrators and their metrics will be noisy",
            SmallCalibrationWarning,
            stacklevel=2,
        )
    return calibration, test


def pool_rows(metadata: dict, samples: int) -> np.ndarray:
    """The rows of a logits file's calibration pool (its last ``data.calibration_pool`` rows; none when absent)."""
    size = int((metadata.get("data") or {}).get("calibration_pool", 0))
    return np.arange(samples - size, samples, dtype=np.int64)


def save_split(path: str | Path, calibration: np.ndarray, test: np.ndarray, labels: np.ndarray,
               pool: np.ndarray | None = None) -> None:
    """Write the index arrays (and the labels they were drawn from, to check other models against);
    ``pool``: the calibration pool's rows (:func:`pool_rows`), stored when there are any."""
    arrays = {"calibration": calibration.astype(np.int64), "test": test.astype(np.int64),
              "labels": np.asarray(labels, dtype=np.int64)}
    if pool is not None and len(pool):
        arrays["pool"] = np.asarray(pool, dtype=np.int64)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)


def load_split(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(calibration, test, labels)`` of a split file."""
    with np.load(path, allow_pickle=False) as archive:
        return archive["calibration"], archive["test"], archive["labels"]


def load_pool(path: str | Path) -> np.ndarray:
    """The calibration pool's rows of a split file (empty when it has none)."""
    with np.load(path, allow_pickle=False) as archive:
        return archive["pool"] if "pool" in archive.files else np.zeros(0, dtype=np.int64)
