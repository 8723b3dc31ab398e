"""The `regression:` part of the configuration: defaults, a regression-only config, messages naming the key."""

from __future__ import annotations

import pytest

from calibrepro.config import REGRESSORS, ConfigError, load_schema, regression_keys, validate_config
from workflow_helpers import ROOT

SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")


def test_a_regression_only_config_gets_every_kind_and_recalibrator():
    config = validate_config({"regression": {"concrete": {"source": "table", "path": "c.csv", "target": "strength"}}}, SCHEMA)
    assert config["models"] == {}
    entry = config["regression"]["concrete"]
    assert entry["splits"] == 5 and entry["seed"] == 0 and entry["calibration_fraction"] == 0.2
    assert entry["recalibrators"] == ["uncalibrated", "isotonic", "isotonic_two_sided", "std_scaling"]
    assert regression_keys(config) == [("concrete", kind) for kind in REGRESSORS]
    own = validate_config({"regression": {"mine": {"source": "predictions", "path": "p.npz"}}}, SCHEMA)
    assert regression_keys(own) == [("mine", "predictions")]


@pytest.mark.parametrize(
    ("regression", "message"),
    [
        ({}, "regression: {} should be non-empty"),
        ({"c": {"source": "table", "path": "c.csv"}}, "regression.c: 'target' is a required property"),
        ({"c": {"source": "uci_wine", "models": {"mc_dropout": {"members": 3}}}},
         "regression.c.models.mc_dropout: unknown key(s) 'members'"),
        ({"c": {"source": "predictions", "path": "p.npz", "models": {"ensemble": {}}}},
         "regression.c: key(s) 'models' not allowed with source 'predictions'; remove them"),
        ({"c": {"source": "uci_wine", "path": "w.csv"}}, "regression.c: key(s) 'path' not allowed with source 'uci_wine'"),
        ({"c": {"source": "uci_crime", "sha256": "0" * 64}},
         "regression.c: key(s) 'sha256' not allowed with source 'uci_crime'"),
        ({"c": {"source": "energy", "sha256": "ABC"}}, "regression.c.sha256: 'ABC' does not match"),
        ({"c": {"source": "uci_wine", "recalibrators": ["platt"]}}, "regression.c.recalibrators.0: 'platt' is not one of"),
        ({"c": {"source": "uci_wine", "test_fraction": 1.5}}, "regression.c.test_fraction: 1.5 is greater than or equal"),
        ({"bad name": {"source": "diabetes"}}, "regression: 'bad name' does not match"),
    ],
)
def test_bad_regression_config_names_the_key(regression, message):
    with pytest.raises(ConfigError) as error:
        validate_config({"regression": regression}, SCHEMA)
    assert message in str(error.value)


def test_a_model_of_another_name_says_its_kind():
    models = {"mc_dropout": {"noise": "none"}, "mc_dropout_fitted": {"kind": "mc_dropout", "tau": 4.0}}
    config = validate_config({"regression": {"w": {"source": "uci_wine", "models": models}}}, SCHEMA)
    assert regression_keys(config) == [("w", "mc_dropout"), ("w", "mc_dropout_fitted")]
    for models, message in [
        ({"mine": {"epochs": 3}}, "regression.w.models.mine: 'kind' is a required property"),
        ({"mine": {"kind": "ensemble", "tau": 1.0}}, "regression.w.models.mine: unknown key(s) 'tau'"),
        ({"mine": {"kind": "gp"}}, "regression.w.models.mine.kind: 'gp' is not one of mc_dropout"),
        ({"mc_dropout": {"kind": "ensemble"}}, "regression.w.models.mc_dropout.kind: 'mc_dropout' was expected"),
        ({"mc_dropout": {"noise": "zero"}}, "regression.w.models.mc_dropout.noise: 'zero' is not one of fitted, none"),
    ]:
        with pytest.raises(ConfigError) as error:
            validate_config({"regression": {"w": {"source": "uci_wine", "models": models}}}, SCHEMA)
        assert message in str(error.value)


def test_bca_intervals_are_refused_with_a_regression_part():
    with pytest.raises(ConfigError, match="uncertainty.interval: bca has no jackknife for the regression"):
        validate_config({"regression": {"c": {"source": "diabetes"}}, "uncertainty": {"interval": "bca"}}, SCHEMA)
    config = validate_config({"regression": {"c": {"source": "diabetes"}}, "uncertainty": {"interval": "basic"}}, SCHEMA)
    assert config["uncertainty"]["interval"] == "basic"


def test_classification_config_is_unchanged():
    config = validate_config({"models": {"d": {"m": {"source": "logits", "path": "m.npz"}}}}, SCHEMA)
    assert config["regression"] == {}


def test_config_kinds_are_the_models_kinds():
    from calibrepro.regression.models import KINDS  # torch: not imported by the config itself

    assert REGRESSORS == KINDS
