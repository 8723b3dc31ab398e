"""Calibration metrics of the thesis (section 3.2, equations (5)-(10)), vectorised, in float64: the registry.

Every metric takes ``probs`` (N, K) -- rows are probability vectors -- and integer ``labels``
(N,), and returns a Python float; ECE/MCE-type metrics are *fractions* (the report multiplies
by 100 to print percent).  Nothing here loops over samples in Python.

The metrics live by kind: accuracy, Brier and NLL in :mod:`.scores`, the binned calibration errors
in :mod:`.binned` (on the bins of :mod:`.bins`, whose docstring states the conventions that
reproduce the thesis's printed cells), smooth ECE in :mod:`.smooth`.  This module is their
registry: :data:`METRICS` says what each metric is (function, direction, resampled form, interval
method, range) to the tables, ranks and bootstrap; other tasks :func:`register` theirs; and
:func:`compute_metrics` computes several at once, sharing the work.  A new metric is a function in
the module of its kind and one :class:`Metric` line here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from calibrepro.metrics.binned import (
    classwise_ece, classwise_ece_checked, ece, ece_equal_mass, ece_l2, ece_l2_debiased, mce, mce_equal_mass,
)
from calibrepro.metrics.bins import (
    check_inputs, ece_from, ece_l2_from, equal_mass_stats, equal_width_stats, mce_from, top_label,
)
from calibrepro.metrics.scores import (
    accuracy, accuracy_checked, accuracy_terms, brier, brier_checked, brier_terms, nll, nll_checked, nll_terms,
    overconfidence, overconfidence_checked, overconfidence_terms,
)
from calibrepro.metrics.smooth import smooth_ece

__all__ = ["METRICS", "MeanOfTerms", "Metric", "compute_metrics", "higher_is_better", "register", "spec"]


@dataclass(frozen=True)
class MeanOfTerms:
    """Resampled form of a metric that is the mean of per-sample terms, ``finish(mean(terms))``.

    ``terms`` takes the metric's inputs (here ``(probs, labels)``, checked) and returns one value
    per sample; a resample's value is then ``finish(counts @ terms / N)``: one matrix product
    (:mod:`calibrepro.resampling`). ``finish`` (e.g. ``np.sqrt`` for an RMSE) defaults to identity.
    """

    terms: Callable[..., np.ndarray]
    finish: Callable[[np.ndarray], np.ndarray] | None = None


@dataclass(frozen=True)
class Metric:
    """One metric, everything the pipeline needs to know about it (report captions: report/labels.py).

    ``function(probs, labels, bins)`` is the estimate; ``higher_is_better`` is the direction that
    tables (bold), ranks and paired comparisons (the row's best) read; ``resampled`` is how the
    bootstrap computes it on a resample: a :class:`MeanOfTerms`, or the name of a custom vectorised
    form in :data:`calibrepro.resampling.FORMS`; ``interval`` the bootstrap interval method that
    ``uncertainty.interval: auto`` uses for it, chosen by the coverage study
    (``benchmarks/bench_coverage.py``, table in benchmarks/README.md); ``bounds`` the metric's range
    ``(low, high)`` (None: unbounded), which every bootstrap interval is intersected with
    (:func:`calibrepro.bootstrap.interval`; docs/decisions.md, "Intervals clipped to the metric's range").
    """

    name: str
    function: Callable[..., float]
    higher_is_better: bool = False
    resampled: MeanOfTerms | str | None = None
    interval: str = "percentile"
    bounds: tuple[float | None, float | None] = (None, None)

    def __call__(self, *args, **kwargs) -> float:
        return self.function(*args, **kwargs)


#: the range of a probability, a share or a calibration error
UNIT = (0.0, 1.0)

#: the classification metrics, in the order of the thesis's tables then the extra ones
METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in [
        Metric("accuracy", accuracy, True, MeanOfTerms(accuracy_terms), "percentile", UNIT),
        Metric("brier", brier, False, MeanOfTerms(brier_terms), "percentile", (0.0, 2.0)),
        Metric("nll", nll, False, MeanOfTerms(nll_terms), "percentile", (0.0, None)),
        Metric("ece", ece, False, "equal_width_ece", "basic", UNIT),
        Metric("mce", mce, False, "equal_width_mce", "basic", UNIT),
        Metric("ece_l2", ece_l2, False, "equal_width_l2", "basic", UNIT),
        Metric("ece_equal_mass", ece_equal_mass, False, "equal_mass_ece", "basic", UNIT),
        Metric("mce_equal_mass", mce_equal_mass, False, "equal_mass_mce", "basic", UNIT),
        Metric("classwise_ece", classwise_ece, False, "classwise", "basic", UNIT),
        Metric("ece_l2_debiased", ece_l2_debiased, False, "debiased", "basic", UNIT),
        Metric("smooth_ece", smooth_ece, False, "smooth", "basic", UNIT),
        Metric("overconfidence", overconfidence, False, MeanOfTerms(overconfidence_terms), "percentile", (-1.0, 1.0)),
    ]
}

#: metrics of other tasks (e.g. regression), added by :func:`register`; :func:`spec` reads both
_REGISTERED: dict[str, Metric] = {}
#: metrics of tasks with a namespace of their own (``register(metric, task)``), by task then name
_TASKS: dict[str, dict[str, Metric]] = {}


def register(metric: Metric, task: str | None = None) -> Metric:
    """Make another task's ``metric`` known to :func:`spec` (tables, ranks, bootstrap); returns it.

    With ``task`` (e.g. ``"regression"``) the name lives in that task's namespace, so it may repeat a
    classification metric's (regression's ``nll`` is not the classification NLL); ``spec(name, task)``
    finds it."""
    registry = _REGISTERED if task is None else _TASKS.setdefault(task, {})
    if (task is None and metric.name in METRICS) or registry.get(metric.name, metric) is not metric:
        raise ValueError(f"a metric named {metric.name!r} is already registered" + (f" for {task}" if task else ""))
    registry[metric.name] = metric
    return metric


def spec(name: str, task: str | None = None) -> Metric | None:
    """The :class:`Metric` named ``name`` (classification or registered; with ``task``, that task's), None
    when unknown."""
    if task is not None:
        return _TASKS.get(task, {}).get(name)
    return METRICS.get(name) or _REGISTERED.get(name)


def higher_is_better(name: str) -> bool:
    """The direction of metric ``name``; an unknown metric is taken as lower-is-better."""
    metric = spec(name)
    return bool(metric and metric.higher_is_better)


def compute_metrics(probs, labels, names: Sequence[str], bins: int = 15) -> dict[str, float]:
    """Compute the metrics ``names`` (keys of :data:`METRICS`) at once, sharing the work.

    The input is converted and checked once, and the top-label confidences and the bin
    statistics are computed once for all binned metrics.  Values are identical to calling
    each function of :data:`METRICS` separately.
    """
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(METRICS)}")
    p, y = check_inputs(probs, labels)
    out: dict[str, float] = {}
    top = None
    width = None
    mass = None
    plain = {"brier": brier_checked, "nll": nll_checked, "classwise_ece": classwise_ece_checked,
             "ece_l2_debiased": lambda p, y, bins: ece_l2_debiased(p, y, bins),
             "smooth_ece": lambda p, y, bins: smooth_ece(p, y, bins)}
    for name in names:
        if name in plain:
            out[name] = plain[name](p, y, bins)
            continue
        if top is None:  # confidence and correctness of the top label, shared
            top = top_label(p, y)
        if name == "accuracy":
            out[name] = accuracy_checked(p, y, bins, top)
        elif name == "overconfidence":
            out[name] = overconfidence_checked(p, y, bins, top)
        elif name in ("ece", "mce", "ece_l2"):
            if width is None:
                width = equal_width_stats(*top, bins)
            out[name] = {"ece": ece_from, "mce": mce_from, "ece_l2": ece_l2_from}[name](width)
        else:  # ece_equal_mass, mce_equal_mass
            if mass is None:
                mass = equal_mass_stats(*top, bins)
            out[name] = (ece_from if name == "ece_equal_mass" else mce_from)(mass)
    return out

