"""The fitted parameters of a run: each calibrator's numbers, the parameters file and its tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibrepro.calibrators import CALIBRATORS, make_calibrator
from calibrepro.regression.recalibration import RECALIBRATORS
from calibrepro.regression.task import fitted_recalibrators
from calibrepro.report.parameter_tables import render_parameters, write_fitted_parameters, write_parameter_tables
from calibrepro.report.parameters_file import COLUMNS, Parameters, ParametersFileError, fit_rows, read_parameters
from calibrepro.regression import report_steps as regression_reports
from calibrepro.steps import reports
from calibrepro.steps.calibration import evaluate_step
from test_cli_calibration import piped, predictions_file  # noqa: F401 - a fixture
from test_report_tables import md_rows


@pytest.fixture(scope="module")
def fitted(piped):
    """Method -> its calibrator file, fitted on the calibration half of new logits by the pipeline's fit step."""
    return piped[3]


def numbers(rows) -> dict[str, int | float]:
    return {row[4]: row[5] for row in rows}


def test_each_calibrators_numbers_are_its_fitted_state(fitted):
    """Recomputed from the calibrator files' JSON, independently of parameters()."""
    files = fitted
    state = {method: json.loads(path.read_text()) for method, path in files.items()}
    got = {method: numbers(fit_rows("d", "m", method, 0, CALIBRATORS[method].from_json(data)))
           for method, data in state.items()}
    assert got["uncalibrated"] == {}  # nothing fitted, nothing iterated
    ts = state["temperature_scaling"]
    assert got["temperature_scaling"]["inverse_temperature"] == ts["params"]["inverse_temperature"]
    assert got["temperature_scaling"]["temperature"] == ts["params"]["temperature"] != 1.0
    assert got["temperature_scaling"]["iterations"] == ts["diagnostics"]["n_iter"] > 0
    assert got["temperature_scaling"]["converged"] == 1
    for method, parts in (("vector_scaling", ("weight",)), ("vector_scaling_bias", ("weight", "bias"))):
        for part in parts:
            values = np.asarray(state[method]["params"]["weights" if part == "weight" else "bias"])
            assert got[method][f"{part}_mean"] == pytest.approx(values.mean(), abs=1e-15)
            assert (got[method][f"{part}_min"], got[method][f"{part}_max"]) == (values.min(), values.max())
    assert "bias_mean" not in got["vector_scaling"]
    counts = np.asarray(state["histogram_binning"]["params"]["counts"])
    assert got["histogram_binning"] == {"bins": counts.size, "empty_bins": int((counts == 0).sum())}
    per_class = [len(x) for x in state["isotonic"]["params"]["x_thresholds"]]
    assert got["isotonic"] == {"thresholds_mean": sum(per_class) / 5, "thresholds_min": min(per_class),
                               "thresholds_max": max(per_class)}
    ets = state["ensemble_temperature_scaling"]["params"]
    assert got["ensemble_temperature_scaling"] == {
        "temperature": ets["temperature"], "inverse_temperature": ets["inverse_temperature"],
        **dict(zip(["weight_temperature_scaled", "weight_uncalibrated", "weight_uniform"], ets["weights"])),
    }
    for method in ("dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir"):
        params, diagnostics = state[method]["params"], state[method]["diagnostics"]
        assert got[method]["lambda"] == params["lambda"] and got[method]["iterations"] == diagnostics["n_iter"]
        assert got[method]["converged"] == int(diagnostics["converged"])
        assert got[method]["search_capped"] == int(diagnostics["search_capped"])
    assert "mu" not in got["dirichlet_l2"]  # its L2 penalty has no mu (its JSON's 0 is no choice)
    assert got["dirichlet_odir"]["mu"] == state["dirichlet_odir"]["params"]["mu"]


def test_rows_keep_the_calibrators_numbers_first_and_their_types():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 300)
    logits = rng.standard_normal((300, 3)) + 2 * np.eye(3)[labels]
    few = make_calibrator("histogram_binning").fit(logits[:20], labels[:20])  # 20 samples leave bins empty
    p = np.exp(logits[:20]) / np.exp(logits[:20]).sum(axis=1, keepdims=True)
    occupied = {(k, max(int(np.ceil(v * 15)) - 1, 0)) for row in p for k, v in enumerate(row)}  # (v - 1/15, v]
    assert numbers(fit_rows("d", "m", "histogram_binning", 0, few)) == {"bins": 45, "empty_bins": 45 - len(occupied)}
    rows = fit_rows("d", "m", "dirichlet_odir", 2, make_calibrator("dirichlet_odir", lambdas=[0.1], mus=[0.1])
                    .fit(logits, labels))
    assert [row[:4] for row in rows] == [("d", "m", "dirichlet_odir", 2)] * len(rows)
    assert [row[4] for row in rows][:2] == ["lambda", "mu"] and [row[4] for row in rows][-2:] == ["converged",
                                                                                                   "iterations"]
    assert all(isinstance(row[5], int) for row in rows if row[4] in ("converged", "iterations", "search_capped"))
    assert all(isinstance(row[5], float) for row in rows if row[4] in ("lambda", "mu"))


def test_the_file_reads_back_exactly_and_its_tables_rewrite_to_the_same_bytes(fitted, tmp_path):
    files = fitted
    fits = [("d", model, method, seed, files[method]) for model in ("a_net", "b_net") for method in CALIBRATORS
            for seed in (0, 3)]
    csv, md, tex = tmp_path / "parameters.csv", tmp_path / "parameters.md", tmp_path / "parameters.tex"
    reports.parameters_step(fits, csv, md, tex, language="en", log=tmp_path / "log.txt")
    written = {path: path.read_bytes() for path in (csv, md, tex)}
    assert csv.read_text().splitlines()[0] == ",".join(COLUMNS["classification"])
    parameters = read_parameters(csv)
    state = {method: CALIBRATORS[method].from_json(json.loads(path.read_text())) for method, path in files.items()}
    expected = [row for d, model, method, seed, _ in fits for row in fit_rows(d, model, method, seed, state[method])]
    assert parameters.task == "classification" and parameters.rows == expected  # floats by repr: the same doubles
    assert [type(row[5]) for row in parameters.rows] == [type(row[5]) for row in expected]
    rows, text = md_rows(md.read_text()), md.read_text()
    ts = numbers(row for row in expected if row[1:4] == ("b_net", "temperature_scaling", 3))
    assert ["d", "b_net", "3", format(ts["temperature"], ".4g"), format(ts["inverse_temperature"], ".4g"), "yes",
            str(ts["iterations"])] in rows
    assert ["Data", "Model", "Seed", "T", "1/T", "converged", "iterations"] in rows
    assert "**T-scaling** (Guo et al. 2017, sec. 4.2)" in text and "Uncalibrated" not in text
    assert r"\label{tab:calibrepro-parameters-dirichlet-odir}" in tex.read_text()
    assert r"$\lambda$ & $\mu$" in tex.read_text()
    assert "numbers of 40 fits (en)" in (tmp_path / "log.txt").read_text()
    reports.parameters_step(fits, csv, md, tex, language="en")
    assert {path: path.read_bytes() for path in (csv, md, tex)} == written
    write_parameter_tables(csv, md, tex, language="ru")
    assert ["Данные", "Модель", "Seed", "T", "1/T", "сошлась", "итераций"] in md_rows(md.read_text())
    assert "Подобранные параметры: T-scaling" in tex.read_text()


def test_a_table_shows_every_number_of_its_row_and_a_dash_for_a_missing_one():
    parameters = Parameters("classification", [
        ("d", "m1", "temperature_scaling", 0, "temperature", 1.5),
        ("d", "m1", "temperature_scaling", 0, "converged", 0),
        ("d", "m2", "temperature_scaling", 0, "temperature", 2.0e-5),
        ("d", "m2", "isotonic", 0, "thresholds_min", 7),
    ])
    rows = md_rows(render_parameters(parameters, "md"))
    assert rows[0] == ["Data", "Model", "T", "converged"]
    assert ["d", "m1", "1.5", "no"] in rows and ["d", "m2", "2e-05", "—"] in rows
    assert ["d", "m2", "7"] in rows  # an integer as it is; one seed: no seed column
    with pytest.raises(ValueError, match="kind must be"):
        render_parameters(parameters, "html")


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("dataset,model,method,seed,parameter\n", "missing column"),
    ("dataset,model,method,seed,parameter,value\nd,m,x,0,temperature,hot\n", "line 2: seed '0' or value 'hot'"),
    ("dataset,model,method,seed,parameter,value\nd,m,x,0,temperature,nan\n", "no (finite) number"),
])
def test_a_broken_file_is_named_with_its_line(tmp_path, content, message):
    path = tmp_path / "parameters.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ParametersFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_parameters(path)


def test_the_regression_recalibrators_state_comes_from_the_curves_files(tmp_path):
    curves = []
    for split in (0, 1):
        predictions = tmp_path / f"split{split}.npz"
        predictions_file(predictions, seed=split)
        curves.append(tmp_path / f"curves{split}.json")
        evaluate_step(predictions, None, tmp_path / f"eval{split}.csv", curves[-1], task="regression",
                      calibrators=dict.fromkeys(RECALIBRATORS), metrics=["msce"], dataset="d", model="m", seed=split)
    fits = fitted_recalibrators(curves[1])
    assert [fit[:4] for fit in fits] == [("d", "m", method, 1) for method in RECALIBRATORS]
    recorded = json.loads(curves[1].read_text())["methods"]
    state = {fit[2]: numbers(fit_rows(*fit)) for fit in fits}
    assert state["uncalibrated"] == {}
    assert state["std_scaling"] == {"scale": recorded["std_scaling"]["recalibrator"]["params"]["scale"]}
    assert math.isclose(state["std_scaling"]["scale"], 1.6, rel_tol=0.15)  # the predictions' std is off by 1.6
    for method in ("isotonic", "isotonic_two_sided"):
        assert state[method] == {"knots": len(recorded[method]["recalibrator"]["params"]["knots_x"])}
    csv, md, tex = tmp_path / "p.csv", tmp_path / "p.md", tmp_path / "p.tex"
    regression_reports.parameters_step([str(path) for path in curves], csv, md, tex, language="en")
    assert csv.read_text().splitlines()[0] == ",".join(COLUMNS["regression"])
    parameters = read_parameters(csv)
    assert parameters.task == "regression" and len(parameters.rows) == 2 * 3
    assert "**Std scaling** (Levi et al. 2019; Laves et al. 2020)" in md.read_text()
    assert ["d", "m", "1", f"{state['std_scaling']['scale']:.4g}"] in md_rows(md.read_text())  # Split column
    assert r"\label{tab:calibrepro-regression-parameters-std-scaling}" in tex.read_text()


def test_a_curves_file_of_something_else_is_named(tmp_path):
    (tmp_path / "curves.json").write_text(json.dumps({"dataset": "d", "model": "m"}))
    with pytest.raises(ValueError, match="curves.json: not a curves file"):
        fitted_recalibrators(tmp_path / "curves.json")


def test_the_task_must_be_known(tmp_path):
    with pytest.raises(ValueError, match="task must be one of"):
        write_fitted_parameters([], tmp_path / "a.csv", tmp_path / "a.md", tmp_path / "a.tex", task="ranking")
