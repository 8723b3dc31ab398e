# How sure is a number (issue 12): bootstrap intervals of every metric cell, paired comparisons with
# each row's best, mean ranks with Friedman/Nemenyi critical-difference diagrams, and the
# calibration-set-size study. Every rule calls one function of calibrepro.pipeline.

UNCERTAINTY = config["uncertainty"]
SIZE_STUDY = config["size_study"]
DATASETS = list(config["models"])


#: level of the Wilson error bars on the reliability diagrams (None: the thesis's style, no bars)
RELIABILITY_LEVEL = (
    UNCERTAINTY["level"] if config["report"]["reliability_intervals"] else None
)


def uncertainty_table_inputs():
    """Extra named inputs of the table rule: comparisons for tie marks, intervals for interval cells."""
    inputs = {}
    if config["report"]["mark_ties"]:
        inputs["comparisons"] = "results/comparisons.csv"
    if config["report"]["cells"] == "interval":
        inputs["intervals"] = "results/intervals.csv"
    return inputs


def uncertainty_reproduction_inputs():
    """Extra named input of the reproduction rule: the intervals, when they are computed."""
    return {"intervals": "results/intervals.csv"} if UNCERTAINTY["enabled"] else {}


def uncertainty_paths():
    """Targets of this file for `rule all` (nothing unless enabled in the config)."""
    paths = []
    if UNCERTAINTY["enabled"]:
        paths += [
            "results/intervals.csv",
            "results/comparisons.csv",
            "reports/tables/ranks.md",
        ]
        paths += [
            f"reports/figures/cd/{dataset}.{ext}"
            for dataset in DATASETS
            for ext in ("png", "pdf")
        ]
    if SIZE_STUDY["enabled"]:
        paths += ["results/size_study.csv", "reports/tables/size_study.md"]
        paths += [
            f"reports/figures/size_study/{dataset}.{ext}"
            for dataset in DATASETS
            for ext in ("png", "pdf")
        ]
    return paths


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
        calibrators=expand(
            "results/calibrators/{{dataset}}/{{model}}/{method}/seed{{seed}}.json",
            method=METHODS,
        ),
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
        metrics=METRICS,
        bins=BINS,
        settings=UNCERTAINTY,
    run:
        from calibrepro.pipeline import bootstrap_step

        bootstrap_step(
            input.logits,
            input.split,
            dict(zip(METHODS, input.calibrators)),
            input.evaluation,
            metrics=params.metrics,
            bins=params.bins,
            dataset=wildcards.dataset,
            model=wildcards.model,
            seed=int(wildcards.seed),
            resamples=params.settings["bootstrap"],
            level=params.settings["level"],
            bootstrap_seed=params.settings["seed"],
            intervals_output=output.intervals,
            comparisons_output=output.comparisons,
        )


rule intervals:
    input:
        [
            f"results/bootstrap/{d}/{m}/seed{s}.intervals.csv"
            for d, m in MODELS
            for s in SEEDS
        ],
    output:
        "results/intervals.csv",
    log:
        "results/logs/intervals.log",
    run:
        from calibrepro.pipeline import gather_table_step

        gather_table_step(input, output[0])


rule comparisons:
    input:
        [
            f"results/bootstrap/{d}/{m}/seed{s}.comparisons.csv"
            for d, m in MODELS
            for s in SEEDS
        ],
    output:
        "results/comparisons.csv",
    log:
        "results/logs/comparisons.log",
    run:
        from calibrepro.pipeline import gather_table_step

        gather_table_step(input, output[0])


rule ranks:
    input:
        "results/metrics.csv",
    output:
        md=report(
            "reports/tables/ranks.md",
            caption="../report/ranks.rst",
            category="Uncertainty",
        ),
        figures=[
            f"reports/figures/cd/{dataset}.{ext}"
            for dataset in DATASETS
            for ext in ("png", "pdf")
        ],
    log:
        "results/logs/ranks.log",
    params:
        metric=UNCERTAINTY["rank_metric"],
        alpha=UNCERTAINTY["alpha"],
        language=config["report"]["language"],
    run:
        from calibrepro.pipeline import rank_step

        rank_step(
            input[0],
            params.metric,
            output.md,
            {
                d: (f"reports/figures/cd/{d}.png", f"reports/figures/cd/{d}.pdf")
                for d in DATASETS
            },
            alpha=params.alpha,
            language=params.language,
        )


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
        settings=SIZE_STUDY,
        metrics=METRICS,
        bins=BINS,
    run:
        from calibrepro.pipeline import size_study_step

        size_study_step(
            input.logits,
            input.split,
            methods=METHODS,
            sizes=params.settings["sizes"],
            seeds=params.settings["seeds"],
            metrics=params.metrics,
            bins=params.bins,
            dataset=wildcards.dataset,
            model=wildcards.model,
            output=output[0],
        )


rule size_study_gather:
    input:
        [f"results/size_study/{d}/{m}.csv" for d, m in MODELS],
    output:
        "results/size_study.csv",
    log:
        "results/logs/size_study.log",
    run:
        from calibrepro.pipeline import gather_table_step

        gather_table_step(input, output[0])


rule size_study_report:
    input:
        "results/size_study.csv",
    output:
        md=report(
            "reports/tables/size_study.md",
            caption="../report/size_study.rst",
            category="Uncertainty",
        ),
        figures=[
            f"reports/figures/size_study/{dataset}.{ext}"
            for dataset in DATASETS
            for ext in ("png", "pdf")
        ],
    log:
        "results/logs/size_study_report.log",
    params:
        metric=SIZE_STUDY["metric"],
        language=config["report"]["language"],
    run:
        from calibrepro.pipeline import size_study_report_step

        size_study_report_step(
            input[0],
            params.metric,
            output.md,
            {
                d: (
                    f"reports/figures/size_study/{d}.png",
                    f"reports/figures/size_study/{d}.pdf",
                )
                for d in DATASETS
            },
            language=params.language,
        )
