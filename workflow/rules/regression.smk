# Calibrated regression (seed 002, second half): data -> splits -> regressors' predictions ->
# recalibration + metrics -> metrics.csv (its tables, figures and reproduction report: regression_report.smk).

from calibrepro.regression import steps as regression_steps
from calibrepro.steps import calibration


# Reading a data set and gathering files take seconds: on a cluster they run in the submitting process.
wildcard_constraints:
    rdataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    rmodel=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    split=r"\d+",


localrules:
    regression_data,
    regression_split,
    regression_metrics,


rule regression_data:
    input:
        regression_inputs,
    output:
        LAYOUT.regression_data("{rdataset}"),
    log:
        LAYOUT.log("regression_data", "{rdataset}"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        spec=lambda wildcards: REGRESSION[wildcards.rdataset],
        files=regression_files,
    run:
        regression_steps.data_step(wildcards.rdataset, params.spec, params.files, output[0], log=log[0])


rule regression_split:
    input:
        LAYOUT.regression_data("{rdataset}"),
    output:
        LAYOUT.regression_split("{rdataset}", "{split}"),
    log:
        LAYOUT.log("regression_split", "{rdataset}/split{split}"),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        spec=lambda wildcards: REGRESSION[wildcards.rdataset],
    run:
        regression_steps.split_step(
            input[0], wildcards.rdataset, int(wildcards.split), params.spec, output[0], log=log[0]
        )


rule regression_predict:
    input:
        data=LAYOUT.regression_data("{rdataset}"),
        split=LAYOUT.regression_split("{rdataset}", "{split}"),
    output:
        LAYOUT.regression_predictions("{rdataset}", "{rmodel}", "{split}"),
    log:
        LAYOUT.log("regression_predict", "{rdataset}/{rmodel}/split{split}"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        options=lambda wildcards: regression_model_options(wildcards),
        seed=lambda wildcards: REGRESSION[wildcards.rdataset]["seed"] + int(wildcards.split),
    run:
        regression_steps.predict_step(
            input.data, input.split, output[0], model=wildcards.rmodel, log=log[0], **params
        )


rule regression_evaluate:
    input:
        LAYOUT.regression_predictions("{rdataset}", "{rmodel}", "{split}"),
    output:
        metrics=LAYOUT.regression_evaluation("{rdataset}", "{rmodel}", "{split}"),
        curves=LAYOUT.regression_curves("{rdataset}", "{rmodel}", "{split}"),
        replicates=LAYOUT.regression_replicates("{rdataset}", "{rmodel}", "{split}"),
    log:
        LAYOUT.log("regression_evaluate", "{rdataset}/{rmodel}/split{split}"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        calibrators=lambda wildcards: dict.fromkeys(REGRESSION[wildcards.rdataset]["recalibrators"]),
        metrics=lambda wildcards: regression_metric_names(),
        dataset=lambda wildcards: wildcards.rdataset,
        model=lambda wildcards: wildcards.rmodel,
        seed=lambda wildcards: int(wildcards.split),
        resamples=UNCERTAINTY["bootstrap"] if UNCERTAINTY["enabled"] else 0,
        bootstrap_seed=UNCERTAINTY["seed"],
    run:
        calibration.evaluate_step(
            input[0],
            None,
            output.metrics,
            output.curves,
            task="regression",
            replicates_output=output.replicates,
            log=log[0],
            **params,
        )


rule regression_metrics:
    input:
        regression_evaluation_paths,
    output:
        LAYOUT.regression_metrics,
    log:
        LAYOUT.log("regression_metrics"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        regression_steps.gather_step(input, output[0], log=log[0])


# Split-conformal intervals (|y - mu| / sigma and |y - mu|) beside each recalibrator's central interval, on halves
# of every split's test part (the recalibrators are fitted on its calibration part): one job for the whole part.
rule regression_conformal:
    input:
        lambda wildcards: [path for *_, path in regression_prediction_cells(wildcards)],
    output:
        LAYOUT.regression_conformal,
    log:
        LAYOUT.log("regression_conformal"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        cells=regression_prediction_cells,
        recalibrators={name: entry["recalibrators"] for name, entry in REGRESSION.items()},
        alphas=CONFORMAL["alphas"],
        repeats=CONFORMAL["repeats"],
        seed=CONFORMAL["seed"],
    run:
        regression_steps.conformal_step(
            params.cells,
            output[0],
            recalibrators=params.recalibrators,
            alphas=params.alphas,
            repeats=params.repeats,
            seed=params.seed,
            log=log[0],
        )
