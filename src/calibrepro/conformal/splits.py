"""The conformal splits of a data set's test half: ``results/<name>/conformal_splits/{dataset}/seed{seed}.npz``.

Each calibrator was fitted on the calibration half of the data set's split (:mod:`calibrepro.splits`); a
conformal threshold fitted on any of those samples would see data the calibrator was fitted on, and
the coverage guarantee needs the conformal calibration samples exchangeable with the test samples
given the (fixed) calibrated model. So the **test half** is split again, ``repeats`` times: repeat ``r``
is :func:`calibrepro.splits.make_split` of the test half's labels with ``fraction`` of it to the conformal
calibration part and seed ``seed + r`` (stratified, the thesis's split function), so that the
pipeline's split and these are drawn the same way.

The file holds ``calibration`` (R, n) and ``test`` (R, m): rows of the model's logits (indices into the
evaluation set, like the split file's), and ``labels`` (N,), the labels they were drawn from.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from calibrepro.conformal.scores import ConformalError
from calibrepro.io import atomic_path
from calibrepro.splits import SmallCalibrationWarning, SplitError, make_split


def make_conformal_splits(labels: np.ndarray, test_half: np.ndarray, repeats: int, fraction: float, seed: int,
                          where: str = "the data set") -> tuple[np.ndarray, np.ndarray]:
    """(calibration (R, n), test (R, m)): the conformal splits of the rows ``test_half`` (module docstring)."""
    test_half = np.asarray(test_half, dtype=np.int64)
    labels_half = np.asarray(labels)[test_half]
    calibration, test = [], []
    for repeat in range(repeats):
        try:
            with warnings.catch_warnings():  # few samples per class only make the metrics noisier, as the repeats show
                warnings.simplefilter("ignore", SmallCalibrationWarning)
                cal, tst = make_split(labels_half, fraction, seed + repeat,
                                      where=f"{where}: the test half's conformal split (conformal.calibration_fraction)")
        except SplitError as error:
            raise ConformalError(str(error).replace("split.calibration_fraction", "conformal.calibration_fraction")) \
                from None
        calibration.append(test_half[cal])
        test.append(test_half[tst])
    return np.stack(calibration), np.stack(test)


def random_conformal_splits(test_half: np.ndarray, repeats: int, fraction: float, seed: int
                            ) -> tuple[np.ndarray, np.ndarray]:
    """The conformal splits without stratification (a test half with a class of one sample cannot be stratified):
    repeat ``r`` a permutation of ``test_half`` seeded with ``(seed, r)``, its first ``round(fraction * m)`` rows the
    conformal calibration part."""
    test_half = np.asarray(test_half, dtype=np.int64)
    size = min(max(1, round(fraction * len(test_half))), len(test_half) - 1)
    orders = [np.random.default_rng([int(seed), repeat]).permutation(test_half) for repeat in range(repeats)]
    return np.stack([order[:size] for order in orders]), np.stack([order[size:] for order in orders])


def usable_alphas(n: int, alphas) -> tuple[list[float], list[float]]:
    """``(usable, too small)``: the alphas whose threshold exists with ``n`` conformal calibration samples
    (``ceil((n + 1)(1 - alpha)) <= n``), and those for which every set would be every label."""
    from calibrepro.conformal.scores import quantile_index

    usable = [alpha for alpha in alphas if quantile_index(n, alpha) <= n]
    return usable, [alpha for alpha in alphas if alpha not in usable]


def save_conformal_splits(path: str | Path, calibration: np.ndarray, test: np.ndarray, labels: np.ndarray) -> None:
    """Write a conformal splits file (module docstring), atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, calibration=calibration.astype(np.int64), test=test.astype(np.int64),
                 labels=np.asarray(labels, dtype=np.int64))


def load_conformal_splits(path: str | Path, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(calibration, test)`` of a conformal splits file; with ``labels``, check they are those it was drawn from."""
    with np.load(path, allow_pickle=False) as archive:
        calibration, test, drawn_from = archive["calibration"], archive["test"], archive["labels"]
    if labels is not None and not np.array_equal(np.asarray(labels), drawn_from):
        raise ConformalError(f"{path}: drawn from other labels than the model's; delete it and run the workflow again")
    return calibration, test
