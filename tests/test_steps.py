"""The rules' steps (calibrepro.steps) on files, without Snakemake."""

from __future__ import annotations

import csv
import json
import logging
import threading

import pandas as pd
import pytest

from calibrepro.calibrators.cost import fit_plan_summary
from calibrepro.report.convergence_file import ConvergenceFileError, format_convergence, read_convergence, record_row
from calibrepro.report.metrics_file import COLUMNS, MetricsFileError, format_metrics, read_metrics
from calibrepro.steps import calibration
from calibrepro.steps.run import failure_summary, outputs_summary, step_log
from calibrepro.tasks import CalibratorFileError
from workflow_helpers import synthetic_logits

METHODS = ["uncalibrated", "temperature_scaling"]


@pytest.fixture
def fitted(tmp_path):
    """One model's logits, its split and two fitted calibrators."""
    logits = tmp_path / "a.npz"
    synthetic_logits(logits, n=200, k=3)
    split = tmp_path / "split.npz"
    calibration.split_step(logits, 0.5, 0, split, dataset="d", log=tmp_path / "logs/split.log")
    calibrators = {method: tmp_path / f"{method}.json" for method in METHODS}
    calibration.fit_step(logits, split, calibrators, bins=15, log=tmp_path / "logs/fit.log")
    return logits, split, calibrators


def evaluate(tmp_path, logits, split, calibrators, log=None):
    calibration.evaluate_step(
        logits, split, tmp_path / "eval.csv", tmp_path / "rel.json",
        calibrators=calibrators, metrics=["accuracy", "ece"], bins=15,
        dataset="d", model="m", seed=0, log=log,
    )


def test_steps_write_their_logs(tmp_path, fitted):
    logits, split, calibrators = fitted
    evaluate(tmp_path, logits, split, calibrators, log=tmp_path / "logs/evaluate.log")
    assert "split of 200 samples" in (tmp_path / "logs/split.log").read_text()
    fit_log = (tmp_path / "logs/fit.log").read_text().splitlines()
    assert [line.split(":")[0] for line in fit_log[:2]] == METHODS
    assert fit_log[-1].startswith("done in ")
    assert json.loads(calibrators["temperature_scaling"].read_text())["method"] == "temperature_scaling"
    rows = pd.read_csv(tmp_path / "eval.csv")
    assert list(rows.columns) == list(COLUMNS) and len(rows) == 2 * 2
    evaluate_log = (tmp_path / "logs/evaluate.log").read_text()
    accuracy = rows.query("method == 'uncalibrated' and metric == 'accuracy'")["value"].item()
    assert f"uncalibrated: accuracy {accuracy:.6g}, ece" in evaluate_log


def test_a_calibrator_file_of_another_method_is_refused(tmp_path, fitted):
    logits, split, calibrators = fitted
    swapped = {"uncalibrated": calibrators["temperature_scaling"], "temperature_scaling": calibrators["uncalibrated"]}
    with pytest.raises(CalibratorFileError) as error:
        evaluate(tmp_path, logits, split, swapped, log=tmp_path / "logs/evaluate.log")
    message = str(error.value)
    assert str(calibrators["temperature_scaling"]) in message
    assert "'temperature_scaling' calibrator where 'uncalibrated' was expected" in message
    # the step's log ends with its own error, which the workflow's error summary prints
    assert (tmp_path / "logs/evaluate.log").read_text().splitlines()[-1] == f"error: {message}"
    assert not (tmp_path / "eval.csv").exists()


def test_gathered_metrics_keep_the_order_and_reject_foreign_files(tmp_path):
    first, second = tmp_path / "1.csv", tmp_path / "2.csv"
    first.write_text(format_metrics([("d", "b", "uncalibrated", 0, "ece", 0.1)]))
    second.write_text(format_metrics([("d", "a", "uncalibrated", 0, "ece", 1 / 3)]))
    calibration.gather_metrics_step([first, second], tmp_path / "metrics.csv", log=tmp_path / "gather.log")
    metrics = read_metrics(tmp_path / "metrics.csv")
    assert metrics.rows == [("d", "b"), ("d", "a")]
    assert metrics.values[("d", "a", "uncalibrated", "ece")] == {0: 1 / 3}  # repr: exact round trip
    assert "2 rows from 2 evaluation files" in (tmp_path / "gather.log").read_text()
    (tmp_path / "3.csv").write_text("model,value\nm,1\n")
    with pytest.raises(MetricsFileError, match="3.csv: not a metrics file"):
        calibration.gather_metrics_step([first, tmp_path / "3.csv"], tmp_path / "metrics.csv")


def test_the_evaluation_records_how_each_fit_ended_and_metrics_csv_holds_metrics_only(tmp_path, fitted):
    logits, split, calibrators = fitted
    calibration.evaluate_step(
        logits, split, tmp_path / "eval.csv", tmp_path / "rel.json", calibrators=calibrators,
        metrics=["accuracy", "ece"], dataset="d", model="m", seed=0, convergence_output=tmp_path / "fits.csv",
    )
    assert set(pd.read_csv(tmp_path / "eval.csv")["metric"]) == {"accuracy", "ece"}
    with open(tmp_path / "fits.csv", newline="") as handle:
        records = {row["method"]: row for row in csv.DictReader(handle)}
    diagnostics = json.loads(calibrators["temperature_scaling"].read_text())["diagnostics"]
    assert diagnostics["converged"] is True and diagnostics["n_iter"] > 0
    assert records["temperature_scaling"]["converged"] == "1"
    assert records["temperature_scaling"]["iterations"] == str(diagnostics["n_iter"])
    assert [records["uncalibrated"][c] for c in ("converged", "iterations", "lambda", "mu", "search_capped")] == [""] * 5
    # gathered in the given order; a fit that stopped early or a capped search is what the tables mark
    other = tmp_path / "other.csv"
    other.write_text(format_convergence([
        record_row("d", "n", "dirichlet_odir", 0, {"converged": False, "iterations": 500, "lambda": 0.1, "mu": 1.0}),
        record_row("d", "n", "dirichlet_l2", 0, {"converged": True, "lambda": 100.0, "mu": 0.0, "search_capped": True}),
    ]))
    calibration.gather_convergence_step([tmp_path / "fits.csv", other], tmp_path / "convergence.csv")
    lines = (tmp_path / "convergence.csv").read_text().splitlines()
    assert lines[0] == "dataset,model,method,seed,converged,iterations,lambda,mu,search_capped"
    assert [line.split(",")[1] for line in lines[1:]] == ["m", "m", "n", "n"]
    assert lines[3:] == ["d,n,dirichlet_odir,0,0,500,0.1,1.0,", "d,n,dirichlet_l2,0,1,,100.0,0.0,1"]
    convergence = read_convergence(tmp_path / "convergence.csv")
    assert convergence.not_converged == {("d", "n", "dirichlet_odir", 0)}
    assert convergence.search_capped == {("d", "n", "dirichlet_l2", 0)}
    (tmp_path / "bad.csv").write_text((tmp_path / "convergence.csv").read_text().replace(",0,500,", ",no,500,"))
    with pytest.raises(ConvergenceFileError, match="bad.csv, line 4: converged is 'no'"):
        read_convergence(tmp_path / "bad.csv")


def test_a_step_log_holds_only_its_own_threads_records(tmp_path):
    other_started, step_done = threading.Event(), threading.Event()

    def other_thread():
        other_started.set()
        step_done.wait(5)
        logging.getLogger("calibrepro").info("from another job")

    thread = threading.Thread(target=other_thread)
    thread.start()
    other_started.wait(5)
    with step_log(tmp_path / "step.log") as logger:
        logger.info("from this job")
        step_done.set()
        thread.join(5)
    assert (tmp_path / "step.log").read_text().splitlines()[0] == "from this job"
    assert "from another job" not in (tmp_path / "step.log").read_text()


def test_run_summaries(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports/tables").mkdir(parents=True)
    for name in ("ece.md", "ece.tex"):
        (tmp_path / "reports/tables" / name).write_text("x")
    summary = outputs_summary(
        {"tables": ["reports/tables/ece.md", "reports/tables/ece.tex", "reports/tables/nll.md"],
         "report": ["reports/reproduction.md"]}
    )
    assert summary.splitlines() == ["calibrepro: finished. Outputs:", "  tables    reports/tables/  (2 files)"]
    longer = outputs_summary({"tables": ["reports/tables/ece.md"], "regression metrics": ["reports/tables/ece.tex"]})
    assert longer.splitlines()[1:] == ["  tables             reports/tables/ece.md", "  regression metrics reports/tables/ece.tex"]
    (tmp_path / "job.log").write_text("working\nerror: a.npz: 'logits' holds NaN\n\n")
    failure = failure_summary([("logits", "(dataset=d, model=m)", ["job.log"])])
    assert failure.splitlines()[1] == "  logits (dataset=d, model=m): error: a.npz: 'logits' holds NaN (full log: job.log)"


def test_fit_plan_line_states_what_the_cost_model_knows():
    def line(*shapes):
        jobs = [(shape, "dirichlet_l2", {}) for shape in shapes]
        return fit_plan_summary(jobs, calibration_fraction=0.5, threads=2)

    unknown = line(None, None)
    assert "2 full-matrix fit jobs" in unknown and "time unknown until their logits exist" in unknown
    assert "expected under a CPU-minute" in line((200, 3))
    large = line((40_000, 400), None)
    assert "expected about" in large and "1 on logits of unknown shape not counted" in large
