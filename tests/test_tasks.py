"""The task seam (calibrepro.tasks): a third, toy task runs through the generic fit and evaluate steps, and the
classification steps go through their task."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from calibrepro import tasks
from calibrepro.io import tidy_csv, write_json, write_text
from calibrepro.steps.calibration import evaluate_step, fit_step, split_step
from workflow_helpers import synthetic_logits


class Shift:
    """The toy task's calibrator: adds the mean residual of the calibration half (none for "none")."""

    def __init__(self, method: str):
        self.method = method

    def fit(self, x, y):
        self.shift_ = 0.0 if self.method == "none" else float(np.mean(y - x))
        return self

    def to_json(self) -> dict:
        return {"method": self.method, "shift": self.shift_}


class ShiftTask(tasks.Task):
    """Real scores predicting real targets: nothing of classification or regression in it."""

    name = "toy"

    def halves(self, data_path, split_path, *names):
        with np.load(data_path) as data, np.load(split_path) as split:
            return [tasks.Half(data["x"][split[name]], data["y"][split[name]]) for name in names]

    def make_calibrator(self, method, **options):
        return Shift(method)

    def calibrator_from_json(self, data):
        calibrator = Shift(data["method"])
        calibrator.shift_ = data["shift"]
        return calibrator

    def predict(self, calibrator, half):
        return half.inputs + calibrator.shift_

    def metrics(self, predicted, half, names, *, bins, weights=None):
        error = predicted - half.targets
        values = {"bias": error.mean(), "mse": (error**2).mean()}
        if weights is not None:
            values = {"bias": weights @ error / weights.sum(axis=1), "mse": weights @ error**2 / weights.sum(axis=1)}
        return {name: values[name] for name in names}

    def resample_weights(self, half, resamples, seed, cell):
        rng = np.random.default_rng(seed)
        return rng.multinomial(len(half.targets), np.full(len(half.targets), 1 / len(half.targets)), size=resamples)

    def reliability(self, calibrator, predicted, half, *, bins):
        return {"mean_prediction": float(predicted.mean()), "mean_target": float(half.targets.mean())}

    def write_evaluation(self, path, rows):
        write_text(path, tidy_csv(("dataset", "model", "method", "seed", "metric", "value"), rows))

    def write_reliability(self, path, half, methods, *, dataset, model, seed, bins):
        write_json(path, {"dataset": dataset, "methods": dict(methods)})

    def write_replicates(self, path, cell, replicates):
        np.savez(path, **{f"{method}|{metric}": values for (method, metric), values in replicates.items()})


@pytest.fixture
def toy(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    np.savez(tmp_path / "data.npz", x=x, y=x + 2.0 + rng.normal(scale=0.1, size=400))
    np.savez(tmp_path / "split.npz", calibration=np.arange(0, 400, 2), test=np.arange(1, 400, 2))
    return tmp_path


def test_a_new_task_plugs_into_the_fit_and_evaluate_steps(toy):
    outputs = {"none": toy / "none.json", "shift": toy / "shift.json"}
    fit_step(toy / "data.npz", toy / "split.npz", outputs, task=ShiftTask(), log=toy / "fit.log")
    stored = json.loads(outputs["shift"].read_text())
    assert stored["shift"] == pytest.approx(2.0, abs=0.05) and stored["calibration_samples"] == 200
    # a stored calibrator and one fitted in the step give the same rows
    for name, calibrators in (("stored", outputs), ("here", {"none": None, "shift": None})):
        evaluate_step(toy / "data.npz", toy / "split.npz", toy / f"{name}.csv", toy / f"{name}.json",
                      task=ShiftTask(), calibrators=calibrators, metrics=["bias", "mse"], dataset="d",
                      model="m", seed=0, replicates_output=toy / f"{name}.npz", resamples=30,
                      log=toy / f"{name}.log")
    assert (toy / "stored.csv").read_bytes() == (toy / "here.csv").read_bytes()
    rows = pd.read_csv(toy / "here.csv").set_index(["method", "metric"]).value
    assert rows[("none", "bias")] == pytest.approx(-2.0, abs=0.05) and abs(rows[("shift", "bias")]) < 0.05
    with np.load(toy / "data.npz") as data:
        test_mean = data["y"][1::2].mean()
    assert json.loads((toy / "here.json").read_text())["methods"]["shift"]["mean_target"] == pytest.approx(test_mean)
    with np.load(toy / "here.npz") as replicates:
        assert replicates["shift|mse"].shape == (30,) and (replicates["none|mse"] > replicates["shift|mse"]).all()
    assert "200 test rows, 30 bootstrap resamples" in (toy / "here.log").read_text()


def test_classification_steps_go_through_their_task(tmp_path, monkeypatch):
    synthetic_logits(tmp_path / "a.npz", n=200, k=3)
    split_step(tmp_path / "a.npz", 0.5, 0, tmp_path / "split.npz", dataset="d")
    calls = []
    for name in ("halves", "fit", "predict", "metrics", "reliability"):
        original = getattr(tasks.ClassificationTask, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(tasks.ClassificationTask, name, spy)
    fit_step(tmp_path / "a.npz", tmp_path / "split.npz", {"temperature_scaling": tmp_path / "ts.json"},
             task="classification")
    assert calls == ["halves", "fit"]
    evaluate_step(tmp_path / "a.npz", tmp_path / "split.npz", tmp_path / "eval.csv", tmp_path / "rel.json",
                  task="classification", calibrators={"temperature_scaling": tmp_path / "ts.json"},
                  metrics=["ece"], dataset="d", model="m", seed=0)
    assert calls[2:] == ["halves", "predict", "metrics", "reliability"]


def test_an_unknown_task_and_a_classification_replicate_file_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown task 'ranking'; known: classification, regression"):
        tasks.task_of("ranking")
    synthetic_logits(tmp_path / "a.npz", n=100, k=3)
    split_step(tmp_path / "a.npz", 0.5, 0, tmp_path / "split.npz", dataset="d")
    with pytest.raises(ValueError, match="classification task's bootstrap runs in a step of its own"):
        evaluate_step(tmp_path / "a.npz", tmp_path / "split.npz", tmp_path / "e.csv", tmp_path / "r.json",
                      calibrators={"uncalibrated": None}, metrics=["ece"], dataset="d", model="m", seed=0,
                      replicates_output=tmp_path / "b.npz", resamples=10)
    assert not (tmp_path / "e.csv").exists()


def test_the_regression_evaluation_goes_through_its_task(tmp_path, monkeypatch):
    """Gaussian predictions twice as wide as the truth: std scaling, fitted in the step, finds s = 1/2."""
    from calibrepro.regression.predictions import Part, Predictions, save_predictions
    from calibrepro.regression.task import RegressionTask

    rng = np.random.default_rng(1)
    mean = rng.normal(size=4000)
    y = mean + rng.normal(size=4000)

    def part(rows):
        return Part(y[rows], rows, np.zeros(rows.size, np.int64), {"mean": mean[rows], "std": np.full(rows.size, 2.0)})

    test, calibration = part(np.arange(2000)), part(np.arange(2000, 4000))
    save_predictions(tmp_path / "p.npz", Predictions("gaussian", test, calibration), test.params["mean"],
                     test.params["std"])
    calls = []
    original = RegressionTask.predict
    monkeypatch.setattr(RegressionTask, "predict",
                        lambda self, calibrator, half: calls.append(calibrator.method) or original(self, calibrator, half))
    evaluate_step(tmp_path / "p.npz", None, tmp_path / "e.csv", tmp_path / "c.json", task="regression",
                  calibrators={"uncalibrated": None, "std_scaling": None}, metrics=["coverage_90", "rmse"],
                  dataset="d", model="m", seed=3, replicates_output=tmp_path / "b.npz", resamples=0)
    assert calls == ["uncalibrated", "std_scaling"]
    curves = json.loads((tmp_path / "c.json").read_text())
    assert curves["methods"]["std_scaling"]["recalibrator"]["params"]["scale"] == pytest.approx(0.5, abs=0.02)
    rows = pd.read_csv(tmp_path / "e.csv").set_index(["method", "metric"]).value
    assert rows[("uncalibrated", "coverage_90")] > 0.99  # Phi(1.645 * 2) - Phi(-1.645 * 2) = 0.999
    assert rows[("std_scaling", "coverage_90")] == pytest.approx(0.9, abs=0.02)  # 3 binomial standard errors
    assert set(pd.read_csv(tmp_path / "e.csv").split) == {3}
