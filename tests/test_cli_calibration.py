"""`calibrepro fit`, `apply` and `evaluate` against the pipeline's own steps, on outputs the project never saw."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import yaml

from calibrepro import cli, commands
from calibrepro.bootstrap import bootstrap_seed, metric_intervals
from calibrepro.calibrators import CALIBRATORS
from calibrepro.regression.predictions import Predictions, part_of, save_predictions
from calibrepro.report.metrics_file import read_metrics
from calibrepro.report.uncertainty_files import read_intervals
from calibrepro.steps.calibration import evaluate_step, fit_step, load_calibrator, split_step
from calibrepro.steps.uncertainty import bootstrap_step
from calibrepro.tasks import task_of
from test_cli import run

#: small grids for the cross-validated methods, given to the pipeline and to `calibrepro fit` alike
OPTIONS = {"lambdas": [0.01, 1.0], "mus": [0.01, 1.0], "folds": 3, "seed": 1}
CV_METHODS = ("dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir")


def new_logits(path, n=360, k=5, seed=11):
    """Logits of a model nobody trained: a skewed class prior, an overconfident scale, some label noise."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(k, size=n, p=np.linspace(1, 2, k) / np.linspace(1, 2, k).sum())
    logits = rng.standard_normal((n, k)) * 2.5
    logits[np.arange(n), labels] += rng.gamma(2.0, 1.5, size=n)
    flipped = rng.random(n) < 0.1
    labels[flipped] = rng.integers(0, k, flipped.sum())
    np.savez(path, logits=logits.astype(np.float32), labels=labels.astype(np.int64))
    return logits.astype(np.float32), labels


def options(method) -> dict:
    """The method's hyperparameters of the test (Dir-L2 has no mu)."""
    if method not in CV_METHODS:
        return {}
    return {key: value for key, value in OPTIONS.items() if key != "mus" or method != "dirichlet_l2"}


def options_of(method) -> list[str]:
    return [f"--option={key}={json.dumps(value)}" for key, value in options(method).items()]


@pytest.fixture(scope="module")
def piped(tmp_path_factory):
    """The pipeline's split, fit and evaluate steps on new logits, every method: its files."""
    root = tmp_path_factory.mktemp("piped")
    logits, split = root / "new.npz", root / "split.npz"
    new_logits(logits)
    split_step(logits, 0.5, 3, split, dataset="d")
    fitted = {method: root / f"pipeline_{method}.json" for method in CALIBRATORS}
    fit_step(logits, split, fitted, bins=15, options={method: options(method) for method in CV_METHODS})
    evaluate_step(logits, split, root / "eval.csv", root / "rel.json", calibrators=fitted,
                  metrics=commands.DEFAULTS["metrics"], dataset="d", model="m", seed=3, bins=15)
    return root, logits, split, fitted


@pytest.mark.parametrize("method", list(CALIBRATORS))
def test_fit_then_apply_give_the_pipelines_calibrator_and_probabilities_to_the_bit(piped, method, capsys):
    root, logits, split, fitted = piped
    mine, probs = root / f"cli_{method}.json", root / f"cli_{method}.npz"
    half = ["--split", str(split)]
    assert cli.main(["fit", "--method", method, str(logits), *half, "--half", "calibration", *options_of(method),
                     "-o", str(mine)]) == 0
    assert mine.read_bytes() == fitted[method].read_bytes()  # the same calibrator file, byte for byte
    assert cli.main(["apply", str(mine), str(logits), *half, "--half", "test", "-o", str(probs)]) == 0
    task = task_of("classification")
    [test] = task.halves(logits, split, "test")
    expected = task.predict(load_calibrator(fitted[method], method), test)  # what evaluate_step scores
    with np.load(probs, allow_pickle=False) as written:
        assert written["probabilities"].dtype == np.float64
        assert written["probabilities"].tobytes() == expected.tobytes()
        assert np.array_equal(written["labels"], test.targets)
        assert np.array_equal(written["rows"], np.load(split)["test"])
        assert json.loads(str(written["metadata"]))["method"] == method
    # evaluated, the probabilities give the pipeline's metrics.csv values exactly
    evaluation = commands.evaluate_file(probs, resamples=0)
    pipeline_values = read_metrics(root / "eval.csv").values
    for metric, value in evaluation.values.items():
        assert value.estimate == pipeline_values[("d", "m", method, metric)][3]
    commands.write_evaluation(root / f"{method}.csv", evaluation.values)  # no interval: empty cells, never NaN
    assert (root / f"{method}.csv").read_text().splitlines()[1].endswith(",,,none,,0")
    output = capsys.readouterr().out
    assert f"{method}: fitted on 180 samples (the calibration half of {logits})" in output
    assert f"calibrated probabilities of 180 rows of the test half of {logits} ({method}" in output


def test_evaluate_gives_the_pipelines_bootstrap_interval_of_a_cell(piped, tmp_path):
    """metric_intervals with the cell's seed is the bootstrap step's arithmetic: the same intervals.csv numbers."""
    root, logits, split, fitted = piped
    methods = {m: fitted[m] for m in ("uncalibrated", "temperature_scaling")}
    metrics = ["accuracy", "ece", "nll", "classwise_ece"]
    bootstrap_step(logits, split, root / "eval.csv", tmp_path / "intervals.csv", tmp_path / "comparisons.csv",
                   calibrators=methods, metrics=metrics, bins=15, dataset="d", model="m", seed=3,
                   resamples=200, level=0.9, bootstrap_seed=5, interval="bca")
    cells = read_intervals(tmp_path / "intervals.csv").cells
    task = task_of("classification")
    [test] = task.halves(logits, split, "test")
    for method, path in methods.items():
        probs = task.predict(load_calibrator(path, method), test)
        mine = metric_intervals(probs, test.targets, metrics, resamples=200, level=0.9, interval="bca",
                                seed=bootstrap_seed(5, "d", "m", 3))
        for metric in metrics:
            value = mine[metric]
            assert (value.estimate, value.low, value.high, value.centre) == cells[("d", "m", method, metric)][3]
            assert value.interval == "bca" and value.resamples == 200


def test_apply_takes_new_logits_without_labels_and_evaluate_reads_its_file(tmp_path, capsys):
    train, new = tmp_path / "train.npz", tmp_path / "new.npz"
    new_logits(train, seed=1)
    logits, labels = new_logits(tmp_path / "labelled.npz", n=100, seed=2)
    np.savez(new, logits=logits)
    assert cli.main(["fit", "--method", "vector_scaling_bias", str(train), "-o", str(tmp_path / "vs.json")]) == 0
    assert cli.main(["apply", str(tmp_path / "vs.json"), str(new), "-o", str(tmp_path / "p.npz")]) == 0
    with np.load(tmp_path / "p.npz") as written:
        assert "labels" not in written.files and written["probabilities"].shape == (100, 5)
    # a probabilities file without labels cannot be scored; the message says why
    assert cli.main(["evaluate", str(tmp_path / "p.npz")]) == 1
    assert "has no 'labels'; metrics need the true class of every row" in capsys.readouterr().err
    csv = tmp_path / "e.csv"
    assert cli.main(["evaluate", str(tmp_path / "labelled.npz"), "--calibrator", str(tmp_path / "vs.json"),
                     "--metrics", "ece,nll", "--resamples", "50", "--level", "0.8", "-o", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "vector_scaling_bias, 100 rows; 80% bootstrap intervals, B = 50, seed 0" in out
    lines = csv.read_text().splitlines()
    assert lines[0] == ",".join(commands.EVALUATION_COLUMNS)
    assert [line.split(",")[0] for line in lines[1:]] == ["ece", "nll"]
    assert lines[1].endswith(",basic,0.8,50") and lines[2].endswith(",percentile,0.8,50")


def predictions_file(path, n=400, seed=0, scale=1.6):
    """A regressor's predictions on its split's calibration and test parts: Gaussians whose std is off by ``scale``."""
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=n)
    std = rng.uniform(0.5, 1.5, size=n)
    y = mean + scale * std * rng.standard_normal(n)
    half = n // 2
    parts = [part_of(y[rows], rows, {"mean": mean[rows], "std": std[rows]})
             for rows in (np.arange(half), np.arange(half, n))]
    save_predictions(path, Predictions("gaussian", parts[1], parts[0]), mean[half:], std[half:])


def test_regression_fit_apply_evaluate_are_the_pipelines(tmp_path, capsys):
    predictions = tmp_path / "split0.npz"
    predictions_file(predictions)
    recalibrators = ["uncalibrated", "isotonic", "isotonic_two_sided", "std_scaling"]
    evaluate_step(predictions, None, tmp_path / "eval.csv", tmp_path / "curves.json", task="regression",
                  calibrators=dict.fromkeys(recalibrators), metrics=["msce", "nll", "coverage_95"],
                  dataset="d", model="m", seed=0)
    recorded = json.loads((tmp_path / "curves.json").read_text())["methods"]
    values = {(method, metric): value for (_, _, method, metric), seeds in
              read_metrics_regression(tmp_path / "eval.csv").items() for value in seeds.values()}
    for method in recalibrators:
        fitted = tmp_path / f"{method}.json"
        assert cli.main(["fit", "--method", method, str(predictions), "--half", "calibration", "-o", str(fitted)]) == 0
        data = json.loads(fitted.read_text())
        assert data.pop("calibration_samples") == 200
        assert data == recorded[method]["recalibrator"]  # the pipeline's fit
        result = commands.evaluate_file(predictions, calibrator=fitted, half="test",
                                        metrics=["msce", "nll", "coverage_95"], resamples=0)
        for metric, value in result.values.items():
            assert value.estimate == values[(method, metric)]
    assert cli.main(["apply", str(tmp_path / "std_scaling.json"), str(predictions), "--half", "test",
                     "--levels", "0.05,0.5,0.95", "-o", str(tmp_path / "q.npz")]) == 0
    with np.load(tmp_path / "q.npz") as written:
        scale = json.loads((tmp_path / "std_scaling.json").read_text())["params"]["scale"]
        with np.load(predictions) as source:
            assert np.allclose(written["std"], scale * source["std"], rtol=1e-12)
            assert np.array_equal(written["mean"], source["mean"]) and np.array_equal(written["y"], source["y"])
        assert written["quantiles"].shape == (200, 3) and np.array_equal(written["levels"], [0.05, 0.5, 0.95])
        assert np.allclose(written["quantiles"][:, 1], written["mean"])
        assert 0.85 < np.mean((written["y"] > written["quantiles"][:, 0]) & (written["y"] < written["quantiles"][:, 2]))
    capsys.readouterr()
    assert cli.main(["evaluate", str(predictions), "--half", "test", "--calibrator", str(tmp_path / "isotonic.json"),
                     "--metrics", "msce,crps", "--resamples", "100"]) == 0
    out = capsys.readouterr().out
    assert "the test half of" in out and "isotonic, 200 rows; 95% bootstrap intervals, B = 100, seed 0" in out
    assert "msce" in out and "basic" in out and "crps" in out and "percentile" in out


def read_metrics_regression(path):
    """(dataset, model, method, metric) -> {split: value} of a regression evaluation file."""
    from calibrepro.regression.report import read_metrics as read

    return read(path)


def test_a_users_own_predictions_file_is_fitted_whole(tmp_path, capsys):
    rng = np.random.default_rng(4)
    mean, std = rng.normal(size=300), rng.uniform(0.5, 1.0, size=300)
    np.savez(tmp_path / "mine.npz", y=mean + 0.5 * std * rng.standard_normal(300), mean=mean, std=std)
    assert cli.main(["fit", "--method", "std_scaling", str(tmp_path / "mine.npz"), "-o", str(tmp_path / "s.json")]) == 0
    assert "std_scaling: fitted on 300 samples" in capsys.readouterr().out
    assert 0.4 < json.loads((tmp_path / "s.json").read_text())["params"]["scale"] < 0.6


def test_a_metric_that_is_not_finite_is_left_out_with_its_reason(tmp_path, capsys):
    """Issue 31's degenerate predictive through the command line: rows of spread 0 (point masses) have no
    density, so NLL is infinite; evaluate says so and writes the other metrics, as the pipeline does."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=200)
    std = np.full(200, 0.1)
    std[:10] = 0.0
    np.savez(tmp_path / "point.npz", y=y, mean=y + rng.normal(size=200), std=std)
    found = commands.evaluate_file(tmp_path / "point.npz", resamples=50)
    assert found.undefined == {"nll": "the predictive has no density at the target (spread 0: a point mass)"}
    assert "nll" not in found.values and len(found.values) == 8
    assert all(np.isfinite([v.estimate, v.low, v.high]).all() for v in found.values.values())
    out = tmp_path / "e.csv"
    assert cli.main(["evaluate", str(tmp_path / "point.npz"), "--resamples", "50", "-o", str(out)]) == 0
    assert re.search(r"^  nll +left out: the predictive has no density", capsys.readouterr().out, re.M)
    assert [line.split(",")[0] for line in out.read_text().splitlines()[1:]] == list(found.values)


@pytest.mark.parametrize("arguments, message", [
    (["fit", "--method", "std_scaling", "{logits}", "-o", "{out}"],
     "'std_scaling' is a regression method: it fits on regression predictions"),
    (["fit", "--method", "platt", "{logits}", "-o", "{out}"],
     "unknown calibration method 'platt'; known: uncalibrated"),
    (["fit", "--method", "dirichlet_odir", "{logits}", "--option", "lambda=0.1", "-o", "{out}"],
     "dirichlet_odir has no option 'lambda'; its options: cpu_flop_budget, device, early_stop, folds, lambdas"),
    (["fit", "--method", "temperature_scaling", "{logits}", "--option", "folds=3", "-o", "{out}"],
     "temperature_scaling has no option 'folds'; it has none"),
    (["fit", "--method", "temperature_scaling", "{logits}", "--half", "test", "-o", "{out}"],
     "--split and --half go together"),
    (["fit", "--method", "temperature_scaling", "{logits}", "--split", "{other_split}", "--half", "calibration",
      "-o", "{out}"], "its labels differ from those the split"),
    (["apply", "{regression_json}", "{logits}", "-o", "{out}"],
     "holds a 'std_scaling' calibrator of the regression task, not a classification calibrator"),
    (["apply", "{k3_json}", "{logits}", "-o", "{out}"],
     "fitted on logits of 3 classes, but {logits} has 5; a calibrator applies to the model"),
    (["apply", "{k3_json}", "{logits}", "--method", "vector_scaling", "-o", "{out}"],
     "{k3_json}: holds a 'temperature_scaling' calibrator where 'vector_scaling' was expected"),
    (["apply", "{not_json}", "{logits}", "-o", "{out}"], "not a calibrator file (not JSON"),
    (["apply", "{split}", "{logits}", "-o", "{out}"], "not a calibrator file (not JSON"),
    (["apply", "{k3_json}", "{split}", "-o", "{out}"], "neither a logits archive"),
    (["evaluate", "{logits}", "--metrics", "ece,sharpness"], "unknown metric(s) ['sharpness']"),
    (["fit", "--method", "temperature_scaling", "{logits}", "--config", "{bad_config}", "-o", "{out}"],
     "calibrator_options"),
])
def test_errors_name_what_is_wrong_and_leave_no_output(wrong, arguments, message, capsys):
    words = [word.format(**wrong) for word in arguments]
    assert cli.main(words) == 1
    error = capsys.readouterr().err
    assert error.startswith("calibrepro: error: ") and message.format(**wrong) in error
    assert not wrong["out"].parent.exists()


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    """Files that do not go together: logits of 5 classes and their split, another model's split, a regression
    calibrator, a calibrator of 3 classes, a file that is no JSON, a configuration with a wrong key."""
    root = tmp_path_factory.mktemp("wrong")
    files = {"logits": root / "new.npz", "out": root / "out" / "x.json", "split": root / "split.npz",
             "other_split": root / "other_split.npz", "regression_json": root / "std.json",
             "k3_json": root / "k3.json", "not_json": root / "bad.json", "bad_config": root / "c.yaml"}
    new_logits(files["logits"])
    new_logits(root / "k3.npz", k=3)
    new_logits(root / "other.npz", seed=5)
    split_step(root / "other.npz", 0.5, 0, files["other_split"], dataset="d")
    split_step(files["logits"], 0.5, 0, files["split"], dataset="d")
    predictions_file(root / "p.npz")
    commands.fit_file(root / "p.npz", "std_scaling", files["regression_json"], half="calibration")
    commands.fit_file(root / "k3.npz", "temperature_scaling", files["k3_json"])
    files["not_json"].write_text("{not json")
    files["bad_config"].write_text(yaml.safe_dump({"models": {"d": {"m": {"source": "logits", "path": "x.npz"}}},
                                                   "calibrator_options": {"temperature_scaling": {"x": 1}}}))
    return files


def test_an_error_in_a_new_process_is_one_line_without_traceback(wrong):
    result = run("apply", str(wrong["k3_json"]), str(wrong["logits"]), "-o", str(wrong["out"]))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"calibrepro: error: {wrong['k3_json']}: fitted on logits of 3 classes, but {wrong['logits']} has 5; a "
        "calibrator applies to the model (and classes) it was fitted on: fit one with calibrepro fit --method "
        f"temperature_scaling {wrong['logits']} -o <calibrator>.json"
    )
    assert not wrong["out"].parent.exists()


def test_help_of_each_command_shows_its_examples(capsys):
    for command in ("fit", "apply", "evaluate"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = capsys.readouterr().out
        assert "examples:\n  calibrepro " + command in text
        assert text.count(f"\n  calibrepro {command} ") >= 2


def test_config_options_and_defaults_are_the_pipelines(tmp_path):
    """--config gives the pipeline's calibrator_options; the commands' defaults are the schema's."""
    schema = yaml.safe_load(commands.SCHEMA.read_text())["properties"]
    assert commands.DEFAULTS["bins"] == schema["bins"]["default"]
    assert commands.DEFAULTS["metrics"] == schema["metrics"]["default"]
    for key in ("bootstrap", "level", "interval", "seed"):
        assert commands.DEFAULTS[key] == schema["uncertainty"]["properties"][key]["default"]
    logits = tmp_path / "new.npz"
    new_logits(logits)
    config = tmp_path / "my.yaml"
    config.write_text(yaml.safe_dump({"models": {"d": {"m": {"source": "logits", "path": str(logits)}}},
                                      "calibrator_options": {"dirichlet_l2": {"lambdas": [0.5], "folds": 2}}}))
    assert cli.main(["fit", "--method", "dirichlet_l2", str(logits), "--config", str(config),
                     "-o", str(tmp_path / "d.json")]) == 0
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["hyperparameters"]["lambdas"] == [0.5] and data["params"]["lambda"] == 0.5


def test_the_installed_command_runs_fit_apply_evaluate(tmp_path):
    """The same through `python -m calibrepro.cli` in a new process (what a user's shell runs)."""
    logits = tmp_path / "new.npz"
    new_logits(logits)
    fitted = run("fit", "--method", "temperature_scaling", str(logits), "-o", str(tmp_path / "ts.json"))
    assert fitted.returncode == 0, fitted.stderr
    assert "temperature" in fitted.stdout
    applied = run("apply", str(tmp_path / "ts.json"), str(logits), "-o", str(tmp_path / "p.npz"))
    assert applied.returncode == 0, applied.stderr
    evaluated = run("evaluate", str(tmp_path / "p.npz"), "--metrics", "ece", "--resamples", "20")
    assert evaluated.returncode == 0 and "ece" in evaluated.stdout and "basic" in evaluated.stdout

