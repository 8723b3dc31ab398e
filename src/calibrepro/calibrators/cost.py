"""What a fit job of a full-matrix method (Dir-L2, Dir-ODIR, MS-ODIR) is expected to cost, before it runs.

The workflow reads this when it plans a run: :func:`fit_minutes` is the runtime a fit job asks its
scheduler for, :func:`fit_plan_summary` the line that announces a run's fit jobs and their expected
CPU time. Both rest on the cost model of :func:`calibrepro.calibrators.dirichlet.estimated_seconds`
for the method's expected fits on the calibration half of logits of the model's shape
(:func:`logits_shape`). Imported where the Snakefile is parsed: the heavy libraries are imported by
the functions that use them.
"""

from __future__ import annotations

import math
import os
from typing import Mapping, Sequence

import numpy as np


def logits_shape(logits_path, dataset: str) -> tuple[int, int] | None:
    """(samples, classes) of a logits archive, else of the data set's published test set, else None."""
    from calibrepro.datasets import CIFAR, IMAGENET_NUM_CLASSES, IMAGENET_NUM_VAL
    from calibrepro.io import archive_members

    if os.path.exists(logits_path):
        members = archive_members(logits_path)
        if "logits" in members:
            return tuple(members["logits"][0])
        with np.load(logits_path, allow_pickle=False) as archive:  # compressed: no header offset
            return archive["logits"].shape
    if dataset in CIFAR:
        return CIFAR[dataset].num_test, CIFAR[dataset].num_classes
    return (IMAGENET_NUM_VAL, IMAGENET_NUM_CLASSES) if dataset == "imagenet" else None


def expected_fit_seconds(
    shape, method: str, options: Mapping, *, calibration_fraction: float, worst_case: bool = False
) -> float | None:
    """CPU seconds the cost model expects for one fit job (``None`` when the shape is unknown).

    :func:`calibrepro.calibrators.dirichlet.estimated_seconds` for the method's expected fits
    (cross-validation along its path with the early stop, and the refit; ``worst_case``: every grid
    point and the search's whole extension) on the calibration half of logits of ``shape``
    (:func:`logits_shape`).
    """
    from calibrepro.calibrators import make_calibrator
    from calibrepro.calibrators.dirichlet import estimated_seconds

    if shape is None:
        return None
    n, k = shape
    calibrator = make_calibrator(method, **options)
    fits = calibrator.planned_fits() if worst_case else calibrator.expected_fits()
    return estimated_seconds(round(n * calibration_fraction), k, fits)


def fit_minutes(shape, method: str, options: Mapping, *, calibration_fraction: float, threads: int) -> int:
    """Wall-clock minutes to ask for one fit job of a full-matrix method (a Slurm job's runtime).

    Three times :func:`expected_fit_seconds` with every grid point and the search's whole extension
    fitted (a job that runs out of time loses its work), spread over ``threads`` (at most one per CV fold), plus 5 minutes to
    start; 120 minutes when the shape is unknown.
    """
    seconds = expected_fit_seconds(
        shape, method, options, calibration_fraction=calibration_fraction, worst_case=True
    )
    if seconds is None:
        return 120
    folds = int(options.get("folds", 5))
    return 5 + math.ceil(3 * seconds / max(1, min(threads, folds)) / 60)


def fit_plan_summary(jobs: Sequence[tuple], *, calibration_fraction: float, threads: int) -> str:
    """One line: the full-matrix fit jobs of a run and the CPU time the cost model expects for them.

    ``jobs`` holds ``(shape, method, options)`` per job (shape ``None`` when unknown); jobs whose
    estimate exceeds their ``cpu_flop_budget`` are counted apart: on the CPU they fail at once.
    """
    from calibrepro.calibrators import make_calibrator
    from calibrepro.calibrators.dirichlet import _CPU_FLOPS

    seconds, refused, unknown = 0.0, 0, 0
    for shape, method, options in jobs:
        estimate = expected_fit_seconds(shape, method, options, calibration_fraction=calibration_fraction)
        if estimate is None:
            unknown += 1
        elif estimate * _CPU_FLOPS > make_calibrator(method, **options).cpu_flop_budget:
            refused += 1
        else:
            seconds += estimate
    if unknown == len(jobs):
        expected = "time unknown until their logits exist"
    elif seconds < 60:
        expected = "expected under a CPU-minute"
    else:
        hours = seconds / 3600
        expected = "expected about " + (
            f"{hours:.1f} CPU-hours" if hours >= 1 else f"{seconds / 60:.0f} CPU-minutes"
        )
    return (
        f"calibrepro: {len(jobs)} full-matrix fit jobs (Dir-L2, Dir-ODIR, MS-ODIR): {expected}"
        + f" ({threads} threads per job; cost model calibrepro.calibrators.dirichlet.estimated_flops, with the"
        " path's early stop after the 3 strongest lambdas)"
        + (f"; {refused} above their cpu_flop_budget: they fail on the CPU (GPU needed)" if refused else "")
        + (f"; {unknown} on logits of unknown shape not counted" if unknown else "")
    )
