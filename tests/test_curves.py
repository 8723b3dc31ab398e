"""Calibration over training (issue 45): the curves a trained network records, their file, checks and findings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrepro.config import ConfigError, load_schema, validate_config
from calibrepro.io import load_logits
from calibrepro.report.curve_claims import (
    check_findings, nll_overfitting, rise_while_loss_falls, smoothing_pairs, temperature_rises,
)
from calibrepro.report.curves import render_tables
from calibrepro.report.curves_file import CurvesFileError, curve_rows, format_curves, read_curves
from calibrepro.steps.calibration import split_step
from calibrepro.tasks import fit_calibrator, task_of
from calibrepro.training.curves import request_spec
from calibrepro.zoo import LogitsRequest, ModelSourceError
from calibrepro.zoo.train import TrainSource, check_entry

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
RUN = {"bins": 15, "split": {"seeds": [0], "calibration_fraction": 0.5}}


def _train(tmp_path, name, spec, cache="cache"):
    """Train a digits network of ``spec`` through the source (weights cached under ``cache``): its logits file."""
    settings = {"datasets": {"digits": {"evaluation_fraction": 0.5, "seed": 0}},
                "downloads": {"dir": str(tmp_path / cache)}, "inference": {"device": "cpu"}}
    output = tmp_path / f"{name}.npz"
    request = LogitsRequest("digits", name, request_spec({"source": "train", **spec}, RUN), settings, {})
    TrainSource().cache_logits(request, output)
    return output


SPEC = {"hidden": [32], "epochs": 5, "learning_rate": 0.01}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The same network with curves every 2 epochs and without; the former trained twice (the second from the cache)."""
    tmp = tmp_path_factory.mktemp("curves")
    return {
        "curves": _train(tmp, "a", {**SPEC, "curves": {"every": 2}}),
        "again": _train(tmp, "b", {**SPEC, "curves": {"every": 2}}),
        "plain": _train(tmp, "c", SPEC),
        "tmp": tmp,
    }


def test_curves_are_recorded_every_n_epochs_and_at_the_last(trained):
    history = load_logits(trained["curves"]).metadata["training"][0]["history"]
    assert [record["epoch"] for record in history if "curves" in record] == [2, 4, 5]
    values = history[-1]["curves"]
    assert set(values) == {"uncalibrated", "temperature_scaling"}
    assert values["temperature_scaling"]["accuracy"] == values["uncalibrated"]["accuracy"]  # T > 0 keeps the argmax
    assert values["temperature_scaling"]["temperature"] > 0


def test_curves_leave_the_weights_and_logits_alone(trained):
    with_curves, without = load_logits(trained["curves"]), load_logits(trained["plain"])
    assert with_curves.metadata["training"][0]["sha256"] == without.metadata["training"][0]["sha256"]
    assert np.array_equal(with_curves.logits, without.logits)
    # a separate cache entry: the weights cached without curves are not taken for a network that needs them
    assert with_curves.metadata["training"][0]["weights"] != without.metadata["training"][0]["weights"]


def test_a_rerun_from_the_cache_gives_the_same_bytes(trained):
    first, second = (load_logits(trained[k]).metadata for k in ("curves", "again"))
    assert first["training"] == second["training"]
    rows = [format_curves(curve_rows("digits", "m", meta)) for meta in (first, second)]
    assert rows[0] == rows[1]


def test_last_epoch_ece_equals_the_tables_ece(trained):
    """The curve's uncalibrated ECE at the last epoch is the evaluate step's ECE of the same network."""
    path, split = trained["curves"], trained["tmp"] / "split.npz"
    split_step(path, 0.5, 0, split, dataset="digits")
    task = task_of("classification")
    calibration, test = task.halves(path, split, "calibration", "test")
    rows = curve_rows("digits", "m", load_logits(path).metadata)
    for method in ("uncalibrated", "temperature_scaling"):
        predicted = task.predict(fit_calibrator(task, method, calibration, bins=15), test)
        tables = task.metrics(predicted, test, ["ece", "mce", "nll"], bins=15)
        curve = {metric: value for _, _, epoch, m, metric, value in rows if epoch == 5 and m == method}
        assert {metric: curve[metric] for metric in tables} == tables


def test_the_curves_file_round_trips(trained, tmp_path):
    rows = curve_rows("digits", "m", load_logits(trained["curves"]).metadata)
    path = tmp_path / "training_curves.csv"
    path.write_text(format_curves(rows))
    assert path.read_text().splitlines()[0] == "dataset,model,epoch,method,metric,value"
    curves = read_curves(path)[("digits", "m")]
    assert sorted(curves[("training", "loss")]) == [1, 2, 3, 4, 5]
    assert sorted(curves[("temperature_scaling", "temperature")]) == [2, 4, 5]
    error = curves[("uncalibrated", "error")][5]
    assert error == pytest.approx(1 - load_logits(trained["curves"]).metadata["training"][0]["history"][-1]
                                  ["curves"]["uncalibrated"]["accuracy"])
    with pytest.raises(CurvesFileError, match="no training curves"):
        curve_rows("digits", "c", load_logits(trained["plain"]).metadata, where="c.npz")


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"epochs": 5, "curves": {"every": 6}}, r"models.digits.m.curves.every: 6 is larger than epochs \(5\)"),
        ({"hidden": [8], "dropout": 0.5, "mc_dropout": 3, "curves": {"every": 1}},
         "models.digits.m.curves: curves are recorded for one deterministic network, not for the variant 'mc_dropout'"),
        ({"network": "bayes_mlp", "curves": {"every": 1}}, "not for the Bayesian network 'bayes_mlp'"),
        ({"curves": {"every": 0}}, "models.digits.m.curves.every: must be a positive integer"),
    ],
)
def test_bad_curves_name_the_key(spec, message):
    with pytest.raises(ModelSourceError, match=message):
        check_entry("digits", "m", {"source": "train", **spec}, {})


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"source": "akamaster", "name": "resnet20", "curves": {"every": 1}},
         "models.cifar10.m.curves: curves are recorded while the pipeline trains a network; only source: train "
         "entries take them, not source: 'akamaster'"),
        ({"source": "train", "curves": {"every": 0}}, "models.cifar10.m.curves.every: 0 is less than the minimum of 1"),
        ({"source": "train", "curves": {"every": 2.5}}, "models.cifar10.m.curves.every: 2.5 is not of type 'integer'"),
        ({"source": "train", "curves": {}}, "models.cifar10.m.curves: 'every' is a required property"),
    ],
)
def test_bad_curves_in_the_config_name_the_key(spec, message):
    with pytest.raises(ConfigError) as error:
        validate_config({"models": {"cifar10": {"m": spec}}}, SCHEMA)
    lines = [line for line in str(error.value).splitlines() if line != "invalid configuration:"]
    assert len(lines) == 1 and message in lines[0]


def test_the_request_carries_the_split_and_bins():
    spec = {"source": "train", "curves": {"every": 3}}
    run = {"bins": 10, "split": {"seeds": [4, 5], "calibration_fraction": 0.3}}
    assert request_spec(spec, run)["curves"] == {"every": 3, "bins": 10, "split_seed": 4, "calibration_fraction": 0.3}
    assert request_spec({"source": "train"}, run) == {"source": "train"}


def _curve(ece, mce, loss, nll, error, temperature, scaled_ece):
    epochs = range(1, len(ece) + 1)
    series = {("uncalibrated", "ece"): ece, ("uncalibrated", "mce"): mce, ("training", "loss"): loss,
              ("uncalibrated", "nll"): nll, ("uncalibrated", "error"): error,
              ("temperature_scaling", "temperature"): temperature, ("temperature_scaling", "ece"): scaled_ece}
    return {key: dict(zip(epochs, values)) for key, values in series.items()}


OVERFITTING = _curve(ece=[0.05, 0.02, 0.08, 0.15], mce=[0.1, 0.08, 0.2, 0.3], loss=[1.5, 1.0, 0.6, 0.3],
                     nll=[1.2, 1.0, 1.1, 1.4], error=[0.4, 0.35, 0.33, 0.33], temperature=[0.9, 1.1, 1.4, 1.9],
                     scaled_ece=[0.02, 0.015, 0.02, 0.02])


def test_the_findings_hold_on_an_overfitting_curve():
    claims = check_findings("d", {"m": OVERFITTING}, [], None)
    verdicts = {claim.letter: claim.verdict for claim in claims}
    assert verdicts["a"] == verdicts["b"] == verdicts["d"] == verdicts["e"] == "holds"
    assert verdicts["c"].startswith("not checked") and verdicts["f"].startswith("not checked")
    assert "epoch 2 (lowest ECE) -> 4" in rise_while_loss_falls("d", "m", OVERFITTING, None).ours


def test_the_findings_fail_on_a_curve_that_only_improves():
    improving = _curve(ece=[0.10, 0.05, 0.02], mce=[0.2, 0.1, 0.05], loss=[1.0, 0.8, 0.6], nll=[1.0, 0.9, 0.8],
                       error=[0.3, 0.2, 0.1], temperature=[1.2, 1.1, 1.0], scaled_ece=[0.02, 0.02, 0.02])
    assert rise_while_loss_falls("d", "m", improving, None).verdict.startswith("does not hold")
    assert nll_overfitting("d", "m", improving, None).verdict.startswith("does not hold (the NLL is lowest")
    assert temperature_rises("d", "m", improving, None).verdict.startswith("does not hold")
    worse_error = {**OVERFITTING, ("uncalibrated", "error"): {1: 0.4, 2: 0.3, 3: 0.32, 4: 0.35}}
    assert "the error rose by 5.00 points" in nll_overfitting("d", "m", worse_error, None).verdict


def test_smoothing_pairs_match_the_same_recipe():
    entries = {"ce": {"source": "train", "epochs": 3}, "ls": {"source": "train", "epochs": 3, "label_smoothing": 0.1},
               "ls_long": {"source": "train", "epochs": 9, "label_smoothing": 0.1}}
    assert smoothing_pairs(entries) == [("ls", "ce")]


def test_the_table_has_first_best_and_last_epochs():
    md, tex = render_tables({("d", "m"): OVERFITTING}, 15)
    lines = [line for line in md.splitlines() if line.startswith("| d ")]
    assert [line.split("|")[3].strip() for line in lines] == ["first", "best (lowest NLL)", "last"]
    assert [line.split("|")[4].strip() for line in lines] == ["1", "2", "4"]
    assert "\\begin{tabular}" in tex and "best (lowest NLL)" in tex


def test_the_configs_with_curves_validate():
    for name in ("config.yaml", "curves.yaml"):
        config = validate_config(yaml.safe_load((ROOT / "config" / name).read_text()), SCHEMA)
        entries = [(d, m, s) for d, models in config["models"].items() for m, s in models.items() if "curves" in s]
        assert entries, name
        for dataset, model, spec in entries:
            check_entry(dataset, model, spec, config)


def test_the_confidence_figure_summarises_the_bins_as_the_metrics_do():
    from calibrepro.metrics import compute_metrics
    from calibrepro.reliability import reliability_bins
    from calibrepro.report.confidence_figure import summary

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 4)) * 3
    labels = rng.integers(0, 4, size=300)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    record = reliability_bins(probs, labels, bins=15)
    accuracy, confidence, ece = summary(record)
    expected = compute_metrics(probs, labels, ["accuracy", "ece", "overconfidence"], bins=15)
    assert accuracy == pytest.approx(expected["accuracy"]) and ece == pytest.approx(expected["ece"])
    assert confidence - accuracy == pytest.approx(expected["overconfidence"])


def test_curves_leave_dropout_training_alone(tmp_path):
    """Dropout draws from torch's generator while training; the evaluations (eval mode, forked generator) take none."""
    spec = {"hidden": [16], "dropout": 0.3, "epochs": 3}
    paths = [_train(tmp_path, "curves", {**spec, "curves": {"every": 1}}), _train(tmp_path, "plain", spec)]
    first, second = (load_logits(path) for path in paths)
    assert first.metadata["training"][0]["sha256"] == second.metadata["training"][0]["sha256"]
    assert np.array_equal(first.logits, second.logits)
