"""Reliability-diagram data: per-bin statistics, their JSON file, and binomial intervals.

The one owner of ``results/reliability/{dataset}/{model}/seed{seed}.json``: :func:`reliability_bins`
computes the bins, :func:`write_reliability` writes the file (evaluate step), :func:`read_reliability`
reads and validates it (figures). The file holds, per method and per equal-width bin
``((m-1)/M, m/M]`` of the top-label confidence (thesis eq. (5), fig. 1(b)): the number of samples
``count`` = |B_m|, the number of correct predictions ``correct``, the mean confidence
``confidence`` = C_m and the accuracy ``accuracy`` = A_m (``null`` for an empty bin).
"""

from __future__ import annotations

import os

import numpy as np
from scipy.stats import binomtest

from calibrepro.io import read_json, write_json
from calibrepro.metrics.bins import check_inputs, equal_width_stats, top_label


class ReliabilityFileError(ValueError):
    """A reliability JSON file does not have the expected structure."""


def reliability_bins(probs, labels, bins: int = 15) -> dict:
    """Per equal-width bin: ``count``, ``correct`` (integers), ``confidence`` and ``accuracy`` (means).

    ``None`` marks the means of an empty bin; the bin weight of the diagram is
    ``count / sum(count)``. JSON-ready.
    """
    p, y = check_inputs(probs, labels)
    count, conf_sum, acc_sum = equal_width_stats(*top_label(p, y), bins)
    conf = [None if c == 0 else float(s / c) for c, s in zip(count, conf_sum, strict=True)]
    acc = [None if c == 0 else float(s / c) for c, s in zip(count, acc_sum, strict=True)]
    return {
        "count": [int(c) for c in count],
        "correct": [int(round(s)) for s in acc_sum],
        "confidence": conf,
        "accuracy": acc,
    }


def write_reliability(path, *, dataset: str, model: str, seed: int, bins: int, methods: dict) -> None:
    """Write the reliability file of one dataset/model/seed (``methods``: method -> :func:`reliability_bins`)."""
    write_json(path, {"dataset": dataset, "model": model, "seed": seed, "bins": bins, "methods": methods})


def check_reliability(data: dict, where: str = "reliability data") -> dict:
    """Check the structure of a reliability record; return it.

    ``correct`` may be absent (files written before it existed): it is then ``accuracy * count``
    rounded, which is exact because the accuracy is a count of correct predictions over ``count``.
    """
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict) or not data["methods"]:
        raise ReliabilityFileError(f"{where}: expected an object with a non-empty 'methods' object")
    bins = data.get("bins")
    if not isinstance(bins, int) or bins < 1:
        raise ReliabilityFileError(f"{where}: 'bins' must be a positive integer, got {bins!r}")
    for method, record in data["methods"].items():
        for key in ("count", "confidence", "accuracy"):
            values = record.get(key) if isinstance(record, dict) else None
            if not isinstance(values, list) or len(values) != bins:
                raise ReliabilityFileError(f"{where}: methods.{method}.{key} must be a list of {bins} values")
        if "correct" not in record:
            record["correct"] = [0 if a is None else int(round(a * n)) for a, n in zip(record["accuracy"], record["count"])]
        correct = record["correct"]
        if (not isinstance(correct, list) or len(correct) != bins
                or any(not isinstance(k, int) or not 0 <= k <= n for k, n in zip(correct, record["count"]))):
            raise ReliabilityFileError(
                f"{where}: methods.{method}.correct must be {bins} integers between 0 and the bin's count"
            )
    return data


def read_reliability(path) -> dict:
    """Read and validate a reliability file (errors name the file)."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as error:
        raise ReliabilityFileError(f"{os.fspath(path)}: cannot read reliability data ({error})") from None
    return check_reliability(data, where=os.fspath(path))


def wilson_interval(correct: int, count: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a bin's accuracy ``correct / count`` (Wilson 1927).

    Chosen over Clopper-Pearson because the exact interval is conservative (coverage above the
    nominal level, wider bars), and over the Wald interval because that one collapses to a point
    at accuracies 0 and 1 and under-covers near them, where reliability diagrams have most of
    their samples (Brown, Cai & DasGupta 2001, "Interval estimation for a binomial proportion").
    Computed by ``scipy.stats.binomtest(...).proportion_ci(method="wilson")``.
    """
    if count == 0:
        return float("nan"), float("nan")
    ci = binomtest(int(correct), int(count)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def accuracy_intervals(record: dict, level: float = 0.95) -> np.ndarray:
    """``(bins, 2)`` Wilson intervals of every bin's accuracy in one method's record (NaN if empty)."""
    return np.array([wilson_interval(k, n, level) for k, n in zip(record["correct"], record["count"])])
