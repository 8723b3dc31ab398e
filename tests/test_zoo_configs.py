"""config/thesis.yaml and config/akamaster.yaml: valid, complete, and planned by Snakemake without internet."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calibrepro.config import load_schema, model_keys, source_settings, validate_config
from calibrepro.zoo import get_source
from workflow_helpers import ROOT, run_snakemake, write_config

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
#: design.md section 1: the thesis's 32 models by data set and source
THESIS = {
    "cifar10": ("huyvnphan", ["densenet121", "densenet161", "densenet169", "googlenet", "inception_v3", "mobilenet_v2",
                              "resnet18", "resnet34", "resnet50", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]),
    "cifar100": ("chenyaofo", ["mobilenetv2_x0_5", "mobilenetv2_x1_0", "mobilenetv2_x1_4", "resnet20", "resnet32",
                               "resnet44", "resnet56", "shufflenetv2_x0_5", "shufflenetv2_x1_0", "shufflenetv2_x1_5",
                               "shufflenetv2_x2_0", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]),
    "imagenet": ("timm", ["mobilenetv2_120d", "repvgg_b3", "tf_efficientnet_b8", "vgg19_bn"]),
}


def load(name: str) -> dict:
    return validate_config(yaml.safe_load((ROOT / "config" / name).read_text()), load_schema(SCHEMA))


@pytest.mark.parametrize("name", ["thesis.yaml", "akamaster.yaml"])
def test_config_validates_and_every_model_resolves_to_a_pin(name):
    config = load(name)
    settings = source_settings(config, "results")
    downloads = {}
    for dataset, model in model_keys(config):
        spec = config["models"][dataset][model]
        source = get_source(spec["source"])
        source.pin(dataset, model, spec)
        if dataset != "imagenet":
            source.check(dataset, model, spec, settings)
        for item in source.downloads(dataset, model, spec, settings):
            assert downloads.setdefault(item.path, item) == item, f"two pins claim {item.path}"


def test_thesis_config_is_the_thesis():
    config = load("thesis.yaml")
    assert sum(len(models) for models in config["models"].values()) == 32
    for dataset, (source, models) in THESIS.items():
        assert sorted(config["models"][dataset]) == sorted(models)
        assert {spec["source"] for spec in config["models"][dataset].values()} == {source}
    assert config["split"] == {"seeds": [0], "calibration_fraction": 0.5}
    assert config["calibrators"] == ["uncalibrated", "histogram_binning", "isotonic", "temperature_scaling",
                                     "vector_scaling", "vector_scaling_bias"]
    assert {"accuracy", "brier", "ece", "mce", "nll"} <= set(config["metrics"]) and config["bins"] == 15
    assert config["report"]["figures"] == {"figure2": "cifar10/googlenet", "figure3": "cifar100/shufflenetv2_x0_5",
                                           "figure4": "imagenet/tf_efficientnet_b8"}
    assert config["datasets"]["imagenet"]["root"]  # a placeholder the user replaces
    assert config["inference"]["amp"] is False


def test_akamaster_config():
    config = load("akamaster.yaml")
    assert list(config["models"]) == ["cifar10"]
    assert sorted(config["models"]["cifar10"]) == ["resnet20", "resnet32", "resnet44", "resnet56"]


def test_snakemake_dry_run_plans_all_32_models_and_all_tables(tmp_path):
    workdir = tmp_path
    pytest.importorskip("snakemake")
    result = run_snakemake(workdir, "-n", "--configfile", str(ROOT / "config" / "thesis.yaml"), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout + result.stderr
    for dataset, (_, models) in THESIS.items():
        for model in models:
            assert f"results/thesis/logits/{dataset}/{model}.npz" in out
    for metric in ["accuracy", "brier", "ece", "mce", "nll"]:
        assert f"reports/thesis/tables/{metric}.tex" in out
    assert not (workdir / "results").exists()


def test_a_real_run_without_imagenet_fails_before_any_job(tmp_path):
    workdir = tmp_path
    """The ImageNet folder is checked when the workflow starts: nothing is downloaded before the error."""
    pytest.importorskip("snakemake")
    config = yaml.safe_load((ROOT / "config" / "thesis.yaml").read_text())
    config["datasets"]["imagenet"]["root"] = str(workdir / "empty")
    (workdir / "empty").mkdir()
    config["downloads"]["mirrors"] = {"https://": "http://127.0.0.1:9/unreachable/"}  # never reached
    path = write_config(Path(workdir) / "thesis.yaml", config)
    result = run_snakemake(workdir, "--configfile", str(path), timeout=300)
    assert result.returncode != 0
    assert "has no class folders" in result.stdout + result.stderr and "image-net.org" in result.stdout + result.stderr
    assert "Error: datasets.imagenet.root" in result.stderr and 'File "' not in result.stdout + result.stderr
    assert not (workdir / "results" / "downloads").exists()
