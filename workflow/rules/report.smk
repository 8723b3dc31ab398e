# Thesis-style tables, reliability diagrams, the comparison with published values, the reports of
# uncertainty.smk's files (mean ranks with critical-difference diagrams, the size study's table and figures),
# and the fitted parameters of every calibrator.

from calibrepro.steps import reports


# These read only gathered tidy files or one model's reliability bins and take about a second each: on
# a cluster they run in the submitting Snakemake process, not as batch jobs of their own.
localrules:
    table,
    reliability_figure,
    named_figure,
    reproduction,
    ranks,
    size_study_report,
    parameters,


rule table:
    input:
        unpack(uncertainty_table_inputs),
        metrics=LAYOUT.metrics,
        convergence=LAYOUT.convergence,
    output:
        md=report(LAYOUT.table("{metric}", "md"), caption="../report/table.rst", category="Tables"),
        tex=LAYOUT.table("{metric}", "tex"),
    log:
        LAYOUT.log("table", "{metric}"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        language=config["report"]["language"],
        bins=BINS,
        convergence_csv=lambda wildcards, input: input.convergence,
        comparisons_csv=lambda wildcards, input: input.get("comparisons"),
        intervals_csv=lambda wildcards, input: input.get("intervals"),
    run:
        reports.table_step(input.metrics, wildcards.metric, output.md, output.tex, log=log[0], **params)


rule reliability_figure:
    input:
        lambda wildcards: LAYOUT.reliability(wildcards.dataset, wildcards.model, SEEDS[0]),
    output:
        png=report(
            LAYOUT.reliability_figure("{dataset}", "{model}", "png"),
            caption="../report/reliability.rst",
            category="Reliability diagrams",
            subcategory="{dataset}",
        ),
        pdf=LAYOUT.reliability_figure("{dataset}", "{model}", "pdf"),
    log:
        LAYOUT.log("reliability_figure", "{dataset}/{model}"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        language=config["report"]["language"],
        intervals=RELIABILITY_LEVEL,
        counts=config["report"]["reliability_counts"],
    run:
        reports.figure_step(input[0], output.png, output.pdf, log=log[0], **params)


rule named_figure:
    input:
        lambda wildcards: LAYOUT.reliability(*config["report"]["figures"][wildcards.name].split("/"), SEEDS[0]),
    output:
        png=report(LAYOUT.named_figure("{name}", "png"), caption="../report/figure.rst", category="Figures"),
        pdf=LAYOUT.named_figure("{name}", "pdf"),
    log:
        LAYOUT.log("named_figure", "{name}"),
    wildcard_constraints:
        name="|".join(config["report"]["figures"]) or "(?!)",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        language=config["report"]["language"],
        intervals=RELIABILITY_LEVEL,
        counts=config["report"]["reliability_counts"],
    run:
        reports.figure_step(input[0], output.png, output.pdf, log=log[0], **params)


rule reproduction:
    input:
        unpack(uncertainty_reproduction_inputs),
        metrics=LAYOUT.metrics,
        published=[config["report"]["published"]] if config["report"]["published"] else [],
    output:
        report(
            LAYOUT.reproduction,
            caption="../report/reproduction.rst",
            category="Reproduction",
        ),
    log:
        LAYOUT.log("reproduction"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        published_csv=config["report"]["published"],
        intervals_csv=lambda wildcards, input: input.get("intervals"),
        size_study_csv=lambda wildcards, input: input.get("size_study"),
        conformal_csv=lambda wildcards, input: input.get("conformal"),
        curves_md=lambda wildcards, input: input.get("curves"),
        language=config["report"]["language"],
    run:
        reports.reproduction_step(input.metrics, output[0], log=log[0], **params)


rule ranks:
    input:
        LAYOUT.metrics,
    output:
        md=report(
            LAYOUT.table("ranks", "md"),
            caption="../report/ranks.rst",
            category="Uncertainty",
        ),
        figures=in_report(dataset_figure_paths("cd"), "../report/cd.rst"),
    log:
        LAYOUT.log("ranks"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        metric=UNCERTAINTY["rank_metric"],
        figures=dataset_figures("cd"),
        alpha=UNCERTAINTY["alpha"],
        language=config["report"]["language"],
    run:
        reports.rank_step(input[0], output.md, log=log[0], **params)


rule size_study_report:
    input:
        LAYOUT.size_study,
        published=[config["report"]["published"]] if config["report"]["published"] else [],
    output:
        md=report(
            LAYOUT.table("size_study", "md"),
            caption="../report/size_study.rst",
            category="Uncertainty",
        ),
        figures=in_report(dataset_figure_paths("size_study"), "../report/size_study_figure.rst"),
    log:
        LAYOUT.log("size_study_report"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        metric=SIZE_STUDY["metric"],
        figures=dataset_figures("size_study"),
        language=config["report"]["language"],
        published_csv=config["report"]["published"],
    run:
        reports.size_study_report_step(input[0], output.md, log=log[0], **params)


# Every calibrator's fitted numbers (temperatures, weights, chosen regularisation, ...) and how its fit ended,
# read from the fitted calibrator files: results/<name>/parameters.csv and its tables.
rule parameters:
    input:
        [path for *_, path in fitted_calibrators()],
    output:
        csv=LAYOUT.parameters,
        md=report(LAYOUT.table("parameters", "md"), caption="../report/parameters.rst", category="Tables"),
        tex=LAYOUT.table("parameters", "tex"),
    log:
        LAYOUT.log("parameters"),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        fits=fitted_calibrators(),
        language=config["report"]["language"],
    run:
        reports.parameters_step(params.fits, output.csv, output.md, output.tex, log=log[0], language=params.language)
