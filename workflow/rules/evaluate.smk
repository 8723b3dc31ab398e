# Metrics of every calibrator on the test half, and the tidy table of all of them.


# Gathering the per-model CSVs into one takes a second: on a cluster it runs in the submitting
# Snakemake process instead of paying for a batch job of its own.
localrules:
    metrics,


rule evaluate:
    input:
        logits="results/logits/{dataset}/{model}.npz",
        split="results/splits/{dataset}/seed{seed}.npz",
        calibrators=lambda wildcards: calibrator_paths(wildcards).values(),
    output:
        metrics="results/evaluations/{dataset}/{model}/seed{seed}.csv",
        reliability="results/reliability/{dataset}/{model}/seed{seed}.json",
    log:
        "results/logs/evaluate/{dataset}/{model}/seed{seed}.log",
    priority: size_priority
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
    run:
        pipeline.evaluate_step(input.logits, input.split, output.metrics, output.reliability, log=log[0], **params)


rule metrics:
    input:
        evaluation_paths,
    output:
        "results/metrics.csv",
    log:
        "results/logs/metrics.log",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        pipeline.gather_metrics_step(input, output[0], log=log[0])
