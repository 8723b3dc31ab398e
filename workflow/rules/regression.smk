# Calibrated regression (seed 002, second half): data -> splits -> regressors' predictions ->
# recalibration + metrics -> metrics.csv -> tables, reliability curves, per-hour figures, reproduction.


# Reading a data set and gathering files take seconds: on a cluster they run in the submitting process.
wildcard_constraints:
    rdataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    rmodel=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    split=r"\d+",


localrules:
    regression_data,
    regression_split,
    regression_metrics,
    regression_tables,
    regression_reproduction,


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
        pipeline.regression_data_step(wildcards.rdataset, params.spec, params.files, output[0], log=log[0])


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
        pipeline.regression_split_step(
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
        pipeline.regression_predict_step(
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
        pipeline.evaluate_step(
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
        pipeline.regression_gather_step(input, output[0], log=log[0])


rule regression_tables:
    input:
        LAYOUT.regression_metrics,
    output:
        [
            (
                report(path, caption="../report/regression_table.rst", category="Regression", subcategory="tables")
                if path.endswith(".md")
                else path
            )
            for pair in regression_table_outputs().values()
            for path in pair
        ],
    log:
        LAYOUT.log("regression_tables"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        sources={name: entry["source"] for name, entry in REGRESSION.items()},
        language=config["report"]["language"],
    run:
        pipeline.regression_tables_step(input[0], regression_table_outputs(), log=log[0], **params)


rule regression_figure:
    input:
        lambda wildcards: [
            LAYOUT.regression_curves(wildcards.rdataset, wildcards.rmodel, split)
            for split in range(REGRESSION[wildcards.rdataset]["splits"])
        ],
    output:
        png=report(
            LAYOUT.regression_figure("{kind}", "{rdataset}", "{rmodel}", "png"),
            caption="../report/regression.rst",
            category="Regression",
            subcategory="{kind}",
        ),
        pdf=LAYOUT.regression_figure("{kind}", "{rdataset}", "{rmodel}", "pdf"),
    log:
        LAYOUT.log("regression_figure", "{kind}/{rdataset}/{rmodel}"),
    wildcard_constraints:
        kind="reliability|horizon",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        title=lambda wildcards: f"{wildcards.rdataset}, {wildcards.rmodel}",
        language=config["report"]["language"],
    run:
        pipeline.regression_figure_step(list(input), wildcards.kind, output.png, output.pdf, log=log[0], **params)


rule regression_reproduction:
    input:
        metrics=LAYOUT.regression_metrics,
        replicates=regression_replicates_paths,
        curves=regression_curves_paths,
    output:
        report(LAYOUT.regression_reproduction, caption="../report/regression.rst", category="Regression"),
    log:
        LAYOUT.log("regression_reproduction"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        sources={name: entry["source"] for name, entry in REGRESSION.items()},
        language=config["report"]["language"],
        level=UNCERTAINTY["level"],
        interval=UNCERTAINTY["interval"],
    run:
        pipeline.regression_reproduction_step(
            input.metrics,
            list(input.replicates),
            output[0],
            curves_files=list(input.curves),
            log=log[0],
            **params,
        )
