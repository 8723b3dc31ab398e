"""The regression part of the workflow end to end: a regression-only configuration, byte-identical reruns."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from workflow_helpers import run_snakemake, write_config

pytestmark = pytest.mark.slow

FAST = {"epochs": 5, "hidden": 8}
MODELS = {"mc_dropout": {**FAST, "passes": 5}, "aleatoric": {**FAST, "passes": 5}, "ensemble": {**FAST, "members": 2},
          "evidential": FAST}


def test_regression_only_config_runs_only_regression_and_reruns_byte_identically(tmp_path):
    config = write_config(tmp_path / "reg.yaml", {"regression": {"diabetes": {"source": "diabetes", "splits": 2,
                                                                              "models": MODELS}}})
    result = run_snakemake(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    results, reports = tmp_path / "results" / "reg", tmp_path / "reports" / "reg" / "regression"  # the config's name
    assert not (results / "metrics.csv").exists() and not (reports.parent / "tables").exists()
    metrics = pd.read_csv(results / "regression/metrics.csv")
    assert list(metrics.columns) == ["dataset", "model", "method", "split", "metric", "value"]
    assert list(metrics.model.unique()) == list(MODELS) and sorted(metrics.split.unique()) == [0, 1]
    assert len(metrics) == 4 * 4 * 2 * 9  # models x recalibrators x splits x metrics
    tables = sorted(path.name for path in (reports / "tables").iterdir())
    assert "msce_one_sided.md" in tables and "metric_crps.tex" in tables and "parameters.md" in tables
    assert len(tables) == 2 * (4 + 9 + 1 + 1)  # the seed's four, one per metric, the fitted parameters', conformal
    assert "conformal.md" in tables and (results / "regression/conformal.csv").is_file()
    assert (results / "regression/parameters.csv").read_text().startswith("dataset,model,method,split,parameter,value")
    figures = sorted(path.relative_to(reports / "figures").as_posix() for path in (reports / "figures").rglob("*.png"))
    assert figures == [f"reliability/diabetes/{model}.png" for model in sorted(MODELS)]
    assert "published" in (reports / "reproduction.md").read_text()
    log = (results / "logs/regression_predict/diabetes/ensemble/split1.log").read_text()
    assert "ensemble member 2/2: epoch 5/5" in log
    assert "regression reports" in result.stderr  # the closing summary names them
    before = {path: path.read_bytes() for path in (results / "regression").rglob("*") if path.is_file()}
    before.update({path: path.read_bytes() for path in reports.rglob("*") if path.is_file()})
    for path in results.iterdir():
        if path.name != "logs":
            shutil.rmtree(path)
    shutil.rmtree(reports)
    rerun = run_snakemake(tmp_path, "--configfile", str(config))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {path: path.read_bytes() for path in before} == before
