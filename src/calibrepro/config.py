"""The pipeline's configuration: validation against the JSON schema, defaults, and lookups."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Sequence

import jsonschema
import yaml

from calibrepro.calibrators import CALIBRATORS
from calibrepro.metrics import METRICS
from calibrepro.suggestions import closest_name
from calibrepro.training import ARCHITECTURES
from calibrepro.zoo import PRETRAINED_SOURCES, SOURCES


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and how to fix it."""


#: the registries a schema may take an enum from (``x-enum-from: <name>``)
REGISTRIES = {
    "calibrepro.zoo.SOURCES": SOURCES,
    "calibrepro.zoo.PRETRAINED_SOURCES": PRETRAINED_SOURCES,
    "calibrepro.calibrators.CALIBRATORS": CALIBRATORS,
    "calibrepro.metrics.METRICS": METRICS,
    "calibrepro.training.ARCHITECTURES": ARCHITECTURES,
}


def load_schema(path: str | Path) -> dict:
    """Read the YAML/JSON schema file, with every ``x-enum-from`` filled from its registry.

    Model sources (:mod:`calibrepro.zoo`), calibrators (:mod:`calibrepro.calibrators`) and metrics
    (:mod:`calibrepro.metrics`) are registered once, in their modules; the schema names the registry
    instead of repeating the list, so that a config is validated against exactly what the pipeline
    can run.
    """
    return _fill_enums(yaml.safe_load(Path(path).read_text(encoding="utf-8")), str(path))


def _fill_enums(node, where: str):
    """Replace ``{"x-enum-from": name}`` by ``{"enum": [names in the registry]}``, recursively."""
    if isinstance(node, list):
        return [_fill_enums(item, where) for item in node]
    if not isinstance(node, dict):
        return node
    filled = {key: _fill_enums(value, where) for key, value in node.items() if key != "x-enum-from"}
    if "x-enum-from" in node:
        name = node["x-enum-from"]
        if name not in REGISTRIES:
            raise ValueError(f"{where}: x-enum-from: {name!r} is not one of {', '.join(REGISTRIES)}")
        filled["enum"] = list(REGISTRIES[name])
    return filled


def _resolve(schema: dict, root: dict) -> dict:
    """Follow a local ``$ref`` ("#/$defs/name")."""
    while "$ref" in schema:
        node = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _fill_defaults(instance, schema: dict, root: dict) -> None:
    """Set every missing property that has a ``default`` in the schema, recursively."""
    schema = _resolve(schema, root)
    if not isinstance(instance, dict):
        return
    for key, subschema in schema.get("properties", {}).items():
        subschema = _resolve(subschema, root)
        if key not in instance and "default" in subschema:
            instance[key] = copy.deepcopy(subschema["default"])
        if key in instance:
            _fill_defaults(instance[key], subschema, root)
    entries = schema.get("additionalProperties")
    if isinstance(entries, dict):  # e.g. every data set of ``regression``
        for key in set(instance) - set(schema.get("properties", {})):
            _fill_defaults(instance[key], entries, root)


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    """One line naming the offending key, what is wrong and what is allowed."""
    where = _key_path(error)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(_resolve(error.schema, {}).get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"{where}: unknown key(s) {', '.join(map(repr, unknown))}{hint}"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator == "not" and isinstance(error.instance, dict):  # keys that do not go with the others
        banned = [key for key in _required_names(error.validator_value) if key in error.instance]
        source = f" with source {error.instance['source']!r}" if "source" in error.instance else ""
        return f"{where}: key(s) {', '.join(map(repr, banned))} not allowed{source}; remove them"
    if error.validator == "enum":
        return f"{where}: {error.instance!r} is not one of {', '.join(map(str, error.validator_value))}"
    return f"{where}: {error.message}"


def _nothing_to_run(error: jsonschema.ValidationError, written: set) -> list[str]:
    """The top level's ``anyOf`` failed: neither models nor regression data sets; what to write.

    Its branches' errors are kept only for keys the configuration wrote (``regression: {}``).
    """
    lines = [
        "<top level>: nothing to run: give models (classifiers: {dataset: {model: entry}}), regression "
        "(regression data sets) or both. A --configfile replaces the demo's config/config.yaml instead of "
        "adding to it, so copy what you need from there or from config/README.md"
    ]
    return lines + [_describe(leaf) for leaf in _most_specific(error.context) if leaf.absolute_path and leaf.absolute_path[0] in written]


def _required_names(schema: dict) -> list[str]:
    """The property names a (``not``) schema requires, through ``anyOf``."""
    names = list(schema.get("required", []))
    for branch in schema.get("anyOf", []):
        names += _required_names(branch)
    return names


def _is_top_level_any_of(error: jsonschema.ValidationError) -> bool:
    """The schema's top-level ``anyOf``: a configuration names models, regression data sets or both."""
    return error.validator == "anyOf" and not error.absolute_path


def _most_specific(errors):
    """Prefer errors from inside if/then branches (they name the concrete key) over their summaries.

    The top level's ``anyOf`` (models, regression or both) stays whole: its branches' errors name
    keys the user may never have written (:func:`_nothing_to_run`).
    """
    leaves = []
    for error in errors:
        if error.context and not _is_top_level_any_of(error):
            leaves.extend(_most_specific(error.context))
        else:
            leaves.append(error)
    return leaves


def validate_config(config: dict, schema: dict) -> dict:
    """Return a validated copy of ``config`` with defaults filled in.

    Raises :class:`ConfigError` listing every problem with the key it concerns.
    """
    config = copy.deepcopy(config)
    _drop_removed(config)
    written = set(config)
    _fill_defaults(config, schema, schema)
    _check_dataset_keys(config, schema)
    _check_curves_sources(config)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(_most_specific(validator.iter_errors(config)), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = set()
        for error in errors:
            lines.update(_nothing_to_run(error, written) if _is_top_level_any_of(error) else [_describe(error)])
        lines = sorted(lines)
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    config.setdefault("models", {})  # a regression-only configuration
    _check_cross_references(config)
    _check_shifts(config)
    _check_uncertainty(config)
    _check_ensembles(config)
    return config


def _drop_removed(config: dict) -> None:
    """Remove the data sets, models, named figures and regression data sets a config file set to null.

    Snakemake merges several ``--configfile`` files key by key, so a later file cannot delete an
    earlier file's entry; ``models: {mnist: null}`` (or ``regression: null``) in the later file does.
    A data set left without models goes too.
    """
    for section in ("models", "regression"):
        if section in config and config[section] is None:
            del config[section]
    models = config.get("models")
    if isinstance(models, dict):
        for dataset, entries in list(models.items()):
            removed = [name for name, entry in entries.items() if entry is None] if isinstance(entries, dict) else []
            for model in removed:
                del entries[model]
            if entries is None or (removed and not entries):
                del models[dataset]
    for mapping in ((config.get("report") or {}).get("figures"), config.get("regression")):
        if isinstance(mapping, dict):
            for key in [key for key, value in mapping.items() if value is None]:
                del mapping[key]


def _check_dataset_keys(config: dict, schema: dict) -> None:
    """A ``datasets`` key is a built-in set or a declared image folder; anything else (a typo) is named as such.

    Without this check the schema reads an unknown key as an image folder and reports its missing
    ``root``, which does not say that the key itself is the problem.
    """
    entries = config.get("datasets")
    if not isinstance(entries, dict):
        return
    built_in = sorted(_resolve(schema["properties"]["datasets"], schema).get("properties", {}))
    for key, entry in entries.items():
        if key in built_in or (isinstance(entry, dict) and entry.get("source") == "imagefolder"):
            continue
        close = closest_name(key, built_in)
        hint = f"did you mean {close!r}? " if close else ""
        raise ConfigError(
            f"datasets.{key}: not a built-in data set ({', '.join(built_in)}) and not declared as a folder of images; "
            f"{hint}a data set of your own needs source: imagefolder and root: <folder>, e.g. "
            f"datasets: {{{key}: {{source: imagefolder, root: data/{key}}}}} (config/README.md, datasets)"
        )


def _check_curves_sources(config: dict) -> None:
    """``curves`` only on ``source: train`` entries: one line naming the key (the schema would list allowed keys)."""
    for dataset, entries in (config.get("models") or {}).items():
        for model, spec in (entries.items() if isinstance(entries, dict) else ()):
            if isinstance(spec, dict) and "curves" in spec and spec.get("source") != "train":
                raise ConfigError(
                    f"models.{dataset}.{model}.curves: curves are recorded while the pipeline trains a network; "
                    f"only source: train entries take them, not source: {spec.get('source')!r}"
                )


def _check_cross_references(config: dict) -> None:
    models = config["models"]
    for name, target in config["report"]["figures"].items():
        dataset, model = target.split("/", 1)
        if model not in models.get(dataset, {}):
            raise ConfigError(f"report.figures.{name}: {target} is not a configured model (models.{dataset}.{model})")
    conformal = config["conformal"]
    if conformal["figures"] is None:  # default: the first model of each data set
        conformal["figures"] = [f"{dataset}/{next(iter(entries))}" for dataset, entries in models.items() if entries]
    for target in conformal["figures"]:
        dataset, model = model_target(target)
        if model not in models.get(dataset, {}):
            raise ConfigError(f"conformal.figures: {target} is not a configured model (models.{dataset}.{model})")


def model_target(target: str) -> tuple[str, str]:
    """``(dataset, model)`` of a ``dataset/model`` entry (``report.figures``, ``conformal.figures``)."""
    dataset, model = target.split("/", 1)
    return dataset, model


def _check_ensembles(config: dict) -> None:
    """Every ``source: ensemble`` entry names other, non-ensemble models of its own data set."""
    from calibrepro.zoo import ModelSourceError
    from calibrepro.zoo.ensemble import check_ensembles

    try:
        check_ensembles(config["models"])
    except ModelSourceError as error:
        raise ConfigError(str(error)) from None


def _check_uncertainty(config: dict) -> None:
    """The metrics named by uncertainty/size_study must be computed; study sizes must fit the data."""
    from calibrepro.size_study import SizeStudyError, check_size_study_config

    uncertainty = config["uncertainty"]
    if uncertainty["rank_metric"] is None:  # default: ECE, the thesis's ranking metric, when it is computed
        uncertainty["rank_metric"] = "ece" if "ece" in config["metrics"] else config["metrics"][0]
    for key, section in (("uncertainty.rank_metric", "uncertainty"), ("size_study.metric", "size_study")):
        metric = config[section][key.split(".")[1]]
        if config[section]["enabled"] and metric not in config["metrics"]:
            raise ConfigError(f"{key}: {metric!r} is not one of the configured metrics ({', '.join(config['metrics'])})")
    report = config["report"]
    if report["mark_ties"] is None:  # default: mark ties whenever the bootstrap runs
        report["mark_ties"] = config["uncertainty"]["enabled"]
    for key, on in (("report.mark_ties", report["mark_ties"]), ("report.cells", report["cells"] == "interval")):
        if on and not config["uncertainty"]["enabled"]:
            raise ConfigError(f"{key}: needs the bootstrap; set uncertainty.enabled: true (or turn {key} off)")
    if config.get("regression") and uncertainty["enabled"] and uncertainty["interval"] == "bca":
        raise ConfigError("uncertainty.interval: bca has no jackknife for the regression metrics' mean over splits; "
                          "use auto, percentile, basic or debiased with a regression: part")
    try:
        check_size_study_config(config)
    except SizeStudyError as error:
        raise ConfigError(str(error)) from None


#: regression data sources that are time series (windows of past hours -> next hours)
SERIES_SOURCES = ("energy",)
#: the regressor kinds of ``regression.<dataset>.models`` (:mod:`calibrepro.regression.models`, which imports torch)
REGRESSORS = ("mc_dropout", "aleatoric", "ensemble", "evidential")


def regression_models(entry: dict) -> dict[str, dict]:
    """Model name -> options of a ``regression`` data set: its ``models``, all kinds by default;
    one model named ``predictions`` for ``source: predictions`` (the user's own model)."""
    if entry["source"] == "predictions":
        return {"predictions": {}}
    return entry.get("models") or {kind: {} for kind in REGRESSORS}


def regression_keys(config: dict) -> list[tuple[str, str]]:
    """All (dataset, model) pairs of ``regression`` in config order."""
    return [(name, model) for name, entry in config["regression"].items() for model in regression_models(entry)]


def model_keys(config: dict) -> list[tuple[str, str]]:
    """All (dataset, model) pairs in config order."""
    return [(dataset, model) for dataset, entries in config["models"].items() for model in entries]


#: folder names a configuration cannot take: ``results/downloads`` is shared by all configurations
RESERVED_NAMES = ("downloads",)


def run_name(config: dict, configfiles: Sequence[str | Path]) -> str:
    """The configuration's name, which names its output folders (``calibrepro.layout.Layout.named``).

    The config's ``name`` if set, else the stem of the (last) config file given with ``--configfile``.
    """
    if config.get("name"):
        return config["name"]
    if not configfiles:
        raise ConfigError("name: not set; give the configuration a name (it names its output folders)")
    stem = Path(configfiles[-1]).stem
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", stem) or stem in RESERVED_NAMES:
        raise ConfigError(
            f"name: the config file {configfiles[-1]} does not give a usable folder name; set `name:` in it "
            "(letters, digits, _, - and ., not 'downloads')"
        )
    return stem


#: sources whose networks run on any evaluation set, so also on a shifted one (datasets.<key>.calibrate_on):
#: the networks by name and the pinned networks (whose pins are looked up under the set calibrated on)
SHIFTABLE_SOURCES = (*PRETRAINED_SOURCES, "torchvision", "checkpoint")


def shift_sets(config: dict) -> dict[str, str]:
    """Shifted data set -> the data set it is calibrated on (``datasets.<key>.calibrate_on``), in config order."""
    return {
        key: entry["calibrate_on"]
        for key, entry in (config.get("datasets") or {}).items()
        if isinstance(entry, dict) and entry.get("calibrate_on")
    }


def _check_shifts(config: dict) -> None:
    """A shifted set names a configured data set of network models, and has no models of its own."""
    for shifted, base in shift_sets(config).items():
        key = f"datasets.{shifted}.calibrate_on"
        if shifted in config["models"]:
            raise ConfigError(f"{key}: {shifted} is tested with the models of {base}; remove models.{shifted}")
        if base not in config["models"]:
            raise ConfigError(f"{key}: {base!r} has no models (configured: {', '.join(config['models'])})")
        if base in shift_sets(config):
            raise ConfigError(f"{key}: {base} is itself a shifted set; name the set its calibrators are fitted on")
        if shifted == "cifar10_1" and base != "cifar10":
            raise ConfigError(f"{key}: CIFAR-10.1 has CIFAR-10's ten classes; it can only be calibrated on cifar10")
        for model, spec in config["models"][base].items():
            if spec["source"] not in SHIFTABLE_SOURCES:
                raise ConfigError(
                    f"{key}: models.{base}.{model} (source {spec['source']}) cannot run on another data set; a "
                    f"shifted set needs models of the sources {', '.join(SHIFTABLE_SOURCES)}"
                )


def source_settings(config: dict, results: str) -> dict:
    """The part of the config a model source may read (not the model list), and the run's ``results`` folder."""
    return {**{key: config[key] for key in ("datasets", "downloads", "inference")}, "results": results}
