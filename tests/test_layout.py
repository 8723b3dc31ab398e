"""The table of result paths (calibrepro.layout): per-configuration folders and what a run keeps."""

from __future__ import annotations

import os

import pytest

from calibrepro.config import ConfigError, run_name
from calibrepro.layout import Layout
from calibrepro.steps.run import remove_stale_outputs


def test_a_named_layout_puts_every_path_under_its_folders():
    layout = Layout.named("my")
    paths = [
        layout.logits("d", "m"), layout.logits_request("d", "m"), layout.split("d", 0),
        layout.calibrator("d", "m", "isotonic", 0), layout.evaluation("d", "m", 0), layout.reliability("d", "m", 0),
        layout.metrics, layout.convergence_part("d", "m", 0), layout.convergence,
        layout.bootstrap("d", "m", 0, "intervals"), layout.intervals, layout.comparisons,
        layout.size_study_part("d", "m"), layout.size_study, layout.log("split", "d/seed0"), layout.log("metrics"),
        layout.parameters, layout.probabilities("d", "m", "isotonic", 0), layout.regression_parameters,
    ]
    assert all(path.startswith("results/my/") for path in paths), paths
    reports = [layout.table("ece", "md"), layout.reliability_figure("d", "m", "png"), layout.named_figure("f", "pdf"),
               layout.dataset_figure("cd", "d", "png"), layout.reproduction]
    assert all(path.startswith("reports/my/") for path in reports), reports
    assert layout.log("split", "d/seed0") == "results/my/logs/split/d/seed0.log"
    assert layout.calibrator("{dataset}", "{model}", "isotonic", "{seed}") == (
        "results/my/calibrators/{dataset}/{model}/isotonic/seed{seed}.json"
    )


def test_the_name_is_the_config_key_else_the_config_files_stem():
    assert run_name({"name": "demo"}, []) == "demo"
    assert run_name({"name": "demo"}, ["config/other.yaml"]) == "demo"
    assert run_name({}, ["a/b/my.yaml"]) == "my"
    assert run_name({}, ["first.yaml", "second.yaml"]) == "second"
    for bad in (["downloads.yaml"], ["my config.yaml"]):
        with pytest.raises(ConfigError, match="set `name:`"):
            run_name({}, bad)


def test_a_run_removes_what_an_earlier_run_of_its_configuration_reported_and_it_does_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    layout = Layout.named("my")
    keep = [layout.metrics, layout.table("ece", "md"), layout.reliability_figure("d", "m", "png")]
    stale = [layout.size_study, layout.table("size_study", "md"), layout.dataset_figure("size_study", "d", "png")]
    cached = [layout.logits("d", "m"), layout.calibrator("d", "m", "isotonic", 0)]
    other = [Layout.named("demo").table("ece", "md")]
    for path in keep + stale + cached + other:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
    assert layout.stale(keep) == sorted(stale)
    message = remove_stale_outputs(layout, keep)
    assert message.startswith("calibrepro: removed 3 output(s) of an earlier run") and layout.size_study in message
    assert [path for path in keep + stale + cached + other if os.path.exists(path)] == keep + cached + other
    assert not os.path.exists(os.path.dirname(layout.dataset_figure("size_study", "d", "png")))  # emptied folder
    assert remove_stale_outputs(layout, keep) == ""
