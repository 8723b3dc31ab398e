"""The Snakemake workflow end to end, as a user runs it (in a temporary working directory)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from calibrepro import cli, determinism, fingerprint
from calibrepro import metrics as M
from calibrepro.commands import evaluate_file
from calibrepro.io import load_logits
from calibrepro.report.metrics_file import read_metrics
from calibrepro.report.parameters_file import read_parameters
from calibrepro.splits import load_split
from calibrepro.steps.calibration import load_calibrator
from calibrepro.tasks import task_of
from workflow_helpers import ROOT, run_snakemake, synthetic_logits, write_config

pytestmark = pytest.mark.slow

METHODS = ["uncalibrated", "histogram_binning", "isotonic", "temperature_scaling", "vector_scaling", "vector_scaling_bias"]
# the demo config lists the methods beyond the thesis too (issue 13)
DEMO_METHODS = METHODS + ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir", "ensemble_temperature_scaling"]


def readme_demo():
    """tools/readme_demo.py, the generator and checker of the documents' quotes of the demo's output."""
    spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "tools" / "readme_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def differing_training_primitives(reference: str) -> list[str]:
    """The training primitives of this processor's kernel fingerprint that differ from the ``reference`` processor's."""
    ours = fingerprint.measure()
    return fingerprint.compare(ours, fingerprint.load(ROOT / fingerprint.FOLDER / f"{reference}.json"))["training"]


def byo_config(tmp_path, models, **extra):
    return write_config(tmp_path / "byo.yaml", {"models": {"mydata": models}, **extra})


def uncalibrated_reference(workdir, dataset, model, seed=0):
    """Accuracy and 15-bin ECE of the raw softmax on the test half, computed here independently."""
    archive = load_logits(workdir / f"results/demo/logits/{dataset}/{model}.npz")
    _, test, _ = load_split(workdir / f"results/demo/splits/{dataset}/seed{seed}.npz")
    z = archive.logits[test].astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    confidence, correct = p.max(axis=1), p.argmax(axis=1) == archive.labels[test]
    bins = np.clip(np.ceil(confidence * 15).astype(int) - 1, 0, 14)
    ece = sum(abs(correct[bins == m].sum() - confidence[bins == m].sum()) for m in range(15)) / len(test)
    return correct.mean(), ece


def test_demo_runs_end_to_end_and_reruns_byte_identical(tmp_path):
    result = run_snakemake(tmp_path)  # the card's plain `snakemake --cores 2`
    assert result.returncode == 0, result.stderr[-3000:]
    # the cheap steps ran in threads: Snakemake read the top-level profiles/default by itself
    assert "Using workflow specific profile" in result.stderr and "profiles/default" in result.stderr
    # the run ends by saying where its outputs are
    summary = result.stderr[result.stderr.index("calibrepro: finished. Outputs:"):]
    assert "results/demo/metrics.csv" in summary and "reports/demo/reproduction.md" in summary
    # 11 metrics x (md, tex), ranks, size study, fitted parameters (md, tex), conformal (md, tex), the curves
    # (md, tex) and their findings; the figures: 6 reliability diagrams, the named one, the CD diagram, the size
    # study, the conformal sweep, the curves, the confidence histograms (png, pdf)
    tables = sum(1 for _ in (tmp_path / "reports/demo/tables").iterdir())
    figures = sum(1 for path in (tmp_path / "reports/demo/figures").rglob("*") if path.is_file())
    assert (tables, figures) == (31, 24)
    assert "results/demo/parameters.csv" in summary and "results/demo/regression/parameters.csv" in summary
    assert f"reports/demo/tables/  ({tables} files)" in summary and f"reports/demo/figures/  ({figures} files)" in summary
    # every step's log says what it did: the logits step's check of its archive, each fit, each metric
    log = (tmp_path / "results/demo/logs/logits/digits/mlp_overconfident.log").read_text()
    assert "results/demo/logits/digits/mlp_overconfident.npz: ok, 899 samples, 10 classes" in log
    log = (tmp_path / "results/demo/logs/logits/digits/mlp_dropout.log").read_text()
    assert "digits/mlp_dropout: epoch 100/100: loss" in log or "weights from the cache" in log
    mc = load_logits(tmp_path / "results/demo/logits/digits/mlp_mc_dropout.npz").metadata
    assert mc["variant"] == {"mc_dropout": 20} and mc["training"][0]["history"][-1]["epoch"] == 100
    log = (tmp_path / "results/demo/logs/fit_calibrators/digits/mlp_overconfident/seed0.log").read_text()
    assert all(f"{method}: fitted on 449 samples" in log for method in METHODS), log
    log = (tmp_path / "results/demo/logs/evaluate/digits/mlp_overconfident/seed0.log").read_text()
    assert all(line.split(":")[0] in METHODS for line in log.splitlines()[:6]), log
    metrics = pd.read_csv(tmp_path / "results/demo/metrics.csv")
    models = ["logistic_regression", "mlp_overconfident", "mlp_label_smoothing", "mlp_dropout", "mlp_mc_dropout", "ensemble"]
    assert list(metrics.columns) == ["dataset", "model", "method", "seed", "metric", "value"]
    assert list(metrics["model"].unique()) == models
    assert list(metrics["method"].unique()) == DEMO_METHODS
    assert len(metrics) == 6 * 10 * 11  # six models (one an ensemble), ten methods, eleven metrics
    assert metrics["value"].between(0, np.inf).all()

    for model in models:
        accuracy, ece = uncalibrated_reference(tmp_path, "digits", model)
        row = metrics.set_index(["model", "method", "metric"])["value"]
        assert row[(model, "uncalibrated", "accuracy")] == pytest.approx(accuracy, abs=1e-12)
        assert row[(model, "uncalibrated", "ece")] == pytest.approx(ece, abs=1e-6)
        # temperature scaling keeps the argmax, so it keeps the accuracy
        assert row[(model, "temperature_scaling", "accuracy")] == row[(model, "uncalibrated", "accuracy")]

    # the curves' last epoch is the tables' network: the same ECE to the last bit, before and after TS
    curves = pd.read_csv(tmp_path / "results/demo/training_curves.csv")
    assert list(curves["model"].unique()) == ["mlp_overconfident", "mlp_label_smoothing"]
    row = metrics.set_index(["model", "method", "metric"])["value"]
    last = curves.query("epoch == 200 and metric == 'ece'").set_index(["model", "method"])["value"]
    for (model, method), value in last.items():
        assert value == row[(model, method, "ece")], (model, method)
    assert "Calibration over training, checked" in (tmp_path / "reports/demo/reproduction.md").read_text()

    over = metrics.query("model == 'mlp_overconfident' and metric == 'nll'").set_index("method")["value"]
    assert over["temperature_scaling"] < over["uncalibrated"]

    # every fit's numbers: each temperature as its calibrator file holds it, the convergence records' values
    parameters = read_parameters(tmp_path / "results/demo/parameters.csv")
    assert list(dict.fromkeys(row[1] for row in parameters.rows)) == models
    value = {row[1:5]: row[5] for row in parameters.rows}
    for model in models:
        fitted = json.loads((tmp_path / f"results/demo/calibrators/digits/{model}/temperature_scaling/seed0.json")
                            .read_text())
        assert value[(model, "temperature_scaling", 0, "temperature")] == fitted["params"]["temperature"]
    for record in pd.read_csv(tmp_path / "results/demo/convergence.csv", dtype=str, keep_default_na=False).itertuples():
        for name, column in (("converged", record.converged), ("iterations", record.iterations)):
            assert str(value.get((record.model, record.method, 0, name), "")) == column, (record, name)
    assert {"lambda", "mu", "converged"} <= {row[4] for row in parameters.rows if row[2] == "dirichlet_odir"}
    table = (tmp_path / "reports/demo/tables/parameters.md").read_text()
    assert "**T-scaling** (Guo et al. 2017, sec. 4.2)" in table and all(f"| {model} " in table for model in models)
    regression = read_parameters(tmp_path / "results/demo/regression/parameters.csv")
    assert {row[2:5] for row in regression.rows if row[4] == "scale"} == {("std_scaling", split, "scale")
                                                                          for split in (0, 1)}
    assert "**Std scaling**" in (tmp_path / "reports/demo/regression/tables/parameters.md").read_text()

    table = (tmp_path / "reports/demo/tables/accuracy.md").read_text()
    accuracy = metrics.query("model == 'mlp_overconfident' and method == 'uncalibrated' and metric == 'accuracy'")
    assert f"{100 * accuracy['value'].item():.3f}" in table
    for model in models:
        for extension in ("png", "pdf"):
            assert (tmp_path / f"reports/demo/figures/reliability/digits/{model}.{extension}").stat().st_size > 10_000
    assert (tmp_path / "reports/demo/figures/figure_demo.png").is_file()

    # every interval contains the estimate it belongs to: the plug-in estimate, or (where a biased
    # statistic's bootstrap lies beside it) the bias-corrected centre, which the tables then print
    intervals = pd.read_csv(tmp_path / "results/demo/intervals.csv")
    assert len(intervals) == len(metrics)
    assert ((intervals["low"] <= intervals["centre"]) & (intervals["centre"] <= intervals["high"])).all()
    # ... and lies in its metric's range (docs/decisions.md: clipped; no negative ECE bound)
    ranges = intervals["metric"].map(lambda name: M.spec(name).bounds)
    assert all(lo <= low and (hi is None or high <= hi)
               for (lo, hi), low, high in zip(ranges, intervals["low"], intervals["high"]))
    outside = ~intervals["estimate"].between(intervals["low"], intervals["high"])
    assert (intervals.loc[outside, "interval"] != "percentile").all()
    assert (intervals.loc[intervals["interval"] == "percentile", "centre"]
            == intervals.loc[intervals["interval"] == "percentile", "estimate"]).all()

    # every number README.md quotes as the demo's output is this run's, at the printed digit, where this processor's
    # networks give the published logits; where they do not, the kernel fingerprint must say which primitive differs
    # (docs/reproducibility.md; the analysis of the published logits is identical everywhere: the next test)
    demo = readme_demo()
    trained = demo.logits_that_differ(tmp_path)
    if not trained:
        stale = demo.check(tmp_path)
        assert not stale, f"the documents' demo blocks {stale} are stale: `make demo`, then `python tools/readme_demo.py`"
    else:
        reference = json.loads((ROOT / demo.CHECKSUMS).read_text(encoding="utf-8"))["machine"]
        assert differing_training_primitives(reference), (
            f"the logits of {trained} differ from the published ones, yet no training primitive of this processor's "
            f"kernel fingerprint differs from {reference}'s: a kernel the fingerprint does not measure, or stale "
            f"published logits (`make demo`, then `python tools/readme_demo.py`)")

    # asked for, a calibrator's test-half probabilities: exactly those the metrics of metrics.csv scored
    asked = [f"results/demo/probabilities/digits/mlp_overconfident/{method}/seed0.npz"
             for method in ("isotonic", "dirichlet_odir")]  # float32 softmax and isotonic; a full-matrix fit
    result = run_snakemake(tmp_path, *asked)
    assert result.returncode == 0, result.stderr[-3000:]
    ran = [line.split()[1] for line in result.stderr.splitlines() if line.startswith(("rule ", "localrule "))]
    assert ran == ["probabilities:"] * 2, ran
    scored = read_metrics(tmp_path / "results/demo/metrics.csv").values
    for path in asked:
        method = path.split("/")[-2]
        demo_metrics = [m for m in M.METRICS if ("digits", "mlp_overconfident", method, m) in scored]
        for metric, value in evaluate_file(tmp_path / path, metrics=demo_metrics, resamples=0).values.items():
            assert value.estimate == scored[("digits", "mlp_overconfident", method, metric)][0], (method, metric)

    result = run_snakemake(tmp_path, "--report", "report.html")
    assert result.returncode == 0, result.stderr[-3000:]
    bundle = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert all(name in bundle for name in ("ece.md", "mlp_overconfident.png", "reproduction.md"))
    # and the regression part's tables, reliability curves and reproduction report
    assert all(name in bundle for name in ("msce_one_sided.md", "metric_crps.md", "reliability/diabetes"))
    # and the uncertainty outputs: intervals, comparisons, ranks with their CD diagrams, the size study
    assert all(name in bundle for name in ("intervals.csv", "comparisons.csv", "ranks.md", "cd/digits.png",
                                           "size_study.md", "size_study/digits.png"))
    # and the conformal sets' tables and figure
    assert all(name in bundle for name in ("conformal.md", "conformal/digits/mlp_overconfident.png"))

    # everything after the logits again (the trained models' logits are deterministic by their own
    # test, tests/test_zoo_demo.py): the same bytes, whichever worker process ran which step
    outputs = ["results/demo/metrics.csv", "results/demo/intervals.csv", "results/demo/size_study.csv",
               "results/demo/parameters.csv", "results/demo/regression/parameters.csv", "results/demo/conformal.csv",
               "reports/demo/regression/tables/parameters.md",
               *sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "reports/demo/tables").iterdir())]
    first = {name: (tmp_path / name).read_bytes() for name in outputs}
    for name in ("splits", "calibrators", "evaluations", "reliability", "bootstrap", "size_study", "conformal_splits",
                 "conformal"):
        shutil.rmtree(tmp_path / "results/demo" / name, ignore_errors=True)
    for name in ("metrics.csv", "intervals.csv", "comparisons.csv", "size_study.csv", "parameters.csv",
                 "conformal.csv"):
        (tmp_path / "results/demo" / name).unlink()
    shutil.rmtree(tmp_path / "reports/demo")
    result = run_snakemake(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "logits" not in {line.split()[0] for line in result.stderr.splitlines() if line.startswith("localrule ")}
    second = {name: (tmp_path / name).read_bytes() for name in outputs}
    assert first == second


@pytest.mark.skipif(not determinism.kernel_environment(), reason="the bytes are promised on x86-64 with AVX2 and FMA")
def test_the_analysis_of_the_published_logits_gives_the_published_bytes(tmp_path):
    """The promise that holds on every processor: the demo's classification analysis (splits, fits, metrics,
    intervals, size study, conformal sets, tables) of the published logits is byte for byte the published one."""
    demo = readme_demo()
    result = run_snakemake(tmp_path, "--configfile", str(demo.published_inputs_config(tmp_path / "published.yaml")))
    assert result.returncode == 0, result.stderr[-3000:]
    published = json.loads((ROOT / demo.CHECKSUMS).read_text(encoding="utf-8"))["files"]
    expected = {name: entry["sha256"] for name, entry in published.items() if demo.is_analysis(name)}
    assert len(expected) > 30
    found = {name: entry["sha256"] for name, entry in demo.checksums(tmp_path).items() if demo.is_analysis(name)}
    assert found == expected


def test_own_logits_replace_the_demo_models(tmp_path):
    synthetic_logits(tmp_path / "a.npz", seed=1)
    _, labels = synthetic_logits(tmp_path / "b.npz", seed=2)
    synthetic_logits(tmp_path / "b.npz", seed=3, labels=labels, sharpness=6.0)
    synthetic_logits(tmp_path / "a.npz", seed=1, labels=labels)
    config = byo_config(
        tmp_path,
        {"net_a": {"source": "logits", "path": "a.npz"}, "net_b": {"source": "logits", "path": "b.npz"}},
        split={"seeds": [0, 1]},
        metrics=["accuracy", "ece", "nll"],
    )
    result = run_snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = pd.read_csv(tmp_path / "results/byo/metrics.csv")
    assert set(metrics["dataset"]) == {"mydata"}
    assert list(metrics["model"].unique()) == ["net_a", "net_b"]
    assert sorted(metrics["seed"].unique()) == [0, 1]
    assert len(metrics) == 2 * 6 * 2 * 3
    assert not (tmp_path / "results/byo/logits/digits").exists()
    for method in METHODS:
        assert (tmp_path / f"results/byo/calibrators/mydata/net_b/{method}/seed1.json").is_file()
    # the config does not mention `uncertainty`: intervals, ranks and tie marks by default
    assert sorted(p.name for p in (tmp_path / "reports/byo/tables").iterdir()) == [
        "accuracy.md", "accuracy.tex", "conformal.md", "conformal.tex", "ece.md", "ece.tex", "nll.md", "nll.tex",
        "parameters.md", "parameters.tex", "ranks.md",
    ]
    intervals = pd.read_csv(tmp_path / "results/byo/intervals.csv")
    assert len(intervals) == len(metrics) and set(intervals["interval"]) <= {"percentile", "basic", "bca", "debiased"}
    assert "statistically tied with the best" in (tmp_path / "reports/byo/tables/ece.md").read_text()


def test_one_table_builds_only_what_it_needs(tmp_path):
    synthetic_logits(tmp_path / "a.npz")
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}})
    result = run_snakemake(tmp_path, "reports/byo/tables/ece.md", "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "reports/byo/tables/ece.md").is_file()
    assert not (tmp_path / "reports/byo/tables/brier.md").exists()
    assert not (tmp_path / "reports/byo/figures").exists()


def test_one_probabilities_file_builds_only_what_it_needs_and_is_the_apply_commands(tmp_path, monkeypatch):
    synthetic_logits(tmp_path / "a.npz")
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}},
                        calibrators=["uncalibrated", "temperature_scaling", "dirichlet_l2"])
    target = "results/byo/probabilities/mydata/net_a/temperature_scaling/seed0.npz"
    result = run_snakemake(tmp_path, target, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    ran = {line.split()[1].rstrip(":") for line in result.stderr.splitlines() if line.startswith(("rule ", "localrule "))}
    assert ran == {"logits_request", "logits", "split", "fit_calibrators", "probabilities"}, ran
    assert not (tmp_path / "results/byo/calibrators/mydata/net_a/dirichlet_l2").exists()
    assert not (tmp_path / "results/byo/metrics.csv").exists() and not (tmp_path / "reports").exists()
    # the file of `calibrepro apply <json> <logits> --split <split> --half test`, run where the workflow ran
    monkeypatch.chdir(tmp_path)
    calibrator = "results/byo/calibrators/mydata/net_a/temperature_scaling/seed0.json"
    logits = "results/byo/logits/mydata/net_a.npz"
    split = "results/byo/splits/mydata/seed0.npz"
    assert cli.main(["apply", calibrator, logits, "--split", split, "--half", "test", "-o", "mine.npz"]) == 0
    task = task_of("classification")
    [test] = task.halves(logits, split, "test")
    scored = task.predict(load_calibrator(calibrator, "temperature_scaling"), test)  # what evaluate_step scores
    with np.load(target, allow_pickle=False) as pipeline, np.load("mine.npz", allow_pickle=False) as mine:
        assert sorted(pipeline.files) == sorted(mine.files) == ["labels", "metadata", "probabilities", "rows"]
        assert all(pipeline[name].tobytes() == mine[name].tobytes() for name in pipeline.files)  # bit for bit
        assert pipeline["probabilities"].tobytes() == scored.tobytes()
    assert "calibrated probabilities of 200 rows of the test half" in (
        tmp_path / "results/byo/logs/probabilities/mydata/net_a/temperature_scaling/seed0.log").read_text()
    # report.export_probabilities makes every model's, method's and seed's file a target of the run
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}}, split={"seeds": [0, 1]},
                        calibrators=["uncalibrated", "temperature_scaling"], report={"export_probabilities": True})
    result = run_snakemake(tmp_path, "--configfile", str(config), "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^probabilities\s+3$", result.stdout + result.stderr, flags=re.M), result.stdout[-3000:]


@pytest.mark.parametrize(
    "breakage, message",
    [
        ("nan", "NaN or infinite values in 1 row(s), first at row 7"),
        ("label", "label 9 at row 3 is outside the 4 classes [0, 3]"),
        ("count", "'labels' has 399 entries but 'logits' has 400 rows"),
    ],
)
def test_bad_own_logits_fail_naming_the_file(tmp_path, breakage, message):
    logits, labels = synthetic_logits(tmp_path / "a.npz")
    if breakage == "nan":
        logits[7, 1] = np.nan
    elif breakage == "label":
        labels[3] = 9
    else:
        labels = labels[:-1]
    np.savez(tmp_path / "a.npz", logits=logits, labels=labels)
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}})
    result = run_snakemake(tmp_path, "results/byo/metrics.csv", "--configfile", str(config))
    assert result.returncode != 0
    log = (tmp_path / "results/byo/logs/logits/mydata/net_a.log").read_text()
    assert "a.npz" in log and message in log
    assert not (tmp_path / "results/byo/logits/mydata/net_a.npz").exists()
    # the step's own error closes the run (only Snakemake's log path and exit lines follow), and the
    # job's request is not spilled onto the screen as JSON
    output = result.stdout + result.stderr
    closing = output[output.rindex("calibrepro: the run failed."):].splitlines()
    assert closing[1].startswith("  logits (dataset=mydata, model=net_a): ") and message in closing[1], closing
    assert "results/byo/logs/logits/mydata/net_a.log" in closing[1]
    assert len(closing) <= 6, closing
    assert '"spec":' not in output and '"config":' not in output


def test_models_of_one_data_set_must_share_labels(tmp_path):
    synthetic_logits(tmp_path / "a.npz", seed=1)
    synthetic_logits(tmp_path / "b.npz", seed=2)
    config = byo_config(
        tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}, "net_b": {"source": "logits", "path": "b.npz"}}
    )
    result = run_snakemake(tmp_path, "results/byo/metrics.csv", "--configfile", str(config))
    assert result.returncode != 0
    assert "Error: models of data set 'mydata': net_a (a.npz) and net_b (b.npz) have different labels" in result.stderr
    assert 'File "' not in result.stderr  # the message alone, no trail of the workflow's lines
    assert not (tmp_path / "results").exists()  # caught before any job


def test_unknown_config_key_fails_before_any_job(tmp_path):
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}}, bnis=10)
    result = run_snakemake(tmp_path, "--configfile", str(config), "-n")
    assert result.returncode != 0
    assert "unknown key(s) 'bnis'" in result.stdout + result.stderr
    assert 'File "' not in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()


def test_a_configuration_reports_only_its_own_outputs(tmp_path):
    synthetic_logits(tmp_path / "a.npz")
    models = {"net_a": {"source": "logits", "path": "a.npz"}}
    config = byo_config(tmp_path, models, metrics=["accuracy", "ece"])
    assert run_snakemake(tmp_path, "--configfile", str(config)).returncode == 0
    # the same configuration without a metric: its tables go, and the summary counts what is left
    config = byo_config(tmp_path, models, metrics=["ece"])
    result = run_snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "calibrepro: removed 2 output(s) of an earlier run" in result.stderr
    byo_tables = ["conformal.md", "conformal.tex", "ece.md", "ece.tex", "parameters.md", "parameters.tex",
                  "ranks.md"]  # ranks: uncertainty is on by default; conformal: on by default
    assert sorted(p.name for p in (tmp_path / "reports/byo/tables").iterdir()) == byo_tables
    assert "reports/byo/tables/  (7 files)" in result.stderr
    # another configuration in the same folder: folders of its own, the first one's left alone
    other = write_config(tmp_path / "other.yaml", {"models": {"theirs": models}, "metrics": ["nll"]})
    result = run_snakemake(tmp_path, "--configfile", str(other))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("calibrepro: finished. Outputs:"):]
    assert "reports/other/tables/  (7 files)" in summary and "byo" not in summary
    assert sorted(p.name for p in (tmp_path / "reports/byo/tables").iterdir()) == byo_tables
    assert set(pd.read_csv(tmp_path / "results/other/metrics.csv")["dataset"]) == {"theirs"}


def test_a_missing_path_stops_the_run_naming_its_key_even_after_a_cached_run(tmp_path):
    synthetic_logits(tmp_path / "a.npz")
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a.npz"}}, metrics=["ece"])
    assert run_snakemake(tmp_path, "results/byo/metrics.csv", "--configfile", str(config)).returncode == 0
    config = byo_config(tmp_path, {"net_a": {"source": "logits", "path": "a-typo.npz"}}, metrics=["ece"])
    for args in (["results/byo/metrics.csv"], ["-n"]):
        result = run_snakemake(tmp_path, *args, "--configfile", str(config))
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "models.mydata.net_a.path: a-typo.npz does not exist" in output
        assert "Nothing to be done" not in output and "Traceback" not in output


@pytest.mark.parametrize("source, what", [("table", "a CSV file with a header row"), ("predictions", "an .npz file")])
def test_a_missing_regression_file_stops_the_run_naming_its_key(tmp_path, source, what):
    spec = {"source": source, "path": "nope.csv"} | ({"target": "strength"} if source == "table" else {})
    config = write_config(tmp_path / "reg.yaml", {"name": "reg", "regression": {"concrete": spec}})
    result = run_snakemake(tmp_path, "-n", "--configfile", str(config))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"regression.concrete.path: nope.csv does not exist; point it to {what}" in output
    assert "MissingInputException" not in output and "Traceback" not in output


def test_a_failed_full_matrix_fit_keeps_the_other_methods(tmp_path):
    """Each full-matrix method has a fit job of its own: one that fails (or is killed) leaves the others'
    files, and the rerun fits only the missing method (issue 18)."""
    synthetic_logits(tmp_path / "a.npz")
    methods = ["temperature_scaling", "dirichlet_l2", "dirichlet_odir"]
    options = {"dirichlet_l2": {"lambdas": [0.1, 1.0], "folds": 3}, "dirichlet_odir": {"lambdas": [0.1, 1.0], "mus": [1.0]}}
    models = {"net_a": {"source": "logits", "path": "a.npz"}}
    refusing = {**options, "dirichlet_odir": {**options["dirichlet_odir"], "cpu_flop_budget": 1.0}}
    targets = [f"results/byo/calibrators/mydata/net_a/{method}/seed0.json" for method in methods]
    config = byo_config(tmp_path, models, calibrators=methods, calibrator_options=refusing)
    failed = run_snakemake(tmp_path, "--keep-going", *targets, "--configfile", str(config))
    assert failed.returncode != 0
    kept = [tmp_path / target for target in targets[:2]]
    assert all(path.is_file() for path in kept) and not (tmp_path / targets[2]).exists()
    log = (tmp_path / "results/byo/logs/fit_calibrator/mydata/net_a/dirichlet_odir/seed0.log").read_text()
    assert "cpu_flop_budget" in log
    before = [path.stat().st_mtime_ns for path in kept]
    config = byo_config(tmp_path, models, calibrators=methods, calibrator_options=options)
    again = run_snakemake(tmp_path, *targets, "--configfile", str(config))
    assert "full-matrix fit jobs" in again.stderr  # the run states the fits it plans and their expected time
    assert again.returncode == 0, again.stderr[-3000:]
    assert [path.stat().st_mtime_ns for path in kept] == before
    assert (tmp_path / targets[2]).is_file()
    assert "rule fit_calibrator:" in again.stderr and "rule fit_calibrators:" not in again.stderr
