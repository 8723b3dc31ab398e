"""Calibrated on one image folder, tested on another (``datasets.<key>.calibrate_on``), end to end.

Two generated folders of the same three classes with different class balance; a tiny timm tag
served by a local hub (``HF_ENDPOINT``); the real Snakemake workflow from the folders to
``results/metrics.csv`` and a table.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from calibrepro.config import ConfigError, load_schema, validate_config
from calibrepro.io import load_logits
from calibrepro.layout import Layout
from servers import REPO_ROOT
from test_zoo_network import safetensors_bytes, write_folder
from workflow_helpers import run_snakemake, write_config

CLASSES = ["n01440764", "n01443537", "n01484850"]  # ImageNet WordNet ids: the timm tag reads them by name


def test_shift_config_is_checked():
    schema = load_schema(REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml")
    base = {"models": {"shapes": {"m": {"source": "checkpoint", "architecture": "resnet18", "path": "w.pth"}}},
            "datasets": {"shapes": {"source": "imagefolder", "root": "a"},
                         "night": {"source": "imagefolder", "root": "b", "calibrate_on": "shapes"}}}
    assert validate_config(base, schema)["datasets"]["night"]["calibrate_on"] == "shapes"
    with pytest.raises(ConfigError, match="datasets.night.calibrate_on: 'shape' has no models"):
        validate_config({**base, "datasets": {**base["datasets"], "night": {**base["datasets"]["night"], "calibrate_on": "shape"}}}, schema)
    logits_models = {"shapes": {"m": {"source": "logits", "path": "m.npz"}}}
    with pytest.raises(ConfigError, match=r"models.shapes.m \(source logits\) cannot run on another data set"):
        validate_config({**base, "models": logits_models}, schema)


def test_calibrate_on_one_folder_test_on_another(tmp_path, file_server):
    import timm

    torch.manual_seed(0)
    hub_net = timm.create_model("test_resnet", num_classes=1000).eval()
    file_server.add_file("/timm/test_resnet.r160_in1k/resolve/main/model.safetensors", safetensors_bytes(hub_net))
    write_folder(tmp_path / "day", dict(zip(CLASSES, [12, 12, 12])), seed=1, size=24)
    write_folder(tmp_path / "night", dict(zip(CLASSES, [14, 5, 3])), seed=2, size=24)
    config = {
        "datasets": {
            "day": {"source": "imagefolder", "root": str(tmp_path / "day")},
            "night": {"source": "imagefolder", "root": str(tmp_path / "night"), "calibrate_on": "day"},
        },
        "models": {"day": {"hub": {"source": "timm", "name": "test_resnet.r160_in1k"}}},
        # histogram binning: the random network carries no signal for temperature scaling to fit
        "calibrators": ["uncalibrated", "histogram_binning"],
        "metrics": ["accuracy", "nll", "ece"],
        "inference": {"device": "cpu", "workers": 0, "batch_size": 16},
        "downloads": {"dir": str(tmp_path / "downloads"), "retries": 0},
    }
    work = tmp_path / "work"
    work.mkdir()
    configfile = write_config(tmp_path / "shift.yaml", config)
    layout = Layout.named("shift")  # the config file's stem names the run's folders
    import os

    os.environ["HF_ENDPOINT"] = file_server.base
    try:
        result = run_snakemake(work, layout.metrics, layout.table("nll", "md"), "--configfile", str(configfile))
    finally:
        del os.environ["HF_ENDPOINT"]
    assert result.returncode == 0, result.stderr[-3000:]

    with open(work / layout.metrics, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {(row["dataset"], row["model"]) for row in rows} == {("day", "hub"), ("night", "hub")}
    night = load_logits(work / layout.logits("night", "hub"))
    assert len(night.labels) == 22 and np.bincount(night.labels).tolist() == [14, 5, 3]  # the whole shifted set
    assert night.metadata["classes"] == CLASSES

    # the shifted rows are the day's calibrator, unchanged, on every night image
    fitted = json.loads((work / layout.calibrator("day", "hub", "histogram_binning", 0)).read_text())
    from calibrepro.calibrators import calibrator_from_json
    from calibrepro.metrics import compute_metrics

    probabilities = calibrator_from_json(fitted).predict_proba(night.logits)
    expected = compute_metrics(probabilities, night.labels, ["nll"], bins=15)["nll"]
    [value] = [float(r["value"]) for r in rows
               if (r["dataset"], r["model"], r["method"], r["metric"]) == ("night", "hub", "histogram_binning", "nll")]
    assert value == pytest.approx(expected, rel=1e-9)
    assert not (work / layout.calibrator("night", "hub", "histogram_binning", 0)).exists()  # nothing is fitted on the shifted set
    assert "night" in (work / layout.table("nll", "md")).read_text()
