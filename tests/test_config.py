"""Config validation: defaults, and errors that name the offending key."""

from pathlib import Path

import pytest
import yaml

from calibrepro.config import ConfigError, load_schema, model_keys, validate_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")


def minimal(**extra):
    return {"models": {"mine": {"net": {"source": "logits", "path": "net.npz"}}}, **extra}


def test_embedded_default_validates_and_lists_its_models():
    config = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), SCHEMA)
    assert model_keys(config) == [
        ("digits", "logistic_regression"),
        ("digits", "mlp_overconfident"),
        ("digits", "mlp_label_smoothing"),
        ("digits", "mlp_dropout"),
        ("digits", "mlp_mc_dropout"),
        ("digits", "ensemble"),
    ]


def test_defaults_are_filled_in():
    config = validate_config(minimal(), SCHEMA)
    assert config["split"] == {"seeds": [0], "calibration_fraction": 0.5}
    assert config["bins"] == 15
    assert config["calibrators"][0] == "uncalibrated" and len(config["calibrators"]) == 6
    # a config that does not mention `uncertainty` gets the bootstrap, and its tables mark ties
    assert config["report"] == {"language": "en", "published": None, "figures": {}, "mark_ties": True,
                                "cells": "mean_sd", "reliability_counts": True,
                                "reliability_intervals": False, "export_probabilities": False}
    assert config["uncertainty"]["enabled"] is True and config["uncertainty"]["interval"] == "auto"
    off = validate_config({**minimal(), "uncertainty": {"enabled": False}}, SCHEMA)
    assert off["report"]["mark_ties"] is False
    assert config["inference"]["device"] == "auto"
    assert config["datasets"]["digits"] == {"evaluation_fraction": 0.5, "seed": 0}


def test_rank_metric_defaults_to_ece_or_the_first_metric():
    assert validate_config(minimal(), SCHEMA)["uncertainty"]["rank_metric"] == "ece"
    config = validate_config(minimal(metrics=["accuracy", "nll"]), SCHEMA)  # no ECE: the ranks need no setting
    assert config["uncertainty"]["rank_metric"] == "accuracy"


def test_input_is_not_modified():
    config = minimal()
    validate_config(config, SCHEMA)
    assert config == minimal()


@pytest.mark.parametrize(
    "config, expected",
    [
        (minimal(bnis=15), "<top level>: unknown key(s) 'bnis'"),
        (minimal(split={"seedz": [0]}), "split: unknown key(s) 'seedz' (allowed: calibration_fraction, seeds)"),
        (minimal(split={"calibration_fraction": 1.5}), "split.calibration_fraction: 1.5 is greater than or equal"),
        (minimal(calibrators=["platt"]), "calibrators.0: 'platt' is not one of uncalibrated"),
        (minimal(metrics=["ece", "ece"]), "metrics: ['ece', 'ece'] has non-unique elements"),
        (minimal(report={"language": "de"}), "report.language: 'de' is not one of ru, en"),
        (
            {"models": {"digits": {"m": {"source": "train", "epoch": 3}}}},
            "models.digits.m: unknown key(s) 'epoch' (allowed: augmentation, batch_size, curves, dropout, ensemble, epochs, hidden",
        ),
        ({"models": {"d": {"m": {"source": "logits"}}}}, "models.d.m: 'path' is a required property"),
        ({"models": {"d": {"m": {"source": "hub"}}}}, "models.d.m.source: 'hub' is not one of logits, train"),
        ({"models": {"d": {"m": {"path": "x.npz"}}}}, "models.d.m: 'source' is a required property"),
        ({"models": {}}, "models: {} should be non-empty"),
        ({"split": {}}, "<top level>: nothing to run: give models (classifiers: {dataset: {model: entry}}), regression"),
        (  # a typo of a built-in set is not read as an image folder missing its root
            minimal(datasets={"imagnet": {"root": "/data/imagenet"}}),
            "datasets.imagnet: not a built-in data set (cifar10, cifar100, cifar10_1, digits, imagenet) and not "
            "declared as a folder of images; did you mean 'imagenet'? a data set of your own needs source: imagefolder",
        ),
        (minimal(datasets={"shapes": {"source": "folder", "root": "x"}}), "datasets.shapes: not a built-in data set"),
        (
            {"models": {"cifar100": {"m": {"source": "chenyaofo", "name": "resnet20"}}},
             "datasets": {"cifar10_1": {"calibrate_on": "cifar100"}}},
            "datasets.cifar10_1.calibrate_on: CIFAR-10.1 has CIFAR-10's ten classes; it can only be calibrated on cifar10",
        ),
    ],
)
def test_errors_name_the_key(config, expected):
    with pytest.raises(ConfigError) as error:
        validate_config(config, SCHEMA)
    assert expected in str(error.value)


def test_a_config_without_models_or_regression_says_so_once_and_names_only_keys_it_wrote():
    with pytest.raises(ConfigError) as error:
        validate_config({"metrics": ["ece", "nlll"]}, SCHEMA)
    lines = str(error.value).splitlines()[1:]
    assert len(lines) == 2, lines
    assert lines[0].startswith("  <top level>: nothing to run:") and "--configfile replaces" in lines[0]
    assert lines[1].startswith("  metrics.1: 'nlll' is not one of")
    with pytest.raises(ConfigError, match="regression: {} should be non-empty"):  # written, so named
        validate_config({"regression": {}}, SCHEMA)


def test_named_figures_must_point_to_configured_models():
    with pytest.raises(ConfigError, match=r"report.figures.fig2: mine/other is not a configured model"):
        validate_config(minimal(report={"figures": {"fig2": "mine/other"}}), SCHEMA)
    config = validate_config(minimal(report={"figures": {"fig2": "mine/net"}}), SCHEMA)
    assert config["report"]["figures"] == {"fig2": "mine/net"}


def test_calibrator_and_metric_names_come_from_their_registries():
    """The schema lists exactly the registered calibrators and metrics (declared once, in their modules)."""
    from calibrepro.calibrators import CALIBRATORS
    from calibrepro.metrics import METRICS

    properties = SCHEMA["properties"]
    assert properties["calibrators"]["items"]["enum"] == list(CALIBRATORS)
    assert properties["metrics"]["items"]["enum"] == list(METRICS)
    assert "x-enum-from" not in properties["calibrators"]["items"]


def test_a_later_config_file_removes_entries_by_setting_them_to_null():
    """Snakemake merges --configfile files key by key; null is how the later file deletes an entry."""
    import yaml

    from servers import REPO_ROOT

    config = yaml.safe_load((REPO_ROOT / "config/blog.yaml").read_text())
    config["models"]["mnist"] = None
    config["report"]["figures"]["blog_mnist_lenet5"] = None
    config["regression"] = None
    config["datasets"] = {"cifar10": {"source": "imagefolder", "root": "jpg", "calibration_pool": 5000}}
    validated = validate_config(config, SCHEMA)
    assert list(validated["models"]) == ["cifar10"] and "blog_mnist_lenet5" not in validated["report"]["figures"]
    assert not validated.get("regression")
    config = yaml.safe_load((REPO_ROOT / "config/blog.yaml").read_text())
    config["models"]["mnist"]["lenet5"] = None  # the data set's last model: the data set goes too
    assert "mnist" not in validate_config({**config, "report": {"figures": {}}}, SCHEMA)["models"]
    with pytest.raises(ConfigError, match="models.mnist"):
        validate_config({"models": {"mnist": {}}}, SCHEMA)  # written empty, not emptied: still an error
