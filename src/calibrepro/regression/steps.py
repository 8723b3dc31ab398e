"""The regression task's compute steps: read a data set, split it, train a regressor, gather the metrics.

``workflow/rules/regression.smk`` calls them; its evaluation (recalibration and metrics) is the
task-generic :func:`calibrepro.steps.calibration.evaluate_step` with ``task="regression"``, and the
tables, figures and reproduction report drawn from the gathered files are in :mod:`.report_steps`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from calibrepro.steps.run import step_log
from calibrepro.workers import offload


@offload
def data_step(dataset: str, spec: Mapping, files: Mapping[str, str], output, *, log=None) -> None:
    """Read a regression data set from its source (``spec``, the config entry; ``files``: its local
    files) and cache it as the models read it (:func:`calibrepro.regression.splits.save_arrays`)."""
    from calibrepro.download import parse_checksum, sha256_of
    from calibrepro.regression.data import downloads, load_dataset
    from calibrepro.regression.splits import save_arrays

    with step_log(log) as logger:
        for item in downloads(spec):
            form, reason = parse_checksum(item.checksum)
            if form == "unpinned":  # trust on first use: say which file this run read
                path = files[os.path.basename(item.path)]
                logger.warning("%s: sha256 %s (%s)", path, sha256_of(path), reason)
        data = load_dataset(dataset, spec, files)
        x = data.x if data.x is not None else np.zeros((len(data.y), 0))  # a user's predictions: no features
        save_arrays(output, x, data.y, series=data.series, fixed=data.fixed, given=data.given)
        logger.info("%s (%s): %d samples, %d features, %d target(s)%s -> %s", dataset, spec["source"], len(data.y),
                    x.shape[1], 1 if data.y.ndim == 1 else data.y.shape[1], ", a time series" if data.series else "",
                    output)


def split_step(data_path, dataset: str, index: int, spec: Mapping, output, *, log=None) -> None:
    """Draw split ``index`` of a regression data set: train, calibration and test indices."""
    from calibrepro.regression.splits import load_arrays, make_split, save_split

    with step_log(log) as logger:
        arrays = load_arrays(data_path)
        split = make_split(
            dataset, len(arrays.y), index, test_fraction=spec["test_fraction"],
            calibration_fraction=spec["calibration_fraction"], seed=spec["seed"], fixed=arrays.fixed,
            series=arrays.series, gap=arrays.y.shape[1] - 1 if arrays.series else 0,
        )
        save_split(output, split)
        logger.info("split %d of %s: %d train, %d calibration, %d test -> %s", index, dataset, len(split.train),
                    len(split.calibration), len(split.test), output)


@offload
def predict_step(data_path, split_path, output, *, model: str, options: Mapping, seed: int, log=None) -> None:
    """Train regressor ``model`` (a kind of :mod:`calibrepro.regression.models`) on the training part and
    write its predictive distributions of the calibration and test parts (``source: predictions``:
    the user's own, split the same way)."""
    from calibrepro.regression.distributions import predictive_from_arrays
    from calibrepro.regression.predictions import Predictions, part_of, rows_of, save_predictions
    from calibrepro.regression.splits import load_arrays, load_split

    with step_log(log) as logger:
        arrays, split = load_arrays(data_path), load_split(split_path)
        rows = np.concatenate([split.calibration, split.test])
        if arrays.given is not None:  # one output per sample: distribution rows are sample rows
            distribution = predictive_from_arrays(arrays.given["family"], arrays.given["params"]).take(rows)
            metadata = {"source": "predictions"}
        else:
            from calibrepro.regression.models import fit_predict

            predicted = fit_predict(model, arrays.x[split.train], arrays.y[split.train], arrays.x[rows], dict(options),
                                    seed=seed, logger=logger)
            distribution = predictive_from_arrays(predicted.family, rows_of(predicted.params))
            metadata = predicted.info
        outputs = arrays.y.shape[1]
        n_cal = len(split.calibration) * outputs
        parts = {}
        for name, part_rows, selection in (("calibration", split.calibration, np.arange(n_cal)),
                                           ("test", split.test, np.arange(n_cal, len(rows) * outputs))):
            part_distribution = distribution.take(selection)
            parts[name] = (part_of(arrays.y[part_rows], part_rows, part_distribution.params()), part_distribution)
        (test, test_distribution), (calibration, _) = parts["test"], parts["calibration"]
        save_predictions(output, Predictions(distribution.kind, test, calibration, metadata), test_distribution.mean(),
                         test_distribution.std())
        logger.info("%s: %s predictive of %d calibration and %d test rows -> %s", model, distribution.kind,
                    len(calibration.y), len(test.y), output)


def gather_step(inputs: Sequence[str | Path], output, *, log=None) -> None:
    """Concatenate the per-model regression evaluations, in config order, into ``metrics.csv``."""
    from calibrepro.io import concatenate_csv
    from calibrepro.regression.report import COLUMNS

    with step_log(log) as logger:
        rows = concatenate_csv(inputs, output, COLUMNS, what="a regression evaluation file")
        logger.info("%d rows from %d evaluation files -> %s", rows, len(inputs), output)


@offload
def conformal_step(cells: Sequence[tuple[str, str, int, str]], output, *, recalibrators: Mapping[str, Sequence[str]],
                   alphas: Sequence[float], repeats: int, seed: int, log=None) -> None:
    """Split-conformal intervals of every regressor and split (``cells``: ``(dataset, model, split, predictions
    file)``) beside each recalibrator's central interval (``recalibrators``: data set -> methods), on halves of the
    test part: ``results/<name>/regression/conformal.csv`` (:mod:`calibrepro.regression.conformal`)."""
    from calibrepro.regression.conformal import interval_rows, write_intervals
    from calibrepro.tasks import task_of

    with step_log(log) as logger:
        task, rows = task_of("regression"), []
        for dataset, model, split, path in cells:
            found, left_out = interval_rows(task, path, recalibrators[dataset], dataset=dataset, model=model,
                                            split=split, alphas=alphas, repeats=repeats, seed=seed)
            rows += found
            for alpha in left_out:
                logger.warning("%s/%s, split %d: alpha %g LEFT OUT: half the test part is too few samples for it "
                               "(every interval would be unbounded)", dataset, model, split, alpha)
        write_intervals(output, rows)
        logger.info("conformal intervals of %d regressor splits, %d rows -> %s", len(cells), len(rows), output)
