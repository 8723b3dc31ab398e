"""A regressor's predictions on one split: ``results/<name>/regression/predictions/{dataset}/{model}/split{i}.npz``.

Arrays of the test part, one row per (sample, output): for a table one output, for a time series
one per forecast hour, rows ordered by sample then output.

- ``y``: the observed target; ``index``: the sample's row in the data set; ``output``: its output
  (the forecast hour minus one; 0 for a table);
- ``family``: the predictive family (``gaussian``, ``gaussian_mixture``, ``student_t``: see
  :mod:`calibrepro.regression.distributions`) and its parameters, each stored as ``param_<name>``
  (e.g. ``param_means`` and ``param_stds``, (rows, k), for a mixture);
- ``mean`` and ``std``: the predictive's moments (for a mixture its mixture moments, for a
  Student-t its location and sqrt(df / (df - 2)) times its scale);
- the same arrays of the calibration part (which fits the recalibrators) prefixed ``calibration_``;
- ``metadata``: JSON text of what produced them (kind, options, seed, device, torch version).

Written atomically by :func:`save_predictions`; read without pickles by :func:`load_predictions`.
"""

from __future__ import annotations

import io as _io
import json
import os
from dataclasses import dataclass, field

import numpy as np

from calibrepro.io import atomic_path

_PREFIX = "param_"


class PredictionsFileError(ValueError):
    """A predictions file is missing arrays or inconsistent; the message names the file."""


@dataclass
class Part:
    """One part's rows: targets, sample indices, outputs, and the predictive's parameters."""

    y: np.ndarray
    index: np.ndarray
    output: np.ndarray
    params: dict[str, np.ndarray]


@dataclass
class Predictions:
    family: str
    test: Part
    calibration: Part
    metadata: dict = field(default_factory=dict)


def rows_of(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """(n, d[, k]) parameter arrays -> (n * d[, k]) rows ordered by sample then output."""
    return {name: value.reshape((-1,) + value.shape[2:]) for name, value in params.items()}


def part_of(y: np.ndarray, index: np.ndarray, params: dict[str, np.ndarray]) -> Part:
    """The rows of ``n`` samples with ``d`` outputs: ``y`` (n,) or (n, d); ``params`` of the n * d rows."""
    y = np.asarray(y, np.float64)
    y = y[:, None] if y.ndim == 1 else y
    n, d = y.shape
    return Part(
        y=y.reshape(-1),
        index=np.repeat(np.asarray(index, np.int64), d),
        output=np.tile(np.arange(d, dtype=np.int64), n),
        params=params,
    )


def save_predictions(path: str | os.PathLike, predictions: Predictions, mean: np.ndarray, std: np.ndarray) -> None:
    """Write ``predictions`` with the test part's predictive ``mean`` and ``std`` (atomic, byte-stable)."""
    arrays = {
        "family": np.asarray(predictions.family),
        "metadata": np.asarray(json.dumps(predictions.metadata, sort_keys=True)),
    }
    for prefix, part in (("", predictions.test), ("calibration_", predictions.calibration)):
        arrays.update({f"{prefix}y": part.y, f"{prefix}index": part.index, f"{prefix}output": part.output})
        arrays.update({f"{prefix}{_PREFIX}{name}": value for name, value in part.params.items()})
    arrays.update(mean=np.asarray(mean, np.float64), std=np.asarray(std, np.float64))
    buffer = _io.BytesIO()
    np.savez(buffer, **arrays)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def load_predictions(path: str | os.PathLike) -> Predictions:
    """Read a file written by :func:`save_predictions` (no pickles)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError) as error:
        raise PredictionsFileError(f"{path}: not a predictions file ({error}); delete it and rerun") from None
    missing = [name for name in ("family", "y", "index", "output", "calibration_y") if name not in arrays]
    if missing:
        raise PredictionsFileError(f"{path}: missing arrays {missing}; delete it and rerun the workflow")

    def part(prefix: str) -> Part:
        params = {
            name[len(prefix) + len(_PREFIX) :]: value
            for name, value in arrays.items()
            if name.startswith(prefix + _PREFIX)
        }
        return Part(arrays[f"{prefix}y"], arrays[f"{prefix}index"], arrays[f"{prefix}output"], params)

    return Predictions(str(arrays["family"]), part(""), part("calibration_"), json.loads(str(arrays["metadata"])))
