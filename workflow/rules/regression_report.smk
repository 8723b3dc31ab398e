# The regression report (seed 002, second half), from the gathered regression metrics.csv and the
# evaluations' curves and bootstrap replicates: tables, reliability and per-hour figures, reproduction, and
# the recalibrators' fitted parameters.

from calibrepro.regression import report_steps as regression_reports


# They read small gathered files: on a cluster they run in the submitting process.
localrules:
    regression_tables,
    regression_reproduction,
    regression_parameters,
    regression_conformal_tables,


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
        regression_reports.tables_step(input[0], regression_table_outputs(), log=log[0], **params)


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
        regression_reports.figure_step(list(input), wildcards.kind, output.png, output.pdf, log=log[0], **params)


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
        regression_reports.reproduction_step(
            input.metrics,
            list(input.replicates),
            output[0],
            curves_files=list(input.curves),
            log=log[0],
            **params,
        )


# Every recalibrator's fitted state (std scaling's factor, the isotonic maps' knots), as the curves files
# record it: results/<name>/regression/parameters.csv and its tables.
rule regression_parameters:
    input:
        regression_curves_paths,
    output:
        csv=LAYOUT.regression_parameters,
        md=report(
            LAYOUT.regression_table("parameters", "md"),
            caption="../report/parameters.rst",
            category="Regression",
            subcategory="tables",
        ),
        tex=LAYOUT.regression_table("parameters", "tex"),
    log:
        LAYOUT.log("regression_parameters"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        language=config["report"]["language"],
    run:
        regression_reports.parameters_step(
            list(input), output.csv, output.md, output.tex, log=log[0], language=params.language
        )


rule regression_conformal_tables:
    input:
        LAYOUT.regression_conformal,
    output:
        md=report(
            LAYOUT.regression_table("conformal", "md"),
            caption="../report/regression_conformal.rst",
            category="Regression",
            subcategory="tables",
        ),
        tex=LAYOUT.regression_table("conformal", "tex"),
    log:
        LAYOUT.log("regression_conformal_tables"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        regression_reports.conformal_tables_step(input[0], output.md, output.tex, log=log[0])
