# How sure is a number (issue 12): bootstrap intervals of every metric cell, paired comparisons with
# each row's best, and the calibration-set-size study (their reports, the mean ranks with
# Friedman/Nemenyi critical-difference diagrams and the size study's table: report.smk).

from calibrepro.steps import uncertainty


# Gathering reads small tidy files: on a cluster it runs in the submitting Snakemake process.
localrules:
    intervals,
    comparisons,
    size_study_gather,


rule bootstrap:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
        calibrators=lambda wildcards: calibrator_paths(wildcards).values(),
        evaluation=LAYOUT.evaluation("{dataset}", "{model}", "{seed}"),
    output:
        intervals=LAYOUT.bootstrap("{dataset}", "{model}", "{seed}", "intervals"),
        comparisons=LAYOUT.bootstrap("{dataset}", "{model}", "{seed}", "comparisons"),
    log:
        LAYOUT.log("bootstrap", "{dataset}/{model}/seed{seed}"),
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
        interval=UNCERTAINTY["interval"],
    run:
        uncertainty.bootstrap_step(
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
        report(LAYOUT.intervals, caption="../report/intervals.rst", category="Uncertainty"),
    log:
        LAYOUT.log("intervals"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        uncertainty.gather_uncertainty_step("intervals", input, output[0], log=log[0])


rule comparisons:
    input:
        lambda wildcards: bootstrap_paths("comparisons"),
    output:
        report(LAYOUT.comparisons, caption="../report/comparisons.rst", category="Uncertainty"),
    log:
        LAYOUT.log("comparisons"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        uncertainty.gather_uncertainty_step("comparisons", input, output[0], log=log[0])


rule size_study:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=lambda wildcards: LAYOUT.split(wildcards.dataset, SEEDS[0]),
    output:
        LAYOUT.size_study_part("{dataset}", "{model}"),
    log:
        LAYOUT.log("size_study", "{dataset}/{model}"),
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
        uncertainty.size_study_step(input.logits, input.split, output[0], log=log[0], **params)


rule size_study_gather:
    input:
        [LAYOUT.size_study_part(dataset, model) for dataset, model in MODELS],
    output:
        LAYOUT.size_study,
    log:
        LAYOUT.log("size_study_gather"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        uncertainty.gather_size_study_step(input, output[0], log=log[0])
