# Configuration: load, validate, and turn into the lists of files the rules produce.
import json
import os
import re
import sys

from snakemake.utils import min_version

from calibrepro.config import (
    ConfigError,
    load_schema,
    model_keys,
    source_settings,
    validate_config,
)
from calibrepro.zoo import LogitsRequest, get_source
from calibrepro.zoo.ensemble import check_ensembles

min_version("9.0")


# The embedded default runs when no --configfile is given. A --configfile replaces it
# (instead of being merged key by key into it), so no demo model leaks into another run.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


try:
    _validated = validate_config(config, load_schema(workflow.source_path("../schemas/config.schema.yaml")))
    check_ensembles(_validated["models"])
except ConfigError as error:
    raise WorkflowError(str(error)) from None
config.clear()
config.update(_validated)

PYTHON = sys.executable  # shell rules run the library with the interpreter running Snakemake
MODELS = model_keys(config)  # [(dataset, model)] in config order
SEEDS = config["split"]["seeds"]
METHODS = config["calibrators"]
METRICS = config["metrics"]
BINS = config["bins"]
DOWNLOADS_DIR = config["downloads"]["dir"]
SETTINGS = source_settings(config)


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    model=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    method="|".join(METHODS),
    metric="|".join(METRICS),
    seed=r"\d+",


def model_spec(wildcards):
    """The config entry of the model named by the wildcards."""
    return config["models"][wildcards.dataset][wildcards.model]


def source_of(wildcards):
    return get_source(model_spec(wildcards)["source"])


def model_downloads(dataset, model):
    spec = config["models"][dataset][model]
    return get_source(spec["source"]).downloads(dataset, model, spec, SETTINGS)


def _collect_downloads():
    """Every pinned file of every model, by path under the downloads dir; one path, one file."""
    downloads = {}
    for dataset, model in MODELS:
        for item in model_downloads(dataset, model):
            known = downloads.setdefault(item.path, item)
            if known != item:
                raise WorkflowError(
                    f"two pinned files claim the download path {item.path!r}: {known} and {item}"
                )
    return downloads


DOWNLOADS = _collect_downloads()


def logits_path(dataset, model):
    return f"results/logits/{dataset}/{model}.npz"


def logits_resources(wildcards):
    return source_of(wildcards).resources(wildcards.dataset, SETTINGS)


def logits_inputs(wildcards):
    """The user's .npz for source: logits, else the model's downloaded files."""
    spec = model_spec(wildcards)
    if spec["source"] == "logits":
        return [spec["path"]]
    return list(source_of(wildcards).logits_inputs(wildcards.dataset, wildcards.model, spec, SETTINGS).values())


def logits_request(wildcards):
    """The logits job as JSON for the command line."""
    spec = model_spec(wildcards)
    request = LogitsRequest(
        dataset=wildcards.dataset,
        model=wildcards.model,
        spec=spec,
        config=SETTINGS,
        files=source_of(wildcards).logits_inputs(wildcards.dataset, wildcards.model, spec, SETTINGS),
    )
    return json.dumps(request.to_json(), sort_keys=True)


def split_source(wildcards):
    """The labels of a data set's split come from its alphabetically first model (all must agree)."""
    first = sorted(config["models"][wildcards.dataset])[0]
    return logits_path(wildcards.dataset, first)


def evaluation_paths(wildcards):
    return [
        f"results/evaluations/{dataset}/{model}/seed{seed}.csv" for dataset, model in MODELS for seed in SEEDS
    ]


def figure_paths():
    return [
        f"reports/figures/reliability/{dataset}/{model}.{extension}"
        for dataset, model in MODELS
        for extension in ("png", "pdf")
    ]


def named_figure_paths():
    return [
        f"reports/figures/{name}.{extension}" for name in config["report"]["figures"] for extension in ("png", "pdf")
    ]


def table_paths():
    return [f"reports/tables/{metric}.{extension}" for metric in METRICS for extension in ("md", "tex")]


def check_sources():
    """Fail before any job starts when a model whose logits this run must produce cannot be produced."""
    pending = {
        (job.wildcards.dataset, job.wildcards.model)
        for job in workflow.dag.needrun_jobs()
        if job.rule.name == "logits"
    }
    for dataset, model in MODELS:
        if (dataset, model) in pending:
            spec = config["models"][dataset][model]
            get_source(spec["source"]).check(dataset, model, spec, SETTINGS)


onstart:
    check_sources()
