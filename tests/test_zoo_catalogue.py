"""The pins as data: every pin complete, `calibrepro models`, the schema's source enum, the generated docs."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

from calibrepro.cli import main
from calibrepro.config import ConfigError, load_schema, validate_config
from calibrepro.download import parse_checksum
from calibrepro.zoo import PRETRAINED_SOURCES, SOURCES, get_source
from calibrepro.zoo._pretrained import PretrainedSource
from calibrepro.zoo.catalogue import catalogue, resources_table, update_doc

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DOC = ROOT / "docs" / "model-sources.md"
NUM_CLASSES = {"cifar10": 10, "cifar100": 100, "imagenet": 1000}
SPDX = {"Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "MIT"}
SETTINGS = {"datasets": {}, "downloads": {"dir": "x", "mirrors": {}},
            "inference": {"device": "cpu", "batch_size": 8, "workers": 0, "amp": False}}


def all_pins():
    return [(name, key, pin) for name in PRETRAINED_SOURCES for key, pin in get_source(name).PINS.items()]


def test_pretrained_sources_are_exactly_the_registered_pretrained_classes():
    def source_class(name):
        module, cls = SOURCES[name].split(":")
        return getattr(importlib.import_module(module), cls)

    assert list(PRETRAINED_SOURCES) == [name for name in SOURCES if issubclass(source_class(name), PretrainedSource)]


@pytest.mark.parametrize("source_name", PRETRAINED_SOURCES)
def test_every_pin_has_licence_checksum_preprocessing_and_published_accuracy(source_name):
    source = get_source(source_name)
    assert source.PINS
    for (dataset, name), pin in source.PINS.items():
        where = f"{source_name}:{dataset}/{name}"
        assert (pin.dataset, pin.name) == (dataset, name), where
        assert pin.num_classes == NUM_CLASSES[dataset], where
        assert pin.licence in SPDX, where
        form, value = parse_checksum(pin.weights.checksum)
        assert form in {"sha256", "sha256-prefix", "unpinned"}, where
        if form == "sha256-prefix":  # the prefix is the hash in the file's name (torch.hub's convention)
            assert re.search(rf"-{value}\.\w+$", pin.weights.url), where
        assert all(parse_checksum(item.checksum)[0] == "sha256" for item in pin.code), where
        assert pin.weights.url.startswith("https://") and pin.weights.path.startswith(f"weights/{source_name}/")
        prep = pin.preprocessing
        assert len(prep["mean"]) == len(prep["std"]) == 3, where
        assert all(0 < v < 1 for v in [*prep["mean"], *prep["std"]]), where
        if dataset == "imagenet":
            assert {"input_size", "crop_pct", "interpolation"} <= set(prep), where
        else:
            assert prep["transform"] == "ToTensor, Normalize", where
        # all four sources publish a top-1 for every model they pin
        assert 50 < pin.published_top1 < 100 and pin.published_in, where
        for job in (pin.resources or {}, source.RESOURCES[dataset]):
            for kind in job:
                assert kind in {"gpu", "cpu"} and set(job[kind]) == {"mem_mb", "runtime"}, where
                assert all(isinstance(v, int) and v > 0 for v in job[kind].values()), where


def test_published_accuracies_are_the_sources_own_numbers():
    """Spot checks against the documents named in published_in (READMEs at the pinned commits, timm's csv)."""
    published = {(s, d, m): pin.published_top1 for s, (d, m), pin in all_pins()}
    assert published[("akamaster", "cifar10", "resnet56")] == 93.39  # 100 - 6.61 % test error
    assert published[("chenyaofo", "cifar100", "resnet20")] == 68.83
    assert published[("chenyaofo", "cifar10", "repvgg_a2")] == 94.98
    assert published[("huyvnphan", "cifar10", "densenet121")] == 94.06
    assert published[("timm", "imagenet", "tf_efficientnet_b8")] == 85.384
    assert len(published) == 6 + 38 + 13 + 4


def test_resources_come_from_the_pin_where_it_has_its_own():
    source = get_source("akamaster")
    spec = {"source": "akamaster"}
    assert source.resources("cifar10", "resnet1202", spec, SETTINGS)["runtime"] == 180
    assert source.resources("cifar10", "resnet20", spec, SETTINGS)["runtime"] == 30
    assert source.resources("cifar10", "r1202", {**spec, "name": "resnet1202"}, SETTINGS)["runtime"] == 180


def test_models_command_lists_every_pin_with_its_published_accuracy(capsys):
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| source | data set | model | licence | published top-1 (%) | weights pinned by | dropout (mc_dropout) |"
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    pins = all_pins()
    assert len(rows) == len(pins)
    listed = {(row[0], row[1], row[2]): row for row in rows}
    for source, (dataset, model), pin in pins:
        row = listed[(source, dataset, model)]
        assert row[3] == pin.licence
        assert float(row[4]) == pin.published_top1
        assert row[6] == (f"{pin.dropout:g}" if pin.dropout else "-")
        assert row[5] == parse_checksum(pin.weights.checksum)[0]
    assert listed[("huyvnphan", "cifar10", "vgg13_bn")][4] == "94.22"
    assert listed[("chenyaofo", "cifar100", "vgg16_bn")][4] == "74.00"  # as printed, not 74.0
    assert [row[2] for row in rows[:6]] == ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110", "resnet1202"]


def test_models_command_filters(capsys):
    assert main(["models", "--source", "timm"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split("|")[3].strip() for row in rows] == ["mobilenetv2_120d", "repvgg_b3", "tf_efficientnet_b8", "vgg19_bn"]
    assert main(["models", "--dataset", "cifar100"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert len(rows) == 19 and all(row.startswith("| chenyaofo | cifar100 |") for row in rows)
    assert main(["models", "--source", "huyvnphan", "--dataset", "cifar100"]) == 1
    assert "no pinned model of source huyvnphan for data set 'cifar100'; data sets: cifar10" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["models", "--source", "logits"])  # not a source of pinned models
    assert main(["models", "--source", "timm", "--filter", "convnext_tiny.fb_in22k"]) == 0
    assert "convnext_tiny.fb_in22k_ft_in1k" in capsys.readouterr().out.split()
    assert main(["models", "--source", "torchvision", "--filter", "resnet50"]) == 0
    assert "resnet50.IMAGENET1K_V2" in capsys.readouterr().out.split()


def test_schema_source_enum_is_the_registry():
    schema = load_schema(SCHEMA_FILE)
    model = schema["$defs"]["model"]
    assert model["properties"]["source"]["enum"] == list(SOURCES)
    branches = [b["if"]["properties"]["source"] for b in model["allOf"]]
    assert {"enum": list(PRETRAINED_SOURCES)} in branches
    raw = yaml.safe_load(SCHEMA_FILE.read_text())["$defs"]["model"]
    assert "enum" not in raw["properties"]["source"]  # no second list in the YAML that could go stale
    assert "x-enum-from" not in str(schema)


def test_schema_validates_sources_from_the_registry(monkeypatch):
    schema = load_schema(SCHEMA_FILE)
    config = {"models": {"imagenet": {"b8": {"source": "timm", "name": "tf_efficientnet_b8", "batch_size": 32}}}}
    assert validate_config(config, schema)["models"]["imagenet"]["b8"]["batch_size"] == 32
    # the pretrained sources' branch applies: it allows exactly its options
    with pytest.raises(ConfigError, match=r"models.imagenet.b8: unknown key\(s\) 'nme' \(allowed: batch_size, file, mc_dropout, mc_seed, name, sha256, source\)"):
        validate_config({"models": {"imagenet": {"b8": {"source": "timm", "nme": "x"}}}}, schema)
    with pytest.raises(ConfigError, match="'tim' is not one of logits, train, akamaster, chenyaofo, huyvnphan, timm"):
        validate_config({"models": {"imagenet": {"b8": {"source": "tim"}}}}, schema)
    # a source added to the registry is accepted without editing the YAML
    monkeypatch.setitem(SOURCES, "mine", "calibrepro.zoo.byo:BringYourOwnLogits")
    validate_config({"models": {"d": {"m": {"source": "mine"}}}}, load_schema(SCHEMA_FILE))


def test_unknown_registry_in_the_schema_fails(tmp_path):
    path = tmp_path / "schema.yaml"
    path.write_text("properties: {source: {x-enum-from: calibrepro.zoo.NOPE}}\n")
    with pytest.raises(ValueError, match="schema.yaml: x-enum-from: 'calibrepro.zoo.NOPE' is not one of"):
        load_schema(path)


def test_doc_tables_are_generated_from_the_pins():
    text = DOC.read_text(encoding="utf-8")
    assert update_doc(text) == text, "run: python -m calibrepro.zoo.catalogue docs/model-sources.md"
    assert resources_table() in text
    assert len(catalogue()) == len(all_pins())
    with pytest.raises(ValueError, match="no '<!-- BEGIN catalogue -->'"):
        update_doc("no markers")


def test_every_hash_in_the_doc_is_a_pin_and_every_full_pin_is_in_the_doc():
    text = DOC.read_text(encoding="utf-8")
    from calibrepro.evaluation_sets import CIFAR10_1

    downloads = [item for _, _, pin in all_pins() for item in pin.downloads()] + list(CIFAR10_1.values())
    full = {parse_checksum(item.checksum)[1] for item in downloads if item.checksum.startswith("sha256:")}
    assert set(re.findall(r"\b[0-9a-f]{64}\b", text)) == full
    prefixes = {parse_checksum(pin.weights.checksum)[1] for _, _, pin in all_pins()
                if pin.weights.checksum.startswith("sha256-prefix:")}
    named = set(re.findall(r"-([0-9a-f]{8})(?:\.\w+)?`", text)) | set(re.findall(r"sha256-prefix:([0-9a-f]{8})", text))
    assert named and named <= prefixes
    for _, (dataset, model), pin in all_pins():
        if dataset == "imagenet":
            assert f"| {model} | `{pin.architecture}` | {pin.weights.url} |" in text
