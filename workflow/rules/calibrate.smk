# Split each data set once per seed; fit every calibrator of a model on the calibration half.


rule split:
    input:
        split_source,
    output:
        LAYOUT.split("{dataset}", "{seed}"),
    log:
        LAYOUT.log("split", "{dataset}/seed{seed}"),
    priority: size_priority
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        calibration_fraction=config["split"]["calibration_fraction"],
    run:
        pipeline.split_step(
            input[0],
            params.calibration_fraction,
            int(wildcards.seed),
            output[0],
            dataset=wildcards.dataset,
            log=log[0],
        )


# One job per model and seed fits all its calibrators: the logits are read once, not once per method.
rule fit_calibrators:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
    output:
        [LAYOUT.calibrator("{dataset}", "{model}", method, "{seed}") for method in METHODS],
    log:
        LAYOUT.log("fit_calibrators", "{dataset}/{model}/seed{seed}"),
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
