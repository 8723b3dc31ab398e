"""The regression steps (calibrepro.regression.steps, .report_steps and the shared evaluation) on a small cached
data set: split -> predict -> evaluate -> tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from calibrepro.regression import report_steps, steps
from calibrepro.regression.distributions import predictive_from_arrays
from calibrepro.regression.metrics import compute_regression_metrics
from calibrepro.regression.predictions import load_predictions
from calibrepro.regression.recalibration import make_recalibrator
from calibrepro.regression.splits import load_split, save_arrays
from calibrepro.regression.uncertainty import load_replicates, resample_weights
from calibrepro.steps.calibration import evaluate_step

SPEC = {"test_fraction": 0.2, "calibration_fraction": 0.25, "seed": 0}
METHODS = ["uncalibrated", "isotonic", "isotonic_two_sided", "std_scaling"]
METRICS = ["msce", "msce_two_sided", "miscalibration_area", "coverage_90", "coverage_95", "rmse", "nll", "crps",
           "sharpness"]


@pytest.fixture
def cached(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 0.0]) + rng.normal(size=300) * 0.5
    save_arrays(tmp_path / "data.npz", x, y, series=False)
    steps.split_step(tmp_path / "data.npz", "toy", 0, SPEC, tmp_path / "split0.npz", log=tmp_path / "split.log")
    return tmp_path


def predict(tmp_path, model, options, name=None):
    output = tmp_path / f"{name or model}.npz"
    steps.predict_step(tmp_path / "data.npz", tmp_path / "split0.npz", output, model=model, options=options, seed=0,
                       log=tmp_path / f"{model}.log")
    return output


def evaluate(predictions, metrics_output, curves_output, replicates_output, *, model, resamples, bootstrap_seed,
             log=None):
    """The regression rule's evaluation: the generic step with the regression task, recalibrators fitted in it."""
    evaluate_step(predictions, None, metrics_output, curves_output, task="regression",
                  calibrators=dict.fromkeys(METHODS), metrics=METRICS, dataset="toy", model=model, seed=0,
                  replicates_output=replicates_output, resamples=resamples, bootstrap_seed=bootstrap_seed, log=log)


def test_predict_then_evaluate_writes_the_issue_s_files(cached):
    path = predict(cached, "ensemble", {"members": 2, "epochs": 10, "hidden": 8})
    predictions, split = load_predictions(path), load_split(cached / "split0.npz")
    assert predictions.family == "gaussian_mixture" and predictions.metadata["kind"] == "ensemble"
    assert np.array_equal(predictions.test.index, split.test) and np.array_equal(predictions.calibration.index,
                                                                                  split.calibration)
    with np.load(path) as archive:
        mixture_mean = (archive["param_means"] * archive["param_weights"]).sum(axis=1)
        assert np.allclose(archive["mean"], mixture_mean) and (archive["std"] > 0).all()
    assert "ensemble member 2/2: epoch 10/10" in (cached / "ensemble.log").read_text()  # progress in the log
    evaluate(path, cached / "eval.csv", cached / "curves.json", cached / "boot.npz", model="ensemble", resamples=20,
             bootstrap_seed=0, log=cached / "eval.log")
    rows = pd.read_csv(cached / "eval.csv")
    assert list(rows.columns) == ["dataset", "model", "method", "split", "metric", "value"]
    assert list(rows.method.unique()) == METHODS and list(rows.metric.unique()) == METRICS
    values = rows.set_index(["method", "metric"]).value
    assert values[("std_scaling", "rmse")] == values[("uncalibrated", "rmse")]  # std scaling keeps the mean
    curves = json.loads((cached / "curves.json").read_text())
    assert curves["order"] == METHODS and len(curves["methods"]["isotonic"]["one_sided"]) == len(curves["levels"])
    assert curves["methods"]["std_scaling"]["recalibrator"]["method"] == "std_scaling"
    cell, replicates = load_replicates(cached / "boot.npz")
    assert cell == ("toy", "ensemble", 0) and set(replicates) == {(m, k) for m in METHODS for k in METRICS}
    # each replicate is the metric of the resampled test samples (counts from the shared bootstrap code)
    test = load_predictions(path).test
    weights = resample_weights(test.index, 20, 0, "toy", "ensemble", 0)
    recalibrated = make_recalibrator("isotonic").fit(
        predictive_from_arrays("gaussian_mixture", load_predictions(path).calibration.params),
        load_predictions(path).calibration.y).transform(predictive_from_arrays("gaussian_mixture", test.params))
    for r in (0, 7):
        rows_r = np.repeat(np.arange(test.y.size), weights[r].astype(int))
        direct = compute_regression_metrics(recalibrated.take(rows_r), test.y[rows_r], ["msce", "crps"])
        assert replicates[("isotonic", "msce")][r] == pytest.approx(direct["msce"], rel=1e-12)
        assert replicates[("isotonic", "crps")][r] == pytest.approx(direct["crps"], rel=1e-9)
    assert values[("isotonic", "msce")] != replicates[("isotonic", "msce")][0]


def test_steps_are_byte_identical_on_rerun_and_tables_follow(cached):
    first = predict(cached, "evidential", {"epochs": 5, "hidden": 8}, name="a")
    again = predict(cached, "evidential", {"epochs": 5, "hidden": 8}, name="b")
    assert first.read_bytes() == again.read_bytes()
    for name in ("a", "b"):
        evaluate(cached / f"{name}.npz", cached / f"{name}.csv", cached / f"{name}.json", cached / f"{name}_boot.npz",
                 model="evidential", resamples=50, bootstrap_seed=3)
    assert (cached / "a.csv").read_bytes() == (cached / "b.csv").read_bytes()
    assert (cached / "a.json").read_bytes() == (cached / "b.json").read_bytes()
    assert (cached / "a_boot.npz").read_bytes() == (cached / "b_boot.npz").read_bytes()
    steps.gather_step([cached / "a.csv"], cached / "metrics.csv")
    outputs = {"msce_one_sided": (cached / "t.md", cached / "t.tex")}
    report_steps.tables_step(cached / "metrics.csv", outputs, sources={"toy": "table"}, language="en")
    assert "| Data set | Model |" in (cached / "t.md").read_text()
    report_steps.figure_step([cached / "a.json"], "reliability", cached / "r.png", cached / "r.pdf",
                             title="toy, evidential", language="ru")
    report_steps.reproduction_step(cached / "metrics.csv", [cached / "a_boot.npz"], cached / "rep.md",
                                   sources={"toy": "uci_wine"}, language="en", level=0.9, interval="percentile")
    report = (cached / "rep.md").read_text()
    assert "our 90 % interval" in report and "| toy | evidential |" not in report  # no published evidential cells
    assert (cached / "r.png").stat().st_size > 0 and (cached / "r.pdf").read_bytes().startswith(b"%PDF")


def test_a_user_s_own_predictions_are_split_not_trained(tmp_path):
    rng = np.random.default_rng(1)
    y = rng.normal(size=200)
    save_arrays(tmp_path / "data.npz", np.zeros((200, 0)), y, series=False,
                given={"family": "gaussian", "params": {"mean": y + 0.1, "std": np.full(200, 0.5)}})
    steps.split_step(tmp_path / "data.npz", "own", 0, SPEC, tmp_path / "split0.npz")
    path = predict(tmp_path, "predictions", {})
    predictions = load_predictions(path)
    assert predictions.family == "gaussian" and predictions.metadata == {"source": "predictions"}
    split = load_split(tmp_path / "split0.npz")
    assert np.array_equal(predictions.test.params["mean"], y[split.test] + 0.1)
    assert np.array_equal(predictions.test.y, y[split.test])


@pytest.mark.parametrize("dropout", [0.05, 0.0])
def test_the_seed_s_mc_dropout_and_a_spread_of_0_recalibrate_with_every_row_finite_or_explained(cached, dropout):
    """noise: none (no noise term); without dropout every pass agrees: a point mass, which has no density."""
    options = {"epochs": 5, "hidden": 8, "passes": 10, "noise": "none", "dropout": dropout}
    path = predict(cached, "mc_dropout", options)
    assert load_predictions(path).family == "gaussian"
    evaluate(path, cached / "eval.csv", cached / "curves.json", cached / "boot.npz", model="mc_dropout", resamples=20,
             bootstrap_seed=0, log=cached / "eval.log")
    rows = pd.read_csv(cached / "eval.csv")
    assert np.isfinite(rows.value).all()
    log = (cached / "eval.log").read_text()
    written = set(zip(rows.method, rows.metric))
    for method in METHODS:  # every metric row is written or explained (a net of 8 units can leave rows without spread)
        line = next((line for line in log.splitlines() if line.startswith(f"toy/mc_dropout/split 0/{method}: not")), "")
        assert all((method, metric) in written or f"{metric} (" in line for metric in METRICS)
        if not dropout:
            assert line.endswith("not written, not finite: nll (the predictive has no density at the target (spread 0: "
                                 "a point mass))")
    if not dropout:
        assert set(rows.metric) == set(METRICS) - {"nll"} and set(rows.method) == set(METHODS)
