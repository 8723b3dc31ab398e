# Configuration: load, validate, and turn into the lists of files the rules produce.
import json
import os
import re
import sys

from snakemake.settings.types import DeploymentMethod
from snakemake.utils import min_version

from calibrepro import determinism, workers
from calibrepro import snakemake_hooks as hooks

from calibrepro.config import (
    SERIES_SOURCES,
    ConfigError,
    load_schema,
    model_keys,
    model_target,
    regression_keys,
    regression_models,
    run_name,
    shift_sets,
    source_settings,
    validate_config,
)
from calibrepro.calibrators import OWN_JOB, module_of
from calibrepro.calibrators.cost import fit_minutes, fit_plan_summary, logits_shape
from calibrepro.layout import Layout
from calibrepro.io import LogitsFileError, check_agreement
from calibrepro.training.curves import request_spec
from calibrepro.steps.run import failure_summary, outputs_summary, remove_stale_outputs
from calibrepro.zoo import LogitsRequest, get_source

min_version("9.27")  # the range pyproject.toml declares; the internals read are in calibrepro.snakemake_hooks


def stop(message):
    """End the run before any job with the message alone (a WorkflowError would add the line of this file that raised it)."""
    print(f"Error: {message}", file=sys.stderr)
    sys.exit(1)


# The embedded default runs when no --configfile is given. A --configfile replaces it
# (instead of being merged key by key into it), so no demo model leaks into another run.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


try:
    _validated = validate_config(config, load_schema(workflow.source_path("../schemas/config.schema.yaml")))
    _name = run_name(_validated, workflow.overwrite_configfiles)
except ConfigError as error:
    stop(error)
config.clear()
config.update(_validated)

# Shell rules run the library's command line with the interpreter running Snakemake, or, with
# `--sdm conda`, with the rule's conda environment's python and this checkout's src/ on the path.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    PYTHON = f"PYTHONPATH={workflow.basedir}/src python"
else:
    PYTHON = f'"{sys.executable}"'
MODELS = model_keys(config)  # [(dataset, model)] in config order
#: shifted data set -> the data set whose calibrators it is tested with (datasets.<key>.calibrate_on)
SHIFTS = shift_sets(config)
#: (shifted data set, model) for every model of the set it is calibrated on
SHIFTED = [(shifted, model) for shifted, base in SHIFTS.items() for model in config["models"][base]]
SEEDS = config["split"]["seeds"]
METHODS = config["calibrators"]
OWN_JOB_METHODS = [method for method in METHODS if method in OWN_JOB]  # a fit job each (rule fit_calibrator)
QUICK_METHODS = [method for method in METHODS if method not in OWN_JOB]
#: threads of a full-matrix fit job (its cross-validation folds; results do not depend on it): 2, the
#: cores of the machine the workflow is sized for (a local run's --cores caps it anyway); a Slurm profile
#: can give a job more with `set-threads: {fit_calibrator: N}` (N <= folds helps; see workflow/profiles/slurm)
FIT_THREADS = 2
METRICS = config["metrics"]
BINS = config["bins"]
DOWNLOADS_DIR = config["downloads"]["dir"]
UNCERTAINTY = config["uncertainty"]
SIZE_STUDY = config["size_study"]
CONFORMAL = config["conformal"]
#: what every conformal job computes with (workflow/rules/conformal.smk)
CONFORMAL_SETTINGS = {key: CONFORMAL[key] for key in ("scores", "alphas", "randomized", "penalty", "k_reg", "seed")}
DATASETS = list(config["models"])
#: where this run's files go (calibrepro.layout): results/<name>/, reports/<name>/; every path below comes from it
LAYOUT = Layout.named(_name)
SETTINGS = source_settings(config, LAYOUT.results)
#: the regression part (workflow/rules/regression.smk, regression_report.smk): data set -> entry, and its
#: (dataset, model) pairs
REGRESSION = config["regression"]
REGRESSION_MODELS = regression_keys(config)
#: level of the Wilson error bars on the reliability diagrams (None: the thesis's style, no bars)
RELIABILITY_LEVEL = UNCERTAINTY["level"] if config["report"]["reliability_intervals"] else None


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    model=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    method="|".join(METHODS),
    metric="|".join(METRICS),
    seed=r"\d+",


def spec_of(dataset, model):
    """The config entry of a model; on a shifted data set, the entry of the set it is calibrated on."""
    return config["models"][SHIFTS.get(dataset, dataset)][model]


def model_spec(wildcards):
    """The config entry of the model named by the wildcards."""
    return spec_of(wildcards.dataset, wildcards.model)


def source_of(wildcards):
    return get_source(model_spec(wildcards)["source"])


def model_downloads(dataset, model):
    spec = spec_of(dataset, model)
    return get_source(spec["source"]).downloads(dataset, model, spec, SETTINGS)


def regression_downloads(dataset):
    """The pinned files of a regression data set (none for a bundled data set or the user's files)."""
    from calibrepro.regression.data import downloads

    return downloads(REGRESSION[dataset])


def _collect_downloads():
    """Every pinned file of every model and regression data set, by path under the downloads dir; one path, one file."""
    downloads = {}
    items = [item for dataset, model in MODELS + SHIFTED for item in model_downloads(dataset, model)]
    for dataset in REGRESSION:
        items += regression_downloads(dataset)
    for item in items:
        known = downloads.setdefault(item.path, item)
        if known != item:
            stop(f"two pinned files claim the download path {item.path!r}: {known} and {item}")
    return downloads


DOWNLOADS = _collect_downloads()


def check_user_files():
    """Stop before any job when a model's own logits file or a regression data set's own file is missing,
    whether or not a run cached it."""
    from calibrepro.regression.data import RegressionDataError, check_own_file

    for dataset, model in MODELS:
        spec = config["models"][dataset][model]
        if spec["source"] == "logits":
            try:
                get_source("logits").check(dataset, model, spec, SETTINGS)
            except LogitsFileError as error:
                stop(error)
    for dataset, spec in REGRESSION.items():
        try:
            check_own_file(dataset, spec)
        except RegressionDataError as error:
            stop(error)


check_user_files()


def size_priority(wildcards):
    """Jobs on bigger logits first, so that the longest start early: log2 of the file's size (0 before it exists)."""
    path = LAYOUT.logits(wildcards.dataset, wildcards.model) if "model" in wildcards.keys() else split_source(wildcards)
    return os.path.getsize(path).bit_length() if os.path.exists(path) else 0


def logits_resources(wildcards):
    return source_of(wildcards).resources(wildcards.dataset, wildcards.model, model_spec(wildcards), SETTINGS)


def logits_inputs(wildcards):
    """The user's .npz for source: logits, else the model's downloaded files."""
    spec = model_spec(wildcards)
    if spec["source"] == "logits":
        return [spec["path"]]
    return list(source_of(wildcards).logits_inputs(wildcards.dataset, wildcards.model, spec, SETTINGS).values())


def logits_request(wildcards):
    """The logits job as JSON text (written to a request file for the command line)."""
    spec = request_spec(model_spec(wildcards), config)
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
    return LAYOUT.logits(wildcards.dataset, first)


def quick_calibrator_paths(wildcards):
    """Method -> fitted calibrator file of the methods fitted together (rule fit_calibrators)."""
    return {
        method: LAYOUT.calibrator(wildcards.dataset, wildcards.model, method, wildcards.seed)
        for method in QUICK_METHODS
    }


def fit_runtime(wildcards):
    """Minutes one full-matrix fit job asks for: the cost model's, for this method and model (calibrators.cost)."""
    shape = logits_shape(LAYOUT.logits(wildcards.dataset, wildcards.model), wildcards.dataset)
    options = config["calibrator_options"].get(wildcards.method, {})
    fraction = config["split"]["calibration_fraction"]
    return fit_minutes(shape, wildcards.method, options, calibration_fraction=fraction, threads=FIT_THREADS)


def announce_fit_plan():
    """Say, when the run fits full-matrix methods, how many such jobs it plans and their expected CPU time."""
    if not OWN_JOB_METHODS:
        return
    jobs = [
        (
            logits_shape(LAYOUT.logits(dataset, model), dataset),
            method,
            config["calibrator_options"].get(method, {}),
        )
        for dataset, model in MODELS
        for method in OWN_JOB_METHODS
        for _ in SEEDS
    ]
    fraction = config["split"]["calibration_fraction"]
    print(fit_plan_summary(jobs, calibration_fraction=fraction, threads=FIT_THREADS), file=sys.stderr)


announce_fit_plan()


def calibrator_paths(wildcards):
    """Method -> fitted calibrator file of one model and seed, for every configured method."""
    return {method: LAYOUT.calibrator(wildcards.dataset, wildcards.model, method, wildcards.seed) for method in METHODS}


def shift_calibrator_paths(wildcards):
    """Method -> calibrator of the model fitted on the calibration half of the set a shifted set is calibrated on."""
    base = SHIFTS[wildcards.dataset]
    return {method: LAYOUT.calibrator(base, wildcards.model, method, wildcards.seed) for method in METHODS}


def evaluation_paths(wildcards):
    """Every model's metric rows: on its test half, and on each shifted set calibrated on its data set."""
    return [LAYOUT.evaluation(dataset, model, seed) for dataset, model in MODELS + SHIFTED for seed in SEEDS]


def convergence_paths(wildcards):
    """How the fits behind every model's metric rows ended, in the order of evaluation_paths."""
    return [LAYOUT.convergence_part(dataset, model, seed) for dataset, model in MODELS + SHIFTED for seed in SEEDS]


def fitted_calibrators():
    """(dataset, model, method, seed, calibrator file) of every fit of the run, in config order (rule parameters)."""
    return [
        (dataset, model, method, seed, LAYOUT.calibrator(dataset, model, method, seed))
        for dataset, model in MODELS
        for method in METHODS
        for seed in SEEDS
    ]


def conformal_part_paths(wildcards):
    """Every model's conformal rows, on the first split seed, in config order."""
    return [LAYOUT.conformal_part(dataset, model, SEEDS[0]) for dataset, model in MODELS]


def temperature_calibrator(wildcards):
    """The fitted temperature scaling of a model on the first split seed, when it is configured (its figure marks T)."""
    if "temperature_scaling" not in METHODS:
        return []
    return [LAYOUT.calibrator(wildcards.dataset, wildcards.model, "temperature_scaling", SEEDS[0])]


def conformal_figure_paths():
    return [
        LAYOUT.conformal_figure(*model_target(target), ext) for target in CONFORMAL["figures"] for ext in ("png", "pdf")
    ]


def probabilities_paths():
    """Every calibrator's probabilities on the test half (targets with report.export_probabilities)."""
    return [
        LAYOUT.probabilities(dataset, model, method, seed) for dataset, model, method, seed, _ in fitted_calibrators()
    ]


def figure_paths():
    return [LAYOUT.reliability_figure(dataset, model, ext) for dataset, model in MODELS for ext in ("png", "pdf")]


def named_figure_paths():
    return [LAYOUT.named_figure(name, ext) for name in config["report"]["figures"] for ext in ("png", "pdf")]


def table_paths():
    return [LAYOUT.table(metric, ext) for metric in METRICS for ext in ("md", "tex")]


def bootstrap_paths(kind):
    """Every model's and seed's bootstrap file of ``kind`` ("intervals" or "comparisons")."""
    return [LAYOUT.bootstrap(dataset, model, seed, kind) for dataset, model in MODELS for seed in SEEDS]


def dataset_figures(kind):
    """Data set -> (png, pdf) of the per-data-set figures of ``kind`` ("cd", "size_study")."""
    return {dataset: tuple(LAYOUT.dataset_figure(kind, dataset, ext) for ext in ("png", "pdf")) for dataset in DATASETS}


def in_report(paths, caption):
    """``paths`` with their PNGs marked for Snakemake's HTML report (--report), under "Uncertainty"."""
    return [report(path, caption=caption, category="Uncertainty") if path.endswith(".png") else path for path in paths]


def dataset_figure_paths(kind):
    return [path for pair in dataset_figures(kind).values() for path in pair]


def uncertainty_table_inputs(wildcards):
    """Extra inputs of the table rule: comparisons for tie marks, intervals for interval cells."""
    inputs = {}
    if config["report"]["mark_ties"]:
        inputs["comparisons"] = LAYOUT.comparisons
    if config["report"]["cells"] == "interval":
        inputs["intervals"] = LAYOUT.intervals
    return inputs


#: (dataset, model) of the trained networks with curves (workflow/rules/curves.smk), in config order
CURVE_MODELS = [(dataset, model) for dataset, model in MODELS if config["models"][dataset][model].get("curves")]
CURVE_DATASETS = list(dict.fromkeys(dataset for dataset, _ in CURVE_MODELS))
#: data set -> the networks of its confidence figure (Guo et al.'s fig. 1): those with curves and the pretrained ones
CONFIDENCE_MODELS = {
    dataset: [
        model
        for model, spec in config["models"][dataset].items()
        if spec.get("curves") or spec["source"] not in ("train", "ensemble", "logits")
    ]
    for dataset in CURVE_DATASETS
}


def curves_paths():
    """The outputs of calibration over training by group: the gathered curves, the tables, two figures per data set."""
    if not CURVE_MODELS:
        return {}
    figures = [
        LAYOUT.dataset_figure(kind, dataset, ext)
        for kind in ("curves", "confidence")
        for dataset in CURVE_DATASETS
        for ext in ("png", "pdf")
    ]
    tables = [LAYOUT.table("curves", "md"), LAYOUT.table("curves", "tex"), LAYOUT.curves_findings]
    return {"curves": [LAYOUT.training_curves], "tables": tables, "figures": figures}


def curve_logits():
    return [LAYOUT.logits(dataset, model) for dataset, model in CURVE_MODELS]


def curve_datasets(wildcards):
    """Data set -> its split file, its networks with curves (name -> logits file) and their config entries."""
    datasets = {}
    for dataset, model in CURVE_MODELS:
        entry = datasets.setdefault(dataset, {"split": LAYOUT.split(dataset, SEEDS[0]), "models": {}, "entries": {}})
        entry["models"][model] = LAYOUT.logits(dataset, model)
        entry["entries"][model] = config["models"][dataset][model]
    return datasets


def uncertainty_reproduction_inputs(wildcards):
    """Extra inputs of the reproduction rule: the intervals, the size study and the conformal results, when they
    are computed."""
    inputs = {"intervals": LAYOUT.intervals} if UNCERTAINTY["enabled"] else {}
    if SIZE_STUDY["enabled"]:
        inputs["size_study"] = LAYOUT.size_study
    if CONFORMAL["enabled"]:
        inputs["conformal"] = LAYOUT.conformal
    if CURVE_MODELS:
        inputs["curves"] = LAYOUT.curves_findings
    return inputs


def targets():
    """Every file this run produces, by kind (the targets of the all rule): the one list of its outputs.

    The closing summary reports these groups; a new output becomes a target by being added here.
    """
    groups = {name: [] for name in ("metrics", "convergence", "parameters", "tables", "figures", "intervals")}
    groups.update(probabilities=[], report=[], conformal=[])
    if MODELS:  # not in a regression-only configuration
        groups["metrics"].append(LAYOUT.metrics)
        groups["convergence"].append(LAYOUT.convergence)
        groups["parameters"].append(LAYOUT.parameters)
        groups["tables"] += table_paths() + [LAYOUT.table("parameters", ext) for ext in ("md", "tex")]
        groups["figures"] += figure_paths() + named_figure_paths()
        groups["report"].append(LAYOUT.reproduction)
    if MODELS and UNCERTAINTY["enabled"]:
        groups["intervals"] += [LAYOUT.intervals, LAYOUT.comparisons]
        groups["tables"].append(LAYOUT.table("ranks", "md"))
        groups["figures"] += dataset_figure_paths("cd")
    if MODELS and SIZE_STUDY["enabled"]:
        groups["intervals"].append(LAYOUT.size_study)
        groups["tables"].append(LAYOUT.table("size_study", "md"))
        groups["figures"] += dataset_figure_paths("size_study")
    if MODELS and CONFORMAL["enabled"]:
        groups["conformal"].append(LAYOUT.conformal)
        groups["tables"] += [LAYOUT.table("conformal", ext) for ext in ("md", "tex")]
        groups["figures"] += conformal_figure_paths()
    for group, paths in curves_paths().items():
        groups.setdefault(group, []).extend(paths)
    if MODELS and config["report"]["export_probabilities"]:
        groups["probabilities"] += probabilities_paths()
    return {**groups, **regression_groups()}


def target_paths():
    return [path for paths in targets().values() for path in paths]


def regression_inputs(wildcards):
    """The files a regression data set is read from: the user's file, or its downloads."""
    spec = REGRESSION[wildcards.rdataset]
    if "path" in spec:
        return [spec["path"]]
    return [f"{DOWNLOADS_DIR}/{item.path}" for item in regression_downloads(wildcards.rdataset)]


def regression_files(wildcards):
    """File name -> local path of a regression data set's downloads (for calibrepro.regression.data)."""
    return {
        os.path.basename(item.path): f"{DOWNLOADS_DIR}/{item.path}" for item in regression_downloads(wildcards.rdataset)
    }


def regression_model_options(wildcards):
    return regression_models(REGRESSION[wildcards.rdataset])[wildcards.rmodel]


def regression_cells():
    """(dataset, model, split) of every regressor and split, in config order."""
    return [
        (dataset, model, split)
        for dataset, model in REGRESSION_MODELS
        for split in range(REGRESSION[dataset]["splits"])
    ]


def regression_prediction_cells(wildcards):
    """(dataset, model, split, predictions file) of every regressor and split (the conformal intervals' inputs)."""
    return [(*cell, LAYOUT.regression_predictions(*cell)) for cell in regression_cells()]


def regression_evaluation_paths(wildcards):
    return [LAYOUT.regression_evaluation(*cell) for cell in regression_cells()]


def regression_replicates_paths(wildcards):
    return [LAYOUT.regression_replicates(*cell) for cell in regression_cells()]


def regression_curves_paths(wildcards):
    return [LAYOUT.regression_curves(*cell) for cell in regression_cells()]


def regression_metric_names():
    """Every regression metric, in the registry's order (the rows of each evaluation)."""
    from calibrepro.regression.metrics import REGRESSION_METRICS  # scipy: only with a regression part

    return list(REGRESSION_METRICS)


def regression_table_outputs():
    """Table name -> (md, tex) of the regression tables (none without a regression part)."""
    if not REGRESSION:
        return {}
    from calibrepro.regression.metrics import REGRESSION_METRICS  # scipy: only with a regression part
    from calibrepro.regression.report import table_names

    names = table_names(REGRESSION_METRICS)
    return {name: (LAYOUT.regression_table(name, "md"), LAYOUT.regression_table(name, "tex")) for name in names}


def regression_figure_paths():
    """Reliability curves of every regressor; per-hour RMSE and std of every time-series regressor."""
    kinds = lambda dataset: ["reliability"] + (["horizon"] if REGRESSION[dataset]["source"] in SERIES_SOURCES else [])
    return [
        LAYOUT.regression_figure(kind, dataset, model, ext)
        for dataset, model in REGRESSION_MODELS
        for kind in kinds(dataset)
        for ext in ("png", "pdf")
    ]


def regression_groups():
    """Targets of workflow/rules/regression.smk and regression_report.smk by kind (none without a regression part)."""
    if not REGRESSION:
        return {}
    tables = [path for pair in regression_table_outputs().values() for path in pair]
    tables += [LAYOUT.regression_table("parameters", ext) for ext in ("md", "tex")]
    if CONFORMAL["enabled"]:
        tables += [LAYOUT.regression_table("conformal", ext) for ext in ("md", "tex")]
    return {
        "regression metrics": [LAYOUT.regression_metrics]
        + ([LAYOUT.regression_conformal] if CONFORMAL["enabled"] else []),
        "regression parameters": [LAYOUT.regression_parameters],
        "regression reports": [*tables, *regression_figure_paths(), LAYOUT.regression_reproduction],
    }


def regression_paths():
    return [path for paths in regression_groups().values() for path in paths]


def check_sources():
    """Stop before any job starts when a model whose logits this run must produce cannot be produced.

    The sources' checks and the files' agreement fail with the project's errors (ValueError subclasses
    whose message names the key or file and the fix): the run ends with that message alone.
    """
    pending = {
        (job.wildcards.dataset, job.wildcards.model)
        for job in hooks.pending_jobs(workflow)
        if job.rule.name == "logits"
    }
    try:
        for dataset, model in MODELS + SHIFTED:
            if (dataset, model) in pending:
                spec = spec_of(dataset, model)
                get_source(spec["source"]).check(dataset, model, spec, SETTINGS)
        # users' files of one data set must agree
        for dataset in sorted({dataset for dataset, _ in pending} - set(SHIFTS)):
            user_files = {
                f"{m} ({s['path']})": s["path"] for m, s in config["models"][dataset].items() if s["source"] == "logits"
            }
            check_agreement(user_files, group=f"models of data set {dataset!r}")
    except ValueError as error:
        stop(error)


# What the compute steps import, by the name of their rule: their step module, and torch's optimisers import
# torch._dynamo on first use; the worker processes' fork server imports it once, before the first step can start.
_CALIBRATOR_MODULES = tuple(sorted({module_of(method) for method in METHODS}))
_CALIBRATION = (
    "torch._dynamo",
    "calibrepro.reliability",
    "calibrepro.steps.calibration",
    *_CALIBRATOR_MODULES,
)
_DRAWING = ("calibrepro.report.figures", "calibrepro.report.cd_diagram", "calibrepro.steps.reports")
WORKER_IMPORTS = {
    **dict.fromkeys(["fit_calibrators", "fit_calibrator", "evaluate"], _CALIBRATION),
    **dict.fromkeys(
        ["size_study", "bootstrap"], (*_CALIBRATION, "calibrepro.bootstrap", "calibrepro.steps.uncertainty")
    ),
    **dict.fromkeys(["reliability_figure", "named_figure", "ranks", "size_study_report"], _DRAWING),
    **dict.fromkeys(
        ["table", "reproduction"],
        ("calibrepro.report.tables", "calibrepro.report.reproduction", "calibrepro.steps.reports"),
    ),
    # torch: the calibrators' predict_proba imports it on first use (seconds, in every worker otherwise)
    **dict.fromkeys(
        ["conformal_sets", "conformal_figure"],
        (
            "torch",
            "scipy.stats",
            "calibrepro.conformal.metrics",
            "calibrepro.conformal.results",
            "calibrepro.conformal.splits",
            "calibrepro.report.conformal",
            "calibrepro.steps.calibration",
            "calibrepro.steps.conformal",
            "calibrepro.tasks",
            *_CALIBRATOR_MODULES,
        ),
    ),
    "conformal_tables": ("calibrepro.report.conformal", "calibrepro.steps.conformal"),
    "parameters": (
        "calibrepro.report.parameter_tables",
        "calibrepro.steps.reports",
        *_CALIBRATOR_MODULES,
    ),
    "regression_data": ("calibrepro.regression.data", "calibrepro.regression.steps"),
    "regression_predict": (
        "torch._dynamo",
        "calibrepro.regression.models",
        "calibrepro.regression.predictions",
        "calibrepro.regression.steps",
    ),
    "regression_evaluate": ("calibrepro.regression.task", "calibrepro.steps.calibration"),
    "regression_conformal": (
        "calibrepro.regression.conformal",
        "calibrepro.regression.task",
        "calibrepro.regression.steps",
    ),
    "regression_conformal_tables": ("calibrepro.regression.conformal", "calibrepro.regression.report_steps"),
    "regression_tables": (
        "calibrepro.regression.report",
        "calibrepro.report.tables",
        "calibrepro.regression.report_steps",
    ),
    "regression_figure": ("calibrepro.regression.figures", "calibrepro.regression.report_steps"),
    "regression_parameters": (
        "calibrepro.regression.task",
        "calibrepro.report.parameter_tables",
        "calibrepro.regression.report_steps",
    ),
}


def start_workers():
    """Send the compute steps to worker processes when local jobs run as threads of this process.

    With profiles/default every local job is a thread of this Snakemake process, and the interpreter
    lock would let one compute at a time; so the steps of two or more compute jobs go to as many
    worker processes as there are cores, whose fork server imports what those steps need once
    (calibrepro.workers); a single one too where this process imported NumPy before the kernels were
    pinned (calibrepro.determinism). Slurm jobs and runs without the profile run each step in a process anyway.
    """
    if not hooks.local_jobs_are_threads(workflow):
        return
    compute = [job.rule.name for job in hooks.pending_jobs(workflow) if job.rule.name in WORKER_IMPORTS]
    if len(compute) > 1 or (compute and not determinism.kernels_pinned()):
        preload = sorted({module for rule in compute for module in WORKER_IMPORTS[rule]})
        workers.configure(hooks.cores(workflow), preload)


def output_groups():
    """Where the outputs of a finished run are, by kind, for the closing summary."""
    return {**targets(), "logs": [LAYOUT.logs]}


# The hooks below read Snakemake internals through calibrepro.snakemake_hooks only.
onstart:
    hooks.on_ctrl_c(workflow)
    hooks.lift_job_rate_limit(workflow)
    check_sources()
    removed = remove_stale_outputs(LAYOUT, target_paths())
    if removed:
        print(removed, file=sys.stderr)
    start_workers()


onsuccess:
    workers.end_of_run()
    print(outputs_summary(output_groups()), file=sys.stderr)


onerror:
    workers.end_of_run()
    print(failure_summary(hooks.failed_steps(workflow)), file=sys.stderr)
