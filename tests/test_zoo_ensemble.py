"""Source ``ensemble``: log of the mean of the members' softmax probabilities, validated members."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax

from calibrepro.averaging import log_mean_softmax
from calibrepro.config import ConfigError, load_schema, validate_config
from calibrepro.io import LogitsFileError, load_logits, save_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from calibrepro.zoo.ensemble import check_ensembles

SCHEMA = Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"


def members(tmp_path, n=50, k=4, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    paths = {}
    for i, name in enumerate(["a", "b", "c"]):
        logits = (rng.normal(size=(n, k)) * (i + 1) * 3).astype(np.float32)
        paths[name] = str(tmp_path / f"{name}.npz")
        save_logits(paths[name], logits, labels, {"source": "train", "name": name})
    return paths, labels


def request(paths, names=("a", "b", "c")):
    spec = {"source": "ensemble", "members": list(names)}
    return LogitsRequest("digits", "ens", spec, {"downloads": {"dir": "x"}}, {m: paths[m] for m in names})


def test_cache_logits_is_log_of_mean_probability(tmp_path):
    paths, labels = members(tmp_path)
    get_source("ensemble").cache_logits(request(paths), tmp_path / "ens.npz")
    out = load_logits(tmp_path / "ens.npz")
    probs = [softmax(load_logits(paths[m]).logits.astype(np.float64), axis=1) for m in "abc"]
    expected = np.log(np.mean(probs, axis=0))
    np.testing.assert_allclose(out.logits, expected, rtol=1e-6, atol=1e-6)
    assert out.logits.dtype == np.float32 and np.array_equal(out.labels, labels)
    np.testing.assert_allclose(softmax(out.logits.astype(np.float64), axis=1), np.mean(probs, axis=0), atol=1e-6)
    assert out.metadata["members"] == ["a", "b", "c"]
    assert out.metadata["member_provenance"]["b"]["metadata"] == {"source": "train", "name": "b"}
    assert len(out.metadata["member_provenance"]["a"]["sha256"]) == 64


def test_log_mean_softmax_never_underflows():
    z = np.array([[0.0, -2000.0], [0.0, -3000.0]])
    out = log_mean_softmax([z, z + np.array([0.0, 1000.0])])
    assert np.isfinite(out).all()
    np.testing.assert_allclose(np.exp(out).sum(axis=1), 1.0)


def test_logits_inputs_are_the_members_cached_logits():
    spec = {"source": "ensemble", "members": ["a", "b"]}
    inputs = get_source("ensemble").logits_inputs("cifar100", "ens", spec, {"downloads": {"dir": "d"}, "results": "out"})
    assert inputs == {"a": "out/logits/cifar100/a.npz", "b": "out/logits/cifar100/b.npz"}
    # other sources keep their downloads as inputs
    demo = get_source("train").logits_inputs("digits", "m", {"source": "train"}, {"downloads": {"dir": "d"}})
    assert demo == {}


def test_members_with_different_labels_are_refused(tmp_path):
    paths, labels = members(tmp_path)
    other = load_logits(paths["b"])
    save_logits(paths["b"], other.logits, (labels + 1) % 4)
    with pytest.raises(LogitsFileError, match=r"models\.digits\.ens\.members: 'b' and 'a' have different labels"):
        get_source("ensemble").cache_logits(request(paths), tmp_path / "ens.npz")
    assert not (tmp_path / "ens.npz").exists()


def test_members_with_different_shapes_are_refused(tmp_path):
    paths, labels = members(tmp_path)
    save_logits(paths["c"], np.zeros((50, 5), dtype=np.float32), labels)
    with pytest.raises(LogitsFileError, match=r"'c' has logits of shape \(50, 5\)"):
        get_source("ensemble").cache_logits(request(paths), tmp_path / "ens.npz")


@pytest.mark.parametrize(
    "ensemble, message",
    [
        (["a", "ens"], r"models\.d\.ens\.members: an ensemble cannot contain itself"),
        (["a", "zz"], r"models\.d\.ens\.members: 'zz' is not a model of data set 'd'"),
        (["a", "other_ens"], r"'other_ens' is itself an ensemble"),
    ],
)
def test_check_ensembles_names_the_key(ensemble, message):
    models = {
        "d": {
            "a": {"source": "train"},
            "b": {"source": "train"},
            "other_ens": {"source": "ensemble", "members": ["a", "b"]},
            "ens": {"source": "ensemble", "members": ensemble},
        },
        "e": {"zz": {"source": "train"}},
    }
    with pytest.raises(ModelSourceError, match=message):
        check_ensembles(models)
    with pytest.raises(ConfigError, match=message):  # the configuration's validation checks the members too
        validate_config({"models": models}, load_schema(SCHEMA))


def test_schema_requires_two_members():
    config = {"models": {"d": {"a": {"source": "train"}, "ens": {"source": "ensemble", "members": ["a"]}}}}
    with pytest.raises(ConfigError, match=r"models\.d\.ens\.members"):
        validate_config(config, load_schema(SCHEMA))


# ------------------------------------------------------------------------- through the workflow
def test_ensemble_through_snakemake(tmp_path):
    """Two `logits` models and their ensemble: the ensemble's archive is built from theirs and calibrated."""
    from workflow_helpers import run_snakemake, synthetic_logits, write_config

    labels = np.random.default_rng(0).integers(0, 4, 300)
    synthetic_logits(tmp_path / "a.npz", labels=labels, seed=1)
    synthetic_logits(tmp_path / "b.npz", labels=labels, seed=2)
    config = {
        "models": {
            "mydata": {
                "a": {"source": "logits", "path": str(tmp_path / "a.npz")},
                "b": {"source": "logits", "path": str(tmp_path / "b.npz")},
                "ab": {"source": "ensemble", "members": ["a", "b"]},
            }
        },
        "calibrators": ["uncalibrated", "ensemble_temperature_scaling", "matrix_scaling_odir"],
        "calibrator_options": {"matrix_scaling_odir": {"lambdas": [0.1], "mus": [0.1], "device": "cpu"}},
        "metrics": ["accuracy", "nll"],
    }
    result = run_snakemake(tmp_path, "--configfile", str(write_config(tmp_path / "c.yaml", config)))
    assert result.returncode == 0, result.stderr[-3000:]
    ensemble = load_logits(tmp_path / "results/c/logits/mydata/ab.npz")
    members_probs = [softmax(load_logits(tmp_path / f"{m}.npz").logits.astype(np.float64), axis=1) for m in "ab"]
    np.testing.assert_allclose(
        softmax(ensemble.logits.astype(np.float64), axis=1), np.mean(members_probs, axis=0), atol=1e-6
    )
    assert ensemble.metadata["members"] == ["a", "b"]
    fitted = (tmp_path / "results/c/calibrators/mydata/ab/matrix_scaling_odir/seed0.json").read_text()
    assert '"lambda": 0.1' in fitted
    assert "MS-ODIR" in (tmp_path / "reports/c/tables/nll.md").read_text()


def test_bad_ensemble_member_fails_before_any_job(tmp_path):
    from workflow_helpers import run_snakemake, synthetic_logits, write_config

    synthetic_logits(tmp_path / "a.npz")
    config = {
        "models": {
            "mydata": {
                "a": {"source": "logits", "path": str(tmp_path / "a.npz")},
                "ab": {"source": "ensemble", "members": ["a", "nope"]},
            }
        }
    }
    result = run_snakemake(tmp_path, "--configfile", str(write_config(tmp_path / "c.yaml", config)))
    assert result.returncode != 0
    assert "models.mydata.ab.members: 'nope' is not a model of data set 'mydata'" in result.stdout + result.stderr
    assert not (tmp_path / "results").exists()
