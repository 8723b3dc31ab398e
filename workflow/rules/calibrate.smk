# Split each data set once per seed; fit every calibrator of a model on the calibration half.


rule split:
    input:
        split_source,
    output:
        "results/splits/{dataset}/seed{seed}.npz",
    log:
        "results/logs/split/{dataset}/seed{seed}.log",
    priority: size_priority
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        calibration_fraction=config["split"]["calibration_fraction"],
    run:
        pipeline.split_step(input[0], params.calibration_fraction, int(wildcards.seed), output[0], log=log[0])


# One job per model and seed fits all its calibrators: the logits are read once, not once per method.
rule fit_calibrators:
    input:
        logits="results/logits/{dataset}/{model}.npz",
        split="results/splits/{dataset}/seed{seed}.npz",
    output:
        [calibrator_path("{dataset}", "{model}", method, "{seed}") for method in METHODS],
    log:
        "results/logs/fit_calibrators/{dataset}/{model}/seed{seed}.log",
    priority: size_priority
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        bins=BINS,
        options=config["calibrator_options"],
    run:
        pipeline.fit_step(input.logits, input.split, calibrator_paths(wildcards), log=log[0], **params)
