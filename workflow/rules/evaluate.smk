# Metrics of every calibrator on the test half and how its fit ended, the tidy tables of all of them, and
# (when asked for) each calibrator's probabilities on the test half.

from calibrepro.steps import calibration


# Gathering the per-model CSVs into one takes a second: on a cluster it runs in the submitting
# Snakemake process instead of paying for a batch job of its own.
localrules:
    metrics,
    convergence,


rule evaluate:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
        calibrators=lambda wildcards: calibrator_paths(wildcards).values(),
    output:
        metrics=LAYOUT.evaluation("{dataset}", "{model}", "{seed}"),
        reliability=LAYOUT.reliability("{dataset}", "{model}", "{seed}"),
        convergence=LAYOUT.convergence_part("{dataset}", "{model}", "{seed}"),
    log:
        LAYOUT.log("evaluate", "{dataset}/{model}/seed{seed}"),
    wildcard_constraints:
        dataset="|".join(map(re.escape, DATASETS)),
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
        calibration.evaluate_step(
            input.logits,
            input.split,
            output.metrics,
            output.reliability,
            task="classification",
            convergence_output=output.convergence,
            log=log[0],
            **params,
        )


rule metrics:
    input:
        evaluation_paths,
    output:
        LAYOUT.metrics,
    log:
        LAYOUT.log("metrics"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        calibration.gather_metrics_step(input, output[0], log=log[0])


rule convergence:
    input:
        convergence_paths,
    output:
        LAYOUT.convergence,
    log:
        LAYOUT.log("convergence"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        calibration.gather_convergence_step(input, output[0], log=log[0])


# One calibrator's probabilities on the test half, the ones its metrics score: `calibrepro apply`'s file,
# written by that command. Not a target of a run unless report.export_probabilities asks for all of them
# (ImageNet: 25,000 x 1,000 float64, 200 MB, per model, method and seed); `snakemake <path>` writes one.
rule probabilities:
    input:
        calibrator=LAYOUT.calibrator("{dataset}", "{model}", "{method}", "{seed}"),
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
    output:
        LAYOUT.probabilities("{dataset}", "{model}", "{method}", "{seed}"),
    log:
        LAYOUT.log("probabilities", "{dataset}/{model}/{method}/seed{seed}"),
    wildcard_constraints:
        dataset="|".join(map(re.escape, DATASETS)),
    conda:
        "../envs/calibrepro.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        python=PYTHON,
    shell:
        "{params.python} -m calibrepro.cli apply {input.calibrator:q} {input.logits:q} --split {input.split:q}"
        " --half test --method {wildcards.method} -o {output:q} 2>&1 | tee {log:q}"
