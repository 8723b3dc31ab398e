"""The seam between the pipeline's generic steps and a task: classification, regression, or a new one.

:func:`calibrepro.steps.calibration.fit_step` and :func:`~calibrepro.steps.calibration.evaluate_step`
know nothing of logits or predictive distributions; they ask a :class:`Task` to

* load the **halves** of one model's outputs on a data set (``"calibration"``, ``"test"``), each a
  :class:`Half` (``inputs``, ``targets``);
* **make** a calibrator from a method name and options, and rebuild a fitted one from its JSON;
* **fit** it on a half and **predict** the calibrated outputs of a half;
* compute the **metrics** of those outputs (the task's entries of the metric registry,
  :func:`calibrepro.metrics.spec`) and their **reliability** data;
* write a model's rows of the task's ``metrics.csv`` and its reliability file.

Everything after ``metrics.csv`` (tables, ranks, bootstrap intervals, reports) reads the metric spec
(:class:`calibrepro.metrics.Metric`: function, direction, resampled form, interval, bounds), not the task.
The registry :data:`TASKS` names the tasks' classes (``module:Class``, imported on first use, so that
reading it imports neither torch nor scipy); a step takes a task's name or a :class:`Task` instance.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Mapping, NamedTuple, Sequence

import numpy as np

from calibrepro.io import load_labels, load_logits


class SplitMismatchError(ValueError):
    """A model's labels (or classes) differ from those its data set's split was drawn from."""


class CalibratorFileError(ValueError):
    """A calibrator file that cannot be used where it was given: no calibrator, another method or another task."""


class Half(NamedTuple):
    """One half of a model's outputs on a data set: what a calibrator reads and the true targets."""

    inputs: Any
    targets: np.ndarray


class Task:
    """What a task plugs into the pipeline's fit and evaluate steps (module docstring).

    ``name`` is the task's key in :data:`TASKS` and its metrics' namespace in the metric registry
    (``None``: the classification metrics, :data:`calibrepro.metrics.METRICS`).
    """

    name: ClassVar[str] = ""

    def halves(self, data_path, split_path, *names: str) -> list[Half]:
        """The named halves of a model's outputs (``data_path``) under the split ``split_path``."""
        raise NotImplementedError

    def make_calibrator(self, method: str, **options):
        """A new, unfitted calibrator of ``method``; ``options`` it does not take are ignored."""
        raise NotImplementedError

    def calibrator_from_json(self, data: dict):
        """Rebuild a fitted calibrator from its ``to_json`` output."""
        raise NotImplementedError

    def fit(self, calibrator, half: Half):
        """Fit ``calibrator`` on ``half``; return it."""
        return calibrator.fit(half.inputs, half.targets)

    def predict(self, calibrator, half: Half):
        """The calibrated outputs of ``half`` (whatever :meth:`metrics` and :meth:`reliability` read)."""
        raise NotImplementedError

    def metrics(self, predicted, half: Half, names: Sequence[str], *, bins: int, weights=None) -> dict:
        """``{metric: value}`` of the calibrated outputs ``predicted`` of ``half``, for the metric keys ``names``.

        ``weights``: a (B, N) block of bootstrap resample counts; the values are then the (B,)
        replicates (the metrics' resampled form)."""
        raise NotImplementedError

    def reliability(self, calibrator, predicted, half: Half, *, bins: int) -> dict:
        """One method's reliability data (JSON-ready) of the calibrated outputs ``predicted``."""
        raise NotImplementedError

    def write_evaluation(self, path, rows: Sequence[tuple]) -> None:
        """Write a model's ``(dataset, model, method, seed, metric, value)`` rows of the task's ``metrics.csv``."""
        raise NotImplementedError

    def write_reliability(self, path, half: Half, methods: Mapping[str, dict], *, dataset: str, model: str,
                          seed: int, bins: int) -> None:
        """Write the reliability file of a model (``methods``: method -> :meth:`reliability`)."""
        raise NotImplementedError

    def shifted(self, data_path, calibrated_on) -> Half:
        """Every sample of a shifted data set whose calibrators were fitted on ``calibrated_on``."""
        raise ValueError(f"the {self.name} task has no shifted data sets")

    def resample_weights(self, half: Half, resamples: int, seed: int, cell: tuple) -> np.ndarray:
        """(resamples, N) bootstrap counts of ``half``'s rows for the replicates of :meth:`metrics`."""
        raise ValueError(f"the {self.name} task's bootstrap runs in a step of its own, not in the evaluation")

    def write_replicates(self, path, cell: tuple, replicates: Mapping[tuple[str, str], np.ndarray]) -> None:
        """Write one cell's ``(method, metric) -> (B,)`` replicates."""
        raise ValueError(f"the {self.name} task's bootstrap runs in a step of its own, not in the evaluation")


class ClassificationTask(Task):
    """Logits (N, K) and integer labels: the calibrators of :mod:`calibrepro.calibrators`, the metrics of
    :mod:`calibrepro.metrics`, the reliability bins of :mod:`calibrepro.reliability`."""

    name = "classification"

    def halves(self, data_path, split_path, *names: str) -> list[Half]:
        """Only the rows of the named halves are read (:func:`calibrepro.io.load_logits`); the split must have
        been drawn from the same labels."""
        from calibrepro.splits import load_pool, load_split

        labels = load_labels(data_path)
        calibration, test, split_labels = load_split(split_path)
        if not np.array_equal(labels, split_labels):
            raise SplitMismatchError(
                f"{data_path}: its labels differ from those the split {split_path} was drawn from; "
                "all models of a data set must be evaluated on the same samples in the same order"
            )
        rows = {"calibration": calibration, "test": test, "pool": load_pool(split_path)}
        halves = []
        for name in names:  # an empty half (a split without a calibration pool): its shape from one row
            part = load_logits(data_path, rows=rows[name] if len(rows[name]) else np.arange(1))
            keep = slice(None) if len(rows[name]) else slice(0)
            halves.append(Half(part.logits[keep], part.labels[keep]))
        return halves

    def shifted(self, data_path, calibrated_on) -> Half:
        """Every sample of a shifted set, whose classes must be those of ``calibrated_on``'s (count, and names
        where both archives record them: a pinned network's own logits do not)."""
        shifted, reference = load_logits(data_path), load_logits(calibrated_on, rows=np.arange(1))
        names = [archive.metadata.get("classes") for archive in (shifted, reference)]
        if shifted.logits.shape[1] != reference.logits.shape[1] or (None not in names and names[0] != names[1]):
            raise SplitMismatchError(
                f"{data_path}: its classes differ from those of {calibrated_on}; a shifted data set must "
                "have the classes of the set it is calibrated on (datasets.<key>.classes, in the same order)"
            )
        return Half(shifted.logits, shifted.labels)

    def make_calibrator(self, method: str, **options):
        from calibrepro.calibrators import make_calibrator

        return make_calibrator(method, **options)

    def calibrator_from_json(self, data: dict):
        from calibrepro.calibrators import calibrator_from_json

        return calibrator_from_json(data)

    def predict(self, calibrator, half: Half) -> np.ndarray:
        """Calibrated probabilities (N, K)."""
        return calibrator.predict_proba(half.inputs)

    def metrics(self, predicted, half: Half, names: Sequence[str], *, bins: int, weights=None) -> dict:
        if weights is not None:
            raise ValueError("the classification bootstrap runs in bootstrap_step (calibrepro.bootstrap)")
        from calibrepro.metrics import compute_metrics

        return compute_metrics(predicted, half.targets, names, bins=bins)

    def reliability(self, calibrator, predicted, half: Half, *, bins: int) -> dict:
        from calibrepro.reliability import reliability_bins  # scipy.stats: only where used

        return reliability_bins(predicted, half.targets, bins=bins)

    def write_evaluation(self, path, rows: Sequence[tuple]) -> None:
        from calibrepro.io import write_text
        from calibrepro.report.metrics_file import format_metrics

        write_text(path, format_metrics(rows, where=path))

    def write_reliability(self, path, half: Half, methods: Mapping[str, dict], *, dataset: str, model: str,
                          seed: int, bins: int) -> None:
        from calibrepro.reliability import write_reliability

        write_reliability(path, dataset=dataset, model=model, seed=seed, bins=bins, methods=dict(methods))


#: the tasks: name -> ``module:Class`` (imported on first use)
TASKS = {
    "classification": "calibrepro.tasks:ClassificationTask",
    "regression": "calibrepro.regression.task:RegressionTask",
}


def fit_calibrator(task: str | Task, method: str, half: Half, options: Mapping[str, Mapping] | None = None, *,
                   bins: int = 15, threads: int = 1):
    """A calibrator of ``method`` fitted on ``half``: the pipeline's fit (:func:`calibrepro.steps.calibration.fit_step`).

    It is made with its hyperparameters ``options[method]`` (``options``: the config's ``calibrator_options``,
    method -> hyperparameters), the run's ``bins`` and ``threads`` (each method takes those it has).
    """
    task = task_of(task)
    hyperparameters = {**(options or {}).get(method, {}), "bins": bins, "threads": threads}
    return task.fit(task.make_calibrator(method, **hyperparameters), half)


def fitted_json(calibrator, half: Half) -> dict:
    """What a calibrator file holds: the calibrator's ``to_json()`` and the number of samples it was fitted on."""
    return {**calibrator.to_json(), "calibration_samples": int(len(half.targets))}


def _from_json(task: Task, data: dict):
    """``task``'s calibrator rebuilt from ``data``, or the error that says why it is none."""
    try:
        return task.calibrator_from_json(data)
    except (ValueError, KeyError, TypeError, IndexError) as error:
        return error


def read_calibrator(path, task: str | Task, method: str | None = None, *, fix: str):
    """The fitted calibrator of ``task`` in the file ``path`` (written from :func:`fitted_json`).

    With ``method``, the file must hold that method. Raises :class:`CalibratorFileError` naming the file and
    what it holds instead (no JSON, no calibrator, another method, another task's calibrator); ``fix`` says
    what to do about it (e.g. refit it).
    """
    import json

    from calibrepro.io import read_json

    task = task_of(task)
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise CalibratorFileError(f"{path}: no such file; {fix}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CalibratorFileError(f"{path}: not a calibrator file (not JSON: {error}); {fix}") from None
    stored = data.get("method") if isinstance(data, dict) else None
    if stored is None:
        raise CalibratorFileError(f"{path}: not a calibrator file (it has no 'method'); {fix}")
    if method is not None and stored != method:
        raise CalibratorFileError(f"{path}: holds a {stored!r} calibrator where {method!r} was expected; {fix}")
    calibrator = _from_json(task, data)
    if not isinstance(calibrator, Exception):
        return calibrator
    others = [name for name in TASKS
              if name != task.name and not isinstance(_from_json(task_of(name), data), Exception)]
    holds = f"a {stored!r} calibrator " + (f"of the {others[0]} task" if others else "that cannot be read")
    raise CalibratorFileError(
        f"{path}: holds {holds}, not a {task.name} calibrator ({type(calibrator).__name__}: {calibrator}); {fix}"
    )


def task_of(task: str | Task) -> Task:
    """The :class:`Task` named ``task`` in :data:`TASKS` (an instance is returned as it is)."""
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    module, name = TASKS[task].split(":")
    return getattr(importlib.import_module(module), name)()
