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
        report(LAYOUT.intervals, caption="../report/intervals.rst", category="Uncertainty"),
    log:
        LAYOUT.log("intervals"),
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
        report(LAYOUT.comparisons, caption="../report/comparisons.rst", category="Uncertainty"),
    log:
        LAYOUT.log("comparisons"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        pipeline.gather_uncertainty_step("comparisons", input, output[0], log=log[0])


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
        pipeline.rank_step(input[0], output.md, log=log[0], **params)


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
        pipeline.size_study_step(input.logits, input.split, output[0], log=log[0], **params)


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
        pipeline.gather_size_study_step(input, output[0], log=log[0])


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
        pipeline.size_study_report_step(input[0], output.md, log=log[0], **params)
