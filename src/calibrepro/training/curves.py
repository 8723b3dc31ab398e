"""Calibration over training: a network's test metrics, before and after temperature scaling, every N epochs.

``curves: {every: N}`` of a ``source: train`` entry: after every N-th epoch (and the last), the network
(in eval mode) predicts the evaluation set; on the pipeline's own split of it (split seed
``split.seeds[0]``, ``split.calibration_fraction``: :func:`calibrepro.splits.make_split`, the calibration
pool left out as the split step leaves it) the step records the test half's error, NLL, ECE and MCE
(``bins`` equal-width bins) and mean confidence minus accuracy, of the softmax (the tables' uncalibrated
column) and of temperature scaling fitted on the calibration half at that epoch (Guo et al. 2017,
sec. 4.2), and its temperature T. The metrics are the tables' (:func:`calibrepro.metrics.compute_metrics`),
the calibrators the pipeline's (:func:`calibrepro.calibrators.make_calibrator`): the last epoch's
uncalibrated ECE is the tables' ECE of the same network.

Observation only: nothing is chosen on the test half, and the evaluation runs outside the training's
random streams (torch's generator is forked), so the weights are those of the same entry without
``curves``. The numbers go into the epoch's record of the training history, which the weights cache and
the logits' metadata keep (:mod:`calibrepro.training.trainer`): cached weights give the same curves.
"""

from __future__ import annotations

# numpy arrays in the hints only: validating a configuration imports this module (the entry's checks)

import sys
from typing import Mapping

#: the calibrators a curve records (the pipeline's names), and the metrics of each on the test half
METHODS = ("uncalibrated", "temperature_scaling")
METRICS = ("accuracy", "nll", "ece", "mce", "overconfidence")
#: the variant keys curves cannot be recorded with (their logits are not one network's plain softmax)
UNSUPPORTED = ("mc_dropout", "samples", "ensemble")


class CurvesError(ValueError):
    """A ``curves`` entry cannot be recorded; the message names the key."""


def check_curves(where: str, spec: Mapping, bayesian: bool) -> None:
    """One line naming the key when ``spec['curves']`` asks for what cannot be recorded."""
    curves = spec.get("curves")
    if curves is None:
        return
    every = curves.get("every") if isinstance(curves, Mapping) else None
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise CurvesError(f"{where}.curves.every: must be a positive integer (epochs between evaluations), not {every!r}")
    epochs = spec.get("epochs", 100)
    if every > epochs:
        raise CurvesError(f"{where}.curves.every: {every} is larger than epochs ({epochs}); no epoch would be evaluated")
    variant = next((key for key in UNSUPPORTED if key in spec), None)
    if variant is not None or bayesian:
        what = f"the variant {variant!r}" if variant else f"the Bayesian network {spec.get('network')!r}"
        raise CurvesError(
            f"{where}.curves: curves are recorded for one deterministic network, not for {what}; "
            "put curves on the plain entry of the same network"
        )


def curve_settings(spec: Mapping, config: Mapping) -> dict | None:
    """``spec['curves']`` with the split and bins it is computed on (part of the weights' cache key), or None."""
    if spec.get("curves") is None:
        return None
    return {
        "every": int(spec["curves"]["every"]),
        "bins": int(config["bins"]),
        "split_seed": int(config["split"]["seeds"][0]),
        "calibration_fraction": float(config["split"]["calibration_fraction"]),
    }


def request_spec(spec: Mapping, config: Mapping) -> dict:
    """The entry a logits job gets: its ``curves`` resolved (:func:`curve_settings`), so that a changed split
    or number of bins redoes the job."""
    settings = curve_settings(spec, config)
    return dict(spec) if settings is None else {**spec, "curves": settings}


def halves(labels: np.ndarray, settings: Mapping, pool: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The (calibration, test) rows of the split step: :func:`calibrepro.splits.make_split` of the labels before
    the calibration pool's ``pool`` rows."""
    from calibrepro.splits import make_split

    drawn = labels[: len(labels) - pool]
    return make_split(drawn, settings["calibration_fraction"], settings["split_seed"], where="curves")


def epoch_metrics(logits: np.ndarray, labels: np.ndarray, calibration: np.ndarray, test: np.ndarray,
                  bins: int) -> dict[str, dict[str, float]]:
    """method -> metric -> value on the test half: :data:`METRICS` of the softmax and of temperature scaling
    fitted on the calibration half (and its ``temperature``)."""
    from calibrepro.calibrators import make_calibrator
    from calibrepro.metrics import compute_metrics

    record = {}
    for method in METHODS:
        calibrator = make_calibrator(method).fit(logits[calibration], labels[calibration])
        probs = calibrator.predict_proba(logits[test])
        record[method] = compute_metrics(probs, labels[test], METRICS, bins=bins)
        if method == "temperature_scaling":
            record[method]["temperature"] = float(calibrator.temperature_)
    return record


class Recorder:
    """The trainer's epoch hook: every ``settings['every']`` epochs and at the last, the curves of the epoch
    into its record (``record['curves']``)."""

    def __init__(self, x_eval: np.ndarray, y_eval: np.ndarray, settings: Mapping, epochs: int, device,
                 threads: int = 1, pool: int = 0):
        self.x, self.y, self.settings, self.epochs = x_eval, y_eval, settings, epochs
        self.device, self.threads = device, threads
        self.calibration, self.test = halves(y_eval, settings, pool)

    def __call__(self, network, record: dict) -> None:
        epoch = record["epoch"]
        if epoch % self.settings["every"] and epoch != self.epochs:
            return
        import time

        import torch

        from calibrepro.training.trainer import forward

        start = time.perf_counter()
        network.eval()
        try:
            with torch.random.fork_rng(devices=[]):
                logits = forward(network, self.x, self.device, self.threads)
        finally:
            network.train()
        record["curves"] = epoch_metrics(logits, self.y, self.calibration, self.test, self.settings["bins"])
        values = record["curves"]
        print(
            f"curves: epoch {epoch}: test ECE {100 * values['uncalibrated']['ece']:.2f} %, after TS "
            f"{100 * values['temperature_scaling']['ece']:.2f} % (T {values['temperature_scaling']['temperature']:.3f}); "
            f"evaluated in {time.perf_counter() - start:.2f} s",
            file=sys.stderr, flush=True,
        )
