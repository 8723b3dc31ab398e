# How sure is a number (issue 12): bootstrap intervals of every metric cell, paired comparisons with
# each row's best, mean ranks with Friedman/Nemenyi critical-difference diagrams, and the
# calibration-set-size study.


# Gathering and the rank/size-study reports read small tidy files: on a cluster they run in the
# submitting Snakemake process.
localrules:
    intervals,
    comparisons,
    ranks,
    size_study_gather,
    size_study_report,


rule bootstrap:
    input:
        logits="results/logits/{dataset}/{model}.npz",
        split="results/splits/{dataset}/seed{seed}.npz",
        calibrators=lambda wildcards: calibrator_paths(wildcards).values(),
        evaluation="results/evaluations/{dataset}/{model}/seed{seed}.csv",
    output:
        intervals="results/bootstrap/{dataset}/{model}/seed{seed}.intervals.csv",
        comparisons="results/bootstrap/{dataset}/{model}/seed{seed}.comparisons.csv",
    log:
        "results/logs/bootstrap/{dataset}/{model}/seed{seed}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        calibrators=calibrator_paths,
        metrics=METRICS,
        bins=BINS,
        dataset=lambda wildcards: wildcards.dataset,
        model=lambda wildcards: wildcards.model,
        seed=lambda wildcards: int(wildcards.seed),
        resamples=UNCERTAINTY["bootstrap"],
        level=UNCERTAINTY["level"],
        bootstrap_seed=UNCERTAINTY["seed"],
    run:
        pipeline.bootstrap_step(
            input.logits,
            input.split,
            input.evaluation,
            output.intervals,
            output.comparisons,
            log=log[0],
            **params,
        )


rule intervals:
    input:
        lambda wildcards: bootstrap_paths("intervals"),
    output:
        "results/intervals.csv",
    log:
        "results/logs/intervals.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        pipeline.gather_uncertainty_step("intervals", input, output[0], log=log[0])


rule comparisons:
    input:
        lambda wildcards: bootstrap_paths("comparisons"),
    output:
        "results/comparisons.csv",
    log:
        "results/logs/comparisons.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        pipeline.gather_uncertainty_step("comparisons", input, output[0], log=log[0])


rule ranks:
    input:
        "results/metrics.csv",
    output:
        md=report(
            "reports/tables/ranks.md",
            caption="../report/ranks.rst",
            category="Uncertainty",
        ),
        figures=dataset_figure_paths("cd"),
    log:
        "results/logs/ranks.log",
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
        pipeline.rank_step(input[0], output.md, log=log[0], **params)


rule size_study:
    input:
        logits="results/logits/{dataset}/{model}.npz",
        split=lambda wildcards: f"results/splits/{wildcards.dataset}/seed{SEEDS[0]}.npz",
    output:
        "results/size_study/{dataset}/{model}.csv",
    log:
        "results/logs/size_study/{dataset}/{model}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        methods=SIZE_STUDY["methods"] or METHODS,
        options=config["calibrator_options"],
        sizes=SIZE_STUDY["sizes"],
        seeds=SIZE_STUDY["seeds"],
        metrics=METRICS,
        bins=BINS,
        dataset=lambda wildcards: wildcards.dataset,
        model=lambda wildcards: wildcards.model,
    run:
        pipeline.size_study_step(input.logits, input.split, output[0], log=log[0], **params)


rule size_study_gather:
    input:
        [f"results/size_study/{dataset}/{model}.csv" for dataset, model in MODELS],
    output:
        "results/size_study.csv",
    log:
        "results/logs/size_study_gather.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        pipeline.gather_size_study_step(input, output[0], log=log[0])


rule size_study_report:
    input:
        "results/size_study.csv",
    output:
        md=report(
            "reports/tables/size_study.md",
            caption="../report/size_study.rst",
            category="Uncertainty",
        ),
        figures=dataset_figure_paths("size_study"),
    log:
        "results/logs/size_study_report.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        metric=SIZE_STUDY["metric"],
        figures=dataset_figures("size_study"),
        language=config["report"]["language"],
    run:
        pipeline.size_study_report_step(input[0], output.md, log=log[0], **params)
