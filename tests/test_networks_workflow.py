"""One Snakemake run of a user's configuration: networks by name on image folders, one shifted, offline.

The configuration of docs/model-sources.md ("One run"), with tiny networks of the same sources: a timm
tag and an ``hf-hub:`` repository (config.json + safetensors) from a local hub (``HF_ENDPOINT``), a
torchvision weights enum through ``downloads.mirrors``, a checkpoint file; an image folder and a
shifted folder (``calibrate_on``) with another class balance. The command is the card's,
``snakemake --cores 2 --configfile their.yaml``, with no code of the user's.
"""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
import torch
import yaml

from calibrepro.io import load_logits
from calibrepro.layout import Layout
from servers import REPO_ROOT, sha256_hex
from test_zoo_network import safetensors_bytes, write_folder
from workflow_helpers import run_snakemake, write_config

CLASSES = ["n01440764", "n01443537", "n01484850"]
#: the documented model key -> the tiny stand-in of the same source the test runs
TINY = {
    "convnext": {"source": "timm", "name": "test_resnet.r160_in1k"},
    "hub": {"source": "timm", "name": "hf-hub:someone/tiny-vit"},
    "r50": {"source": "torchvision", "name": "squeezenet1_1.IMAGENET1K_V1"},
    "r18": {"source": "checkpoint", "architecture": "test_efficientnet", "path": "weights/tiny.pth", "num_classes": 3,
            "preprocessing": {"input_size": [3, 48, 48], "crop_pct": 1.0}},
}


def documented_config() -> dict:
    """The YAML block of docs/model-sources.md's "One run" section."""
    text = (REPO_ROOT / "docs" / "model-sources.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- BEGIN one-run config.*?-->\n```yaml\n(.*?)```\n<!-- END one-run config -->", text, re.S)
    assert found, "docs/model-sources.md lost its one-run configuration block"
    return yaml.safe_load(found.group(1))


def serve_networks(server, work) -> dict:
    """Weights of the tiny networks: on the local hub, behind the torchvision mirror, and as a checkpoint file."""
    import timm
    import torchvision

    torch.manual_seed(0)
    tag = timm.create_model("test_resnet", num_classes=1000).eval()
    server.add_file("/timm/test_resnet.r160_in1k/resolve/main/model.safetensors", safetensors_bytes(tag))
    vit = timm.create_model("test_vit", num_classes=1000).eval()
    hub_config = {"architecture": "test_vit", "num_classes": 1000,
                  "pretrained_cfg": {"input_size": [3, 160, 160], "interpolation": "bicubic", "crop_pct": 0.95,
                                     "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}
    server.add_file("/someone/tiny-vit/resolve/main/config.json", json.dumps(hub_config).encode())
    server.add_file("/someone/tiny-vit/resolve/main/model.safetensors", safetensors_bytes(vit))
    squeeze = torchvision.models.get_model("squeezenet1_1", weights=None, num_classes=1000).eval()
    buffer = io.BytesIO()
    torch.save(squeeze.state_dict(), buffer)
    server.add_file("/torchvision/squeezenet1_1-b8a52dc0.pth", buffer.getvalue())
    own = timm.create_model("test_efficientnet", num_classes=3).eval()
    (work / "weights").mkdir(parents=True)
    torch.save(own.state_dict(), work / "weights" / "tiny.pth")
    return {"torchvision_sha256": sha256_hex(buffer.getvalue()), "modules": {"convnext": tag, "hub": vit}}


def test_one_run_of_named_networks_on_folders_with_a_shifted_folder(tmp_path, file_server, monkeypatch):
    documented = documented_config()
    work = tmp_path / "work"
    served = serve_networks(file_server, work)
    write_folder(work / "data" / "shapes", dict(zip(CLASSES, [8, 8, 8])), seed=1, size=28)
    write_folder(work / "data" / "shapes_night", dict(zip(CLASSES, [9, 3, 2])), seed=2, size=28)

    config = json.loads(json.dumps(documented))  # the documented configuration, with the tiny networks
    assert {key: spec["source"] for key, spec in config["models"]["shapes"].items()} == {
        key: spec["source"] for key, spec in TINY.items()
    }
    config["models"]["shapes"] = {**TINY, "r50": {**TINY["r50"], "sha256": served["torchvision_sha256"]}}
    config["downloads"] = {"mirrors": {"https://download.pytorch.org/models/": file_server.url("/torchvision/")},
                           "retries": 0}
    # histogram binning and isotonic: random networks carry no signal for temperature scaling to fit
    config.update(calibrators=["uncalibrated", "histogram_binning", "isotonic"], metrics=["accuracy", "nll", "ece"],
                  uncertainty={"enabled": False},
                  inference={"device": "cpu", "workers": 0, "batch_size": 8})
    configfile = write_config(work / "their.yaml", config)
    monkeypatch.setenv("HF_ENDPOINT", file_server.base)
    result = run_snakemake(work, "--configfile", str(configfile))
    assert result.returncode == 0, result.stderr[-4000:]

    layout = Layout.named("their")
    with open(work / layout.metrics, newline="") as handle:
        rows = list(csv.DictReader(handle))
    models = list(TINY)
    assert {(row["dataset"], row["model"]) for row in rows} == {(d, m) for d in ("shapes", "shapes_night") for m in models}
    assert {row["method"] for row in rows} == set(config["calibrators"])
    for model in models:
        day, night = (load_logits(work / layout.logits(d, model)) for d in ("shapes", "shapes_night"))
        assert day.logits.shape == (24, 3) and night.logits.shape == (14, 3), model
        assert np.bincount(night.labels).tolist() == [9, 3, 2] and night.metadata["classes"] == CLASSES
        assert day.metadata["output_columns"] == night.metadata["output_columns"] == [0, 1, 2]  # shapes' class_map
        assert day.metadata["weights"]["sha256"] == night.metadata["weights"]["sha256"]
    hub = load_logits(work / layout.logits("shapes", "hub")).metadata
    assert hub["architecture"] == "test_vit" and hub["preprocessing"]["timm_data_config"]["input_size"] == [3, 160, 160]
    assert load_logits(work / layout.logits("shapes", "r50")).metadata["weights"]["pin"] == (
        f"sha256:{served['torchvision_sha256']}"
    )
    recorded = json.loads((work / "results" / "downloads" / "recorded.json").read_text())
    assert set(recorded) == {"weights/hf-hub/timm/test_resnet.r160_in1k/model.safetensors",
                             "weights/hf-hub/someone/tiny-vit/config.json",
                             "weights/hf-hub/someone/tiny-vit/model.safetensors"}
    for path in ("/someone/tiny-vit/resolve/main/model.safetensors", "/torchvision/squeezenet1_1-b8a52dc0.pth"):
        assert file_server.count(path) == 1, path  # one download serves the set and its shifted set

    # the timm tag's logits are its network on the folder's images, through the tag's own preprocessing
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    tag = served["modules"]["convnext"]
    transform = create_transform(**resolve_data_config({}, model=tag), is_training=False)
    paths = sorted(str(p) for p in (work / "data" / "shapes_night").rglob("*.*"))
    with torch.inference_mode():
        expected = tag(torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])).numpy()[:, :3]
    night = load_logits(work / layout.logits("shapes_night", "convnext"))
    np.testing.assert_allclose(night.logits, expected, rtol=1e-4, atol=1e-4)
    assert "shapes_night" in (work / layout.table("ece", "md")).read_text()

    # the shifted rows are shapes' calibrator, unchanged, on every shapes_night image; nothing is fitted on it
    from calibrepro.calibrators import calibrator_from_json
    from calibrepro.metrics import compute_metrics

    fitted = json.loads((work / layout.calibrator("shapes", "convnext", "isotonic", 0)).read_text())
    value = compute_metrics(calibrator_from_json(fitted).predict_proba(night.logits), night.labels, ["nll"], bins=15)
    [row] = [r for r in rows if (r["dataset"], r["model"], r["method"], r["metric"]) ==
             ("shapes_night", "convnext", "isotonic", "nll")]
    assert float(row["value"]) == pytest.approx(value["nll"], rel=1e-9)
    assert not (work / layout.calibrator("shapes_night", "convnext", "isotonic", 0)).exists()

