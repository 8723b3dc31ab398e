"""A regression data set's cached arrays and its seeded train/calibration/test splits, as index files.

Every regressor of a data set is trained, recalibrated and tested on the same three disjoint parts:

- the test part: the benchmark's own split where it has one (the 20 fixed 90 %/10 % splits of
  Hernández-Lobato & Adams 2015 for wine), else a seeded random ``test_fraction`` of the samples;
  for a time series the last ``test_fraction`` of the windows, in time order (no look-ahead);
- the calibration part, which fits the recalibrators: a seeded random ``calibration_fraction`` of
  what is left for training (the training part must not be reused: a model's predictions on its
  own training samples are overconfident; Kuleshov et al. 2018, sec. 3.3), for a time series the
  windows just before the test part;
- the training part: the rest. For a series, the ``gap`` windows before each boundary are dropped
  (the caller passes the horizon minus one), so no target hour of one part is a target of the next.

A split file holds the three index arrays (int64, sorted) and nothing else; equal inputs and seeds
give byte-identical files. The data set's own arrays, as the models read them, are cached beside
(:func:`save_arrays`), so that the split and training jobs do not parse the source files again.
"""

from __future__ import annotations

import io as _io
import os
from dataclasses import dataclass

import numpy as np

from calibrepro.io import atomic_path

PARTS = ("train", "calibration", "test")


class RegressionSplitError(ValueError):
    """A data set is too small for its splits, or a split file is damaged; the message says what to do."""


@dataclass(frozen=True)
class Split:
    """Sample indices of the training, calibration and test parts."""

    train: np.ndarray
    calibration: np.ndarray
    test: np.ndarray


def _check_sizes(name: str, split: Split, minimum: int = 2) -> Split:
    for part in PARTS:
        if len(getattr(split, part)) < minimum:
            raise RegressionSplitError(
                f"regression.{name}: the {part} part of a split has {len(getattr(split, part))} samples (at least "
                f"{minimum} needed); use a data set with more samples or change test_fraction/calibration_fraction"
            )
    return split


def make_split(
    name: str,
    samples: int,
    index: int,
    *,
    test_fraction: float,
    calibration_fraction: float,
    seed: int,
    fixed=None,
    series: bool = False,
    gap: int = 0,
) -> Split:
    """Split number ``index`` of ``samples`` samples (see the module docstring for the rules).

    ``fixed``: the benchmark's own ``(train, test)`` index arrays, one row per split;
    ``series``: chronological blocks (the same split for every index: more splits of a series only
    retrain the models, each with its own seed).
    """
    rng = np.random.default_rng([seed, index])
    if series:
        n_test = int(round(samples * test_fraction))
        n_cal = int(round(samples * calibration_fraction))
        test = np.arange(samples - n_test, samples)
        calibration = np.arange(samples - n_test - n_cal, samples - n_test - gap)
        train = np.arange(0, max(0, samples - n_test - n_cal - gap))
    else:
        if fixed is not None:
            train_rows, test_rows = fixed
            if index >= len(train_rows):
                raise RegressionSplitError(
                    f"regression.{name}.splits: split {index} asked for, but the benchmark has {len(train_rows)} splits"
                )
            pool, test = np.sort(train_rows[index]), np.sort(test_rows[index])
        else:
            order = rng.permutation(samples)
            n_test = int(round(samples * test_fraction))
            pool, test = np.sort(order[n_test:]), np.sort(order[:n_test])
        mask = np.zeros(len(pool), bool)
        mask[rng.permutation(len(pool))[: int(round(len(pool) * calibration_fraction))]] = True
        calibration, train = pool[mask], pool[~mask]
    return _check_sizes(name, Split(*(np.asarray(part, np.int64) for part in (train, calibration, test))))


def _save_npz(path, arrays: dict) -> None:
    buffer = _io.BytesIO()
    np.savez(buffer, **arrays)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def save_split(path: str | os.PathLike, split: Split) -> None:
    _save_npz(path, {part: getattr(split, part) for part in PARTS})


def load_split(path: str | os.PathLike) -> Split:
    with np.load(path, allow_pickle=False) as data:
        missing = [part for part in PARTS if part not in data.files]
        if missing:
            raise RegressionSplitError(f"{path}: not a regression split file (no {missing}); delete it and rerun")
        return Split(*(data[part] for part in PARTS))


def save_arrays(path: str | os.PathLike, x, y, *, series: bool, fixed=None, given: dict | None = None) -> None:
    """The data set as the models read it: features ``x`` (n, p), targets ``y`` (n, d), whether it is a
    time series, the benchmark's fixed ``(train, test)`` index arrays (one row per split) if any, and
    for a user's own predictions (``source: predictions``) their predictive (``given``: family and
    parameter arrays, stored as ``given_family`` and ``given_<name>``)."""
    arrays = {"x": np.asarray(x, np.float64), "y": np.asarray(y, np.float64), "series": np.asarray(bool(series))}
    if fixed is not None:
        arrays.update(fixed_train=np.asarray(fixed[0], np.int64), fixed_test=np.asarray(fixed[1], np.int64))
    if given is not None:
        arrays["given_family"] = np.asarray(given["family"])
        arrays.update({f"given_{name}": np.asarray(value, np.float64) for name, value in given["params"].items()})
    _save_npz(path, arrays)


@dataclass
class Arrays:
    """What :func:`save_arrays` stored."""

    x: np.ndarray
    y: np.ndarray
    series: bool
    fixed: tuple[np.ndarray, np.ndarray] | None
    given: dict | None


def load_arrays(path: str | os.PathLike) -> Arrays:
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    fixed = (arrays["fixed_train"], arrays["fixed_test"]) if "fixed_train" in arrays else None
    given = None
    if "given_family" in arrays:
        params = {
            name[len("given_") :]: value
            for name, value in arrays.items()
            if name.startswith("given_") and name != "given_family"
        }
        given = {"family": str(arrays["given_family"]), "params": params}
    y = arrays["y"]
    return Arrays(arrays["x"], y[:, None] if y.ndim == 1 else y, bool(arrays["series"]), fixed, given)
