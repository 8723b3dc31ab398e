"""Calibration outside the pipeline, on files: what ``calibrepro fit``, ``apply`` and ``evaluate`` run.

A model's outputs are read from one ``.npz`` (:func:`read_inputs`), whose arrays say which task it is:

* a **logits archive** (:mod:`calibrepro.io`: ``logits`` (N, K), ``labels`` (N,)): classification. All of
  it, or the ``calibration`` or ``test`` half of a split file (``results/<name>/splits/{dataset}/seed{seed}.npz``,
  drawn from the same labels);
* a **predictions file** of the pipeline (:mod:`calibrepro.regression.predictions`): regression, its
  ``calibration`` or ``test`` part; or a user's predictions (``y`` with ``mean`` + ``std``, or ``samples``: the
  format of the config's ``source: predictions``), all of it;
* for :func:`evaluate_file` also a **probabilities file** (``probabilities`` (N, K), ``labels`` (N,)), e.g. one
  that :func:`apply_calibrator` wrote.

The work is the pipeline's own: :func:`calibrepro.tasks.fit_calibrator` and :func:`calibrepro.tasks.fitted_json`
as in the fit step, :meth:`calibrepro.tasks.Task.predict` and :meth:`~calibrepro.tasks.Task.metrics` as in the
evaluate step, the bootstrap of :mod:`calibrepro.bootstrap`; so a calibrator fitted here on a half is the
pipeline's, and its probabilities are the ones the pipeline evaluates, bit for bit.

What :func:`apply_calibrator` writes (an uncompressed ``.npz``, atomically; ``metadata``: JSON of the method, the
calibrator file and the input file, split and half):

* classification: ``probabilities`` (N, K) float64, the calibrated probabilities (``predict_proba``); ``rows``
  (N,) their rows in the input file; ``labels`` (N,) where the input has them;
* regression: the recalibrated predictive distribution of every row as numbers: ``mean`` and ``std`` (N,),
  ``quantiles`` (N, L) at the levels ``levels`` (L,) (the central 50, 80, 90 and 95 % intervals and the median by
  default); ``y`` (N,) and ``pit`` (N,), the recalibrated CDF at ``y`` (uniform on [0, 1] when calibrated);
  ``index`` and ``output``, each row's sample and output (forecast hour minus one; 0 for a table).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from calibrepro import bootstrap
from calibrepro.io import atomic_path, load_logits, read_json, write_csv, write_json
from calibrepro.tasks import (
    TASKS, CalibratorFileError, Half, Task, fit_calibrator, fitted_json, read_calibrator, task_of,
)

#: the halves of a split (of a pipeline predictions file: its parts)
HALVES = ("calibration", "test")
#: what the commands take when neither an option nor ``--config`` sets it: the pipeline's defaults
#: (workflow/schemas/config.schema.yaml; tests/test_commands.py checks that they agree)
DEFAULTS = {
    "bins": 15,
    "metrics": ["accuracy", "brier", "ece", "mce", "nll", "classwise_ece", "ece_equal_mass", "mce_equal_mass",
                "ece_l2"],
    "bootstrap": 1000,
    "level": 0.95,
    "interval": "auto",
    "seed": 0,
}
#: the quantile levels :func:`apply_calibrator` writes for regression: the median and central 50, 80, 90, 95 %
LEVELS = (0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975)
#: where a checkout keeps the configuration's schema (``--config`` validates with it, as the workflow does)
SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"

_LOGITS = "a logits archive (arrays 'logits' (N, K) and 'labels' (N,))"
_PREDICTIONS = "regression predictions ('y' with 'mean' + 'std' or 'samples', or a pipeline predictions file)"
_PROBABILITIES = "probabilities ('probabilities' (N, K) and 'labels' (N,), as calibrepro apply writes them)"


class InputFileError(ValueError):
    """A file the commands cannot read as a model's outputs, or options that do not fit it."""


@dataclass
class Inputs:
    """A model's outputs read from a file: the task, the rows (a :class:`~calibrepro.tasks.Half`) and where from."""

    task: Task
    half: Any
    rows: np.ndarray
    source: dict = field(default_factory=dict)


def _members(path) -> set[str]:
    """The array names of the ``.npz`` ``path`` (message naming the file when it is none)."""
    if not Path(path).is_file():
        raise InputFileError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return set(archive.files)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise InputFileError(f"{path}: not a NumPy .npz archive ({error}); save arrays with numpy.savez") from None


def file_kind(path) -> str:
    """``logits``, ``probabilities``, ``split predictions`` (a pipeline predictions file) or ``predictions``."""
    names = _members(path)
    if "logits" in names:
        return "logits"
    if "probabilities" in names:
        return "probabilities"
    if {"family", "calibration_y"} <= names:
        return "split predictions"
    if "y" in names and ({"mean", "std"} <= names or "samples" in names):
        return "predictions"
    raise InputFileError(
        f"{path}: holds arrays {', '.join(sorted(names)) or 'none'}: neither {_LOGITS} nor {_PREDICTIONS}"
    )


def read_inputs(path, *, split=None, half: str | None = None, labels: bool = True) -> Inputs:
    """A model's outputs in ``path`` (module docstring): all of them, or ``half`` (of ``split`` for logits).

    ``labels=False`` also reads logits without labels (new data to calibrate).
    """
    kind = file_kind(path)
    if half is not None and half not in HALVES:
        raise InputFileError(f"--half {half}: must be one of {', '.join(HALVES)}")
    source = {"file": str(path), "split": None if split is None else str(split), "half": half}
    if kind == "logits":
        task = task_of("classification")
        if split is None and half is None:
            archive = load_logits(path, labels=labels)
            return Inputs(task, Half(archive.logits, archive.labels), np.arange(len(archive.logits)), source)
        if split is None or half is None:
            raise InputFileError(
                "--split and --half go together: the split file of the model's data set "
                "(results/<name>/splits/<dataset>/seed<seed>.npz) and the half to use (calibration or test)"
            )
        from calibrepro.splits import load_split

        [part] = task.halves(path, split, half)
        rows = load_split(split)[HALVES.index(half)]
        return Inputs(task, part, rows, source)
    if kind == "split predictions":
        if split is not None or half is None:
            raise InputFileError(
                f"{path}: a pipeline predictions file holds the calibration and the test part of its split; "
                "choose one with --half calibration (what the pipeline fits on) or --half test, without --split"
            )
        task = task_of("regression")
        [part] = task.halves(path, None, half)
        return Inputs(task, part, np.arange(len(part.targets)), source)
    if kind == "predictions":
        if split is not None or half is not None:
            raise InputFileError(f"{path}: a predictions file of your own is used whole; drop --split and --half")
        from calibrepro.regression.data import load_dataset
        from calibrepro.regression.distributions import predictive_from_arrays
        from calibrepro.regression.task import RegressionHalf

        data = load_dataset(Path(path).stem, {"source": "predictions", "path": str(path)})
        n = len(data.y)
        predictive = predictive_from_arrays(data.given["family"], data.given["params"])
        return Inputs(task_of("regression"), RegressionHalf(predictive, data.y, np.arange(n), np.zeros(n, np.int64)),
                      np.arange(n), source)
    raise InputFileError(f"{path}: holds calibrated probabilities; give the logits ({_LOGITS}) or {_PREDICTIONS}")


def check_options(task: Task, method: str, options: Mapping[str, Any]) -> None:
    """Every key of ``options`` must be a hyperparameter of ``method`` (``bins`` and ``threads`` have options of
    their own): a mistyped key is an error here, where :func:`~calibrepro.tasks.fit_calibrator` would ignore it."""
    try:
        accepted = [name for name in type(task.make_calibrator(method))._get_param_names()
                    if name not in ("bins", "threads")]
    except ValueError as error:
        others = [name for name in TASKS if name != task.name and _knows(name, method)]
        if others:
            raise InputFileError(
                f"{method!r} is a {others[0]} method: it fits on "
                + (_LOGITS if others[0] == "classification" else _PREDICTIONS) + ", not on this file"
            ) from None
        raise InputFileError(str(error)) from None
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = f"its options: {', '.join(accepted)}" if accepted else "it has none"
        raise InputFileError(f"{method} has no option {', '.join(map(repr, unknown))}; {takes} (config/README.md, "
                             "calibrator_options; --bins and --threads are options of their own)")


def _knows(task: str, method: str) -> bool:
    try:
        task_of(task).make_calibrator(method)
    except ValueError:
        return False
    return True


def fit_file(path, method: str, output, *, split=None, half: str | None = None,
             options: Mapping[str, Any] | None = None, bins: int = DEFAULTS["bins"], threads: int = 1,
             announce: Callable[[Inputs], None] | None = None):
    """Fit ``method`` (with its hyperparameters ``options``) on the model outputs in ``path`` (or their ``half``)
    and write its calibrator file ``output`` as the pipeline's fit step writes it; return (calibrator, inputs).

    ``announce`` is called with the inputs once they are read and checked, before the fit (progress)."""
    inputs = read_inputs(path, split=split, half=half)
    check_options(inputs.task, method, options or {})
    if announce is not None:
        announce(inputs)
    calibrator = fit_calibrator(inputs.task, method, inputs.half, {method: dict(options or {})}, bins=bins,
                                threads=threads)
    write_json(output, fitted_json(calibrator, inputs.half))
    return calibrator, inputs


def load_for(calibrator_path, inputs: Inputs, method: str | None = None):
    """The fitted calibrator in ``calibrator_path`` (which must hold ``method`` when given), checked against the
    model outputs it is to be applied to."""
    where = inputs.source["file"]
    fix = f"give a file of calibrepro fit, or fit one on these outputs: calibrepro fit --method <method> {where} ..."
    calibrator = read_calibrator(calibrator_path, inputs.task, method, fix=fix)
    fitted_on = getattr(calibrator, "n_classes_", None)
    classes = inputs.half.inputs.shape[1] if inputs.task.name == "classification" else None
    if fitted_on is not None and fitted_on != classes:
        raise CalibratorFileError(
            f"{calibrator_path}: fitted on logits of {fitted_on} classes, but {where} has {classes}; a calibrator "
            f"applies to the model (and classes) it was fitted on: fit one with calibrepro fit --method "
            f"{calibrator.method} {where} -o <calibrator>.json"
        )
    return calibrator


def apply_calibrator(calibrator_path, path, output, *, split=None, half: str | None = None,
                     levels: Sequence[float] = LEVELS, method: str | None = None) -> dict[str, np.ndarray]:
    """Write the calibrated outputs of the model outputs in ``path`` (or their ``half``) under the fitted calibrator
    in ``calibrator_path`` (of ``method``, when given) to ``output`` (module docstring); return the arrays written."""
    inputs = read_inputs(path, split=split, half=half, labels=False)
    calibrator = load_for(calibrator_path, inputs, method)
    if inputs.task.name == "classification":
        arrays = {"probabilities": inputs.task.predict(calibrator, inputs.half), "rows": inputs.rows}
        if inputs.half.targets is not None:
            arrays["labels"] = inputs.half.targets
    else:
        arrays = _predictive_arrays(calibrator.transform(inputs.half.inputs), inputs.half, levels)
    metadata = {"method": calibrator.method, "calibrator": str(calibrator_path), **inputs.source}
    arrays["metadata"] = np.asarray(json.dumps(metadata, sort_keys=True))
    with atomic_path(output) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)
    return arrays


def _predictive_arrays(predictive, half, levels: Sequence[float]) -> dict[str, np.ndarray]:
    """The numbers of a recalibrated predictive that :func:`apply_calibrator` writes for regression."""
    levels = np.asarray(levels, dtype=np.float64)
    if levels.ndim != 1 or not levels.size or not ((levels > 0) & (levels < 1)).all():
        raise InputFileError(f"--levels: quantile levels must lie strictly between 0 and 1, got {levels.tolist()}")
    n = len(half.targets)
    mean, var = predictive.mean_var() if hasattr(predictive, "mean_var") else (predictive.mean(), predictive.var())
    return {
        "mean": np.asarray(mean, np.float64), "std": np.sqrt(var), "levels": levels,
        "quantiles": predictive.ppf(np.broadcast_to(levels, (n, levels.size))),
        "y": half.targets, "pit": predictive.cdf(half.targets), "index": half.index, "output": half.output,
    }


def _probabilities(path) -> tuple[np.ndarray, np.ndarray, str]:
    """``probabilities`` and ``labels`` of a probabilities file, checked, and its method (``-`` when unknown)."""
    with np.load(path, allow_pickle=False) as archive:
        if "labels" not in archive.files:
            raise InputFileError(
                f"{path}: has no 'labels'; metrics need the true class of every row ({_PROBABILITIES})")
        probs, labels = archive["probabilities"], archive["labels"]
        stored = json.loads(str(archive["metadata"])) if "metadata" in archive.files else {}
    from calibrepro.metrics.bins import check_inputs

    try:
        probs, labels = check_inputs(probs, labels)
    except ValueError as error:
        raise InputFileError(f"{path}: {error}") from None
    sums = probs.sum(axis=1)
    bad = np.flatnonzero((probs < 0).any(axis=1) | (np.abs(sums - 1) > 1e-6))
    if bad.size:
        raise InputFileError(
            f"{path}: 'probabilities' row {bad[0]} is no probability vector (sum {sums[bad[0]]:.6g}); "
            "give logits in an archive's 'logits' array instead"
        )
    return probs, labels, stored.get("method", "-") if isinstance(stored, dict) else "-"


@dataclass
class Evaluation:
    """What :func:`evaluate_file` found: the task, the calibration method, the number of rows and, per metric,
    the estimate and its bootstrap interval; ``undefined``: the metrics left out, each with why (a regression
    metric that is not finite, as the pipeline leaves it out of ``metrics.csv``)."""

    task: str
    method: str
    rows: int
    values: dict[str, bootstrap.MetricInterval]
    undefined: dict[str, str] = field(default_factory=dict)


def evaluate_file(path, *, calibrator=None, split=None, half: str | None = None, metrics: Sequence[str] | None = None,
                  bins: int = DEFAULTS["bins"], resamples: int = DEFAULTS["bootstrap"],
                  level: float = DEFAULTS["level"], interval: str = DEFAULTS["interval"],
                  seed: int = DEFAULTS["seed"]) -> Evaluation:
    """The metrics of the (calibrated) model outputs in ``path`` with their bootstrap intervals.

    ``path``: probabilities, or logits / regression predictions (or their ``half``), calibrated by the fitted
    ``calibrator`` file when given, else as they are (the ``uncalibrated`` method). ``metrics``: metric names of
    the task (default: the pipeline's default classification metrics; every regression metric). The intervals
    are those of :mod:`calibrepro.bootstrap` on ``resamples`` resamples seeded with ``seed``; ``resamples=0``:
    estimates only (interval ``none``, bounds NaN).
    """
    if file_kind(path) == "probabilities":
        if calibrator is not None or split is not None or half is not None:
            raise InputFileError(f"{path}: holds calibrated probabilities already; drop --calibrator, --split, --half")
        probs, labels, method = _probabilities(path)
        values = _classification(probs, labels, list(metrics or DEFAULTS["metrics"]), bins, resamples, level,
                                 interval, seed)
        return Evaluation("classification", method, len(labels), values)
    inputs = read_inputs(path, split=split, half=half)
    task, rows = inputs.task, len(inputs.half.targets)
    fitted = (load_for(calibrator, inputs) if calibrator is not None
              else fit_calibrator(task, "uncalibrated", inputs.half, bins=bins))
    predicted = task.predict(fitted, inputs.half)
    if task.name == "classification":
        values = _classification(predicted, inputs.half.targets, list(metrics or DEFAULTS["metrics"]), bins,
                                 resamples, level, interval, seed)
        return Evaluation(task.name, fitted.method, rows, values)
    from calibrepro.regression.metrics import REGRESSION_METRICS

    if resamples and interval == "bca":
        raise InputFileError("--interval bca: the regression metrics have no jackknife; use auto, percentile, basic "
                             "or debiased")
    estimates = task.metrics(predicted, inputs.half, list(metrics or REGRESSION_METRICS), bins=bins)
    undefined = {name: REGRESSION_METRICS[name].undefined for name, value in estimates.items()
                 if not np.isfinite(value)}
    estimates = {name: value for name, value in estimates.items() if name not in undefined}
    if not resamples:
        return Evaluation(task.name, fitted.method, rows, _estimates_only(estimates), undefined)
    weights = task.resample_weights(inputs.half, resamples, seed, ())
    replicates = task.metrics(predicted, inputs.half, list(estimates), bins=bins, weights=weights)
    values = bootstrap.intervals_from(estimates, replicates, level, interval, task="regression")
    for name, value in list(values.items()):
        if not (np.isfinite(value.low) and np.isfinite(value.high)):
            undefined[name] = f"estimate {value.estimate:.6g}, but not finite on some resamples: no interval"
            del values[name]
    return Evaluation(task.name, fitted.method, rows, values, undefined)


def _classification(probs, labels, names, bins, resamples, level, interval, seed) -> dict:
    if not resamples:
        from calibrepro.metrics import compute_metrics

        return _estimates_only(compute_metrics(probs, labels, names, bins=bins))
    return bootstrap.metric_intervals(probs, labels, names, bins=bins, resamples=resamples, level=level,
                                      interval=interval, seed=seed)


def _estimates_only(estimates: Mapping[str, float]) -> dict:
    nan = float("nan")
    return {name: bootstrap.MetricInterval(float(value), nan, nan, float(value), "none", nan, 0)
            for name, value in estimates.items()}


#: the columns of :func:`write_evaluation`'s CSV: those of the pipeline's ``intervals.csv`` after the cell's keys
EVALUATION_COLUMNS = ("metric", "estimate", "centre", "low", "high", "interval", "level", "B")


def write_evaluation(path, values: Mapping[str, bootstrap.MetricInterval]) -> None:
    """Write ``{metric: MetricInterval}`` as a tidy CSV (:data:`EVALUATION_COLUMNS`; floats by ``repr``; the
    bounds and level of an estimate without interval are empty cells: the CSV writers refuse NaN)."""
    def row(name, v):
        if v.interval == "none":
            return name, v.estimate, v.centre, "", "", v.interval, "", v.resamples
        return name, v.estimate, v.centre, v.low, v.high, v.interval, v.level, v.resamples

    write_csv(path, EVALUATION_COLUMNS, [row(name, v) for name, v in values.items()])


def read_config(path) -> dict:
    """A pipeline configuration file, validated and completed with its defaults as the workflow does."""
    import yaml

    from calibrepro.config import load_schema, validate_config

    if not SCHEMA.is_file():
        raise InputFileError(
            f"--config needs the configuration schema of a calibrepro checkout ({SCHEMA} is missing): install "
            "calibrepro from its checkout (pip install -e .), or give the options one by one"
        )
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(f"--config {path}: no such file") from None
    except yaml.YAMLError as error:
        raise InputFileError(f"--config {path}: not YAML ({error})") from None
    if not isinstance(config, dict):
        raise InputFileError(f"--config {path}: not a configuration (a YAML mapping of keys, config/README.md)")
    return validate_config(config, load_schema(SCHEMA))



def _probabilities_of(inputs: Inputs, calibrator) -> np.ndarray:
    """The probabilities of logits ``inputs`` under a fitted ``calibrator`` (None: the model's own softmax, the
    pipeline's ``uncalibrated`` probabilities)."""
    if inputs.task.name != "classification":
        raise InputFileError(f"{inputs.source['file']}: conformal prediction sets take {_LOGITS}")
    if calibrator is None:
        from calibrepro.calibrators.base import softmax

        return softmax(inputs.half.inputs, "float32").astype(np.float64)
    return inputs.task.predict(calibrator, inputs.half)


def conformal_fit_file(path, output, *, score: str, alpha: float, calibrator=None, split=None,
                       half: str | None = None, **options):
    """Fit a conformal classifier (:mod:`calibrepro.conformal`) on the logits in ``path`` (or their ``half``),
    calibrated first by the fitted ``calibrator`` file when given, and write it to ``output``; return
    ``(classifier, inputs, calibrator or None)``.

    The file holds the classifier's ``to_json()``, ``calibration_samples`` and ``calibrator``: the calibrator's
    own JSON (or null), which :func:`conformal_predict_file` applies before the sets, as here."""
    from calibrepro.conformal import make_conformal

    inputs = read_inputs(path, split=split, half=half)
    fitted = load_for(calibrator, inputs) if calibrator is not None else None
    probabilities = _probabilities_of(inputs, fitted)
    where = _where_of(inputs)
    conformal = make_conformal(score, alpha, **options).fit(probabilities, inputs.half.targets, where=where)
    write_json(output, {**fitted_json(conformal, inputs.half),
                        "calibrator": None if fitted is None else fitted.to_json()})
    return conformal, inputs, fitted


def _where_of(inputs: Inputs) -> str:
    source = inputs.source
    return f"the {source['half']} half of {source['file']}" if source["half"] else source["file"]


def conformal_predict_file(conformal_path, path, output, *, split=None, half: str | None = None) -> dict:
    """Write the prediction sets of the logits in ``path`` (or their ``half``) under the conformal classifier file
    ``conformal_path`` (its calibrator applied first): ``sets`` (N, K) bool, ``rows``, ``labels`` where the input
    has them, ``metadata`` (JSON); return the arrays written."""
    from calibrepro.conformal import conformal_from_json

    inputs = read_inputs(path, split=split, half=half, labels=False)
    fix = "give the file that calibrepro conformal fit wrote"
    try:
        data = read_json(conformal_path)
        conformal = conformal_from_json(data)
        stored = data.get("calibrator")
        fitted = None if stored is None else task_of("classification").calibrator_from_json(stored)
    except FileNotFoundError:
        raise InputFileError(f"{conformal_path}: no such file; {fix}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputFileError(f"{conformal_path}: not a conformal classifier file ({error}); {fix}") from None
    sets = conformal.predict(_probabilities_of(inputs, fitted), where=_where_of(inputs))
    arrays = {"sets": sets, "rows": inputs.rows}
    if inputs.half.targets is not None:
        arrays["labels"] = inputs.half.targets
    metadata = {"score": conformal.score, "alpha": conformal.alpha, "conformal": str(conformal_path),
                "calibrator": None if fitted is None else fitted.method, **inputs.source}
    arrays["metadata"] = np.asarray(json.dumps(metadata, sort_keys=True))
    with atomic_path(output) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, **arrays)
    return arrays
