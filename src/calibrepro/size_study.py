"""Calibration-set-size study: every calibrator fitted on nested subsets of the calibration half.

For each configured size n and subset seed r, the calibrators are fitted on the first n samples
of a seeded, stratified ordering of the calibration half (so the subsets of one seed are nested:
the 200 samples contain the 100) and evaluated with every metric on the *same* test half as the
main tables. Repeating over seeds gives the spread of a metric that comes from which samples
happened to be in the calibration set.

A calibration pool (held-out training images of a network trained here, ``calibration_pool``;
:mod:`calibrepro.splits`) extends the calibration half: the ordering puts the whole calibration half
first, then the pool in its own stratified order, so sizes up to the half are drawn from the half
alone (as without a pool) and larger sizes add the pool's first samples.

Stratified ordering: the samples of each class are shuffled, the j-th of the ``n_c`` samples of
class c gets the key ``(j + 0.5) / n_c``, and the samples are sorted by key (ties in random
order). Every prefix then holds each class in proportion to its share of the calibration half,
within one sample, which is what a stratified subsample of that size would hold.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from calibrepro.io import concatenate_csv, write_csv
from calibrepro.metrics import compute_metrics

COLUMNS = ("dataset", "model", "method", "size", "seed", "metric", "value")

#: evaluation samples and classes of the data sets of the built-in sources (for config validation)
KNOWN_DATASETS = {"cifar10": (10_000, 10), "cifar100": (10_000, 100), "imagenet": (50_000, 1000)}
#: the built-in data set whose training images give a calibration pool (training.data.load); an image folder's do too
POOLED = "cifar10"
DIGITS_SAMPLES = 1797


class SizeStudyError(ValueError):
    """A size of the study does not fit the calibration half; the message names the config key."""


def write_size_study(path, rows) -> None:
    """One model's size-study rows (:data:`COLUMNS`), floats by ``repr``."""
    write_csv(path, COLUMNS, rows)


def concatenate_size_study(inputs, output) -> int:
    """Gather the per-model size-study files into ``output``; the number of rows."""
    return concatenate_csv(inputs, output, COLUMNS, SizeStudyError, "a size-study file")


def stratified_order(labels: np.ndarray, seed: int) -> np.ndarray:
    """Indices of ``labels`` in a seeded order whose every prefix is stratified (module docstring)."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    keys = np.empty(labels.shape[0])
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        members = members[rng.permutation(members.size)]
        keys[members] = (np.arange(members.size) + 0.5) / members.size
    return np.lexsort((rng.random(labels.shape[0]), keys))


def check_sizes(sizes: Sequence[int], calibration_samples: int, classes: int, where: str, more: str = "") -> None:
    """Every size must fit the calibration half and give each class at least 2 samples on average; ``more``:
    another fix of a size too large, appended to the message."""
    for size in sizes:
        if size > calibration_samples:
            raise SizeStudyError(
                f"size_study.sizes: {size} is larger than the calibration half of {where} "
                f"({calibration_samples} samples); use sizes up to {calibration_samples}{more}"
            )
        if size < 2 * classes:
            raise SizeStudyError(
                f"size_study.sizes: {size} gives fewer than 2 samples per class to the stratified subsets of "
                f"{where} ({classes} classes); use sizes of at least {2 * classes}"
            )


def calibration_half(samples: int, calibration_fraction: float) -> int:
    """Size of the calibration half of ``samples`` (scikit-learn's ``train_test_split`` rounding)."""
    return samples - math.ceil(round(1.0 - calibration_fraction, 12) * samples)


def _dataset_shape(dataset: str, models: dict, config: dict) -> tuple[int, int] | None:
    """(evaluation samples, classes) of a data set from the config alone, or None when unknown."""
    for spec in models.values():
        if spec.get("source") == "logits":
            path = Path(spec["path"])
            if not path.is_file():
                return None
            with np.load(path, allow_pickle=False) as archive:
                labels = archive["labels"]
                return labels.shape[0], int(archive["logits"].shape[1])
    settings = (config.get("datasets") or {}).get(dataset) or {}
    if settings.get("source") == "imagefolder":
        return _folder_shape(dataset, models, settings)
    if dataset in KNOWN_DATASETS:
        return KNOWN_DATASETS[dataset]
    if dataset == "digits":
        fraction = config.get("datasets", {}).get("digits", {}).get("evaluation_fraction", 0.5)
        return math.ceil(fraction * DIGITS_SAMPLES), 10
    return None


def _folder_shape(dataset: str, models: dict, settings: dict) -> tuple[int, int] | None:
    """(evaluation samples, classes) of an image folder, its files counted, no image read; None when its layout is
    wrong (the models' sources say so before any job)."""
    from calibrepro.datasets import DatasetError
    from calibrepro.evaluation_sets import folder_samples
    from calibrepro.training.folders import DEFAULT_EVALUATION_FRACTION, folder_files

    try:
        if not any(spec.get("source") == "train" for spec in models.values()):  # pretrained networks: every image
            paths, _, names = folder_samples(dataset, settings)
            return len(paths), len(names)
        _, layout = folder_files(dataset, settings)
    except DatasetError:
        return None
    if len(layout) == 2:  # train/ and test/: the logits are test/'s, the classes train/'s
        return sum(map(len, layout[1].values())), len(layout[0])
    [files] = layout  # a seeded, stratified evaluation_fraction of the images (scikit-learn's rounding)
    fraction = settings.get("evaluation_fraction", DEFAULT_EVALUATION_FRACTION)
    return math.ceil(fraction * sum(map(len, files.values()))), len(files)


def check_size_study_config(config: dict) -> None:
    """Stop at validation when a configured size cannot be drawn from some data set's calibration half."""
    study = config.get("size_study", {})
    if not study.get("enabled", False):
        return
    unknown = [method for method in study.get("methods") or [] if method not in config["calibrators"]]
    if unknown:
        raise SizeStudyError(
            f"size_study.methods: {', '.join(map(repr, unknown))} not among the configured calibrators "
            f"({', '.join(config['calibrators'])}); the study fits a subset of the table's columns"
        )
    fraction = config["split"]["calibration_fraction"]
    for dataset, models in config["models"].items():
        shape = _dataset_shape(dataset, models, config)
        if shape is not None:
            settings = (config.get("datasets") or {}).get(dataset) or {}
            pool = settings.get("calibration_pool", 0)
            samples = calibration_half(shape[0], fraction) + pool
            trained = any(spec.get("source") == "train" for spec in models.values())
            poolable = trained and (dataset == POOLED or settings.get("source") == "imagefolder")
            more = f", or hold more training images out with datasets.{dataset}.calibration_pool" if poolable else ""
            where = f"data set {dataset}" + (" with its calibration_pool" if pool else "")
            check_sizes(study["sizes"], samples, shape[1], where, more)


def run_size_study(
    calibration: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    *,
    methods: Sequence[str],
    sizes: Sequence[int],
    seeds: Sequence[int],
    metrics: Sequence[str],
    bins: int,
    options: dict | None = None,
    progress=None,
    pool: tuple[np.ndarray, np.ndarray] | None = None,
) -> Iterator[tuple[str, int, int, str, float]]:
    """Yield ``(method, size, seed, metric, value)`` for every fit of the study (sizes ascending).

    ``options``: method -> hyperparameters (the config's ``calibrator_options``); ``pool``: the
    calibration pool's logits and labels, drawn from after the whole calibration half (module docstring).
    """
    from calibrepro.calibrators import make_calibrator  # torch: not needed to validate a config

    (cal_logits, cal_labels), (test_logits, test_labels) = calibration, test
    half = len(cal_labels)
    if pool is not None and len(pool[1]):
        cal_logits, cal_labels = np.concatenate([cal_logits, pool[0]]), np.concatenate([cal_labels, pool[1]])
    classes = int(max(cal_labels.max(), test_labels.max())) + 1
    check_sizes(sizes, len(cal_labels), classes, "this model" + (" with its calibration pool" if len(cal_labels) > half else ""))
    for seed in seeds:
        order = stratified_order(cal_labels[:half], seed)
        if len(cal_labels) > half:
            order = np.concatenate([order, half + stratified_order(cal_labels[half:], seed)])
        for size in sorted(sizes):
            subset = order[:size]
            for method in methods:
                hyperparameters = {**(options or {}).get(method, {}), "bins": bins}
                calibrator = make_calibrator(method, **hyperparameters).fit(cal_logits[subset], cal_labels[subset])
                values = compute_metrics(calibrator.predict_proba(test_logits), test_labels, metrics, bins=bins)
                for metric in metrics:
                    yield method, size, seed, metric, values[metric]
                if progress is not None:
                    progress.update(1)
