# Calibration over training (issue 45): the curves that trained networks with `curves: {every: N}` record
# while they train (in their logits' metadata) gathered into one tidy file, a figure per data set, the table
# of the first, best and last epoch, the findings' section of the reproduction report, and Guo et al.'s fig. 1
# (confidence histogram and reliability diagram) of the networks with curves and the pretrained ones beside them.

from calibrepro.steps import curves


localrules:
    gather_curves,
    confidence_figure,


rule gather_curves:
    input:
        curve_logits(),
    output:
        LAYOUT.training_curves,
    log:
        LAYOUT.log("gather_curves"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        models=[(dataset, model, LAYOUT.logits(dataset, model)) for dataset, model in CURVE_MODELS],
    run:
        curves.gather_curves_step(params.models, output[0], log=log[0])


rule curves_report:
    input:
        curves=LAYOUT.training_curves,
        logits=curve_logits(),
        splits=[LAYOUT.split(dataset, SEEDS[0]) for dataset in CURVE_DATASETS],
    output:
        md=LAYOUT.table("curves", "md"),
        tex=LAYOUT.table("curves", "tex"),
        findings=LAYOUT.curves_findings,
        figures=[LAYOUT.dataset_figure("curves", dataset, ext) for dataset in CURVE_DATASETS for ext in ("png", "pdf")],
    log:
        LAYOUT.log("curves_report"),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        datasets=curve_datasets,
        figures={
            dataset: tuple(LAYOUT.dataset_figure("curves", dataset, ext) for ext in ("png", "pdf"))
            for dataset in CURVE_DATASETS
        },
        bins=BINS,
        resamples=UNCERTAINTY["bootstrap"] if UNCERTAINTY["enabled"] else 0,
        level=UNCERTAINTY["level"],
        seed=UNCERTAINTY["seed"],
    run:
        curves.curves_report_step(
            input.curves,
            params.datasets,
            params.figures,
            output.md,
            output.tex,
            output.findings,
            bins=params.bins,
            resamples=params.resamples,
            level=params.level,
            seed=params.seed,
            log=log[0],
        )


rule confidence_figure:
    input:
        lambda wildcards: [
            LAYOUT.reliability(wildcards.dataset, model, SEEDS[0]) for model in CONFIDENCE_MODELS[wildcards.dataset]
        ],
    output:
        png=LAYOUT.dataset_figure("confidence", "{dataset}", "png"),
        pdf=LAYOUT.dataset_figure("confidence", "{dataset}", "pdf"),
    log:
        LAYOUT.log("confidence_figure", "{dataset}"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        reliability=lambda wildcards: {
            model: LAYOUT.reliability(wildcards.dataset, model, SEEDS[0])
            for model in CONFIDENCE_MODELS[wildcards.dataset]
        },
    run:
        curves.confidence_figure_step(wildcards.dataset, params.reliability, output.png, output.pdf, log=log[0])
