# Metrics of every calibrator on the test half, and the tidy table of all of them.


# Gathering the per-model CSVs into one takes a second: on a cluster it runs in the submitting
# Snakemake process instead of paying for a batch job of its own.
localrules:
    metrics,


rule evaluate:
    input:
        logits="results/logits/{dataset}/{model}.npz",
        split="results/splits/{dataset}/seed{seed}.npz",
        calibrators=expand(
            "results/calibrators/{{dataset}}/{{model}}/{method}/seed{{seed}}.json", method=METHODS
        ),
    output:
        metrics="results/evaluations/{dataset}/{model}/seed{seed}.csv",
        reliability="results/reliability/{dataset}/{model}/seed{seed}.json",
    params:
        metrics=METRICS,
        bins=BINS,
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    run:
        from calibrepro.pipeline import evaluate_step

        evaluate_step(
            input.logits,
            input.split,
            dict(zip(METHODS, input.calibrators)),
            metrics=params.metrics,
            bins=params.bins,
            dataset=wildcards.dataset,
            model=wildcards.model,
            seed=int(wildcards.seed),
            metrics_output=output.metrics,
            reliability_output=output.reliability,
        )


rule metrics:
    input:
        evaluation_paths,
    output:
        "results/metrics.csv",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        from calibrepro.pipeline import gather_metrics_step

        gather_metrics_step(input, output[0])
