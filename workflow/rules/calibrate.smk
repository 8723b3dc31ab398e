# Split each data set once per seed; fit every calibrator of a model on the calibration half.

from calibrepro.steps import calibration


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
        calibration.split_step(
            input[0],
            params.calibration_fraction,
            int(wildcards.seed),
            output[0],
            dataset=wildcards.dataset,
            log=log[0],
        )


# One job per model and seed fits its quick calibrators: the logits are read once, not once per method.
rule fit_calibrators:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
    output:
        [LAYOUT.calibrator("{dataset}", "{model}", method, "{seed}") for method in QUICK_METHODS],
    log:
        LAYOUT.log("fit_calibrators", "{dataset}/{model}/seed{seed}"),
    priority: size_priority
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        bins=BINS,
        options={
            method: config["calibrator_options"][method]
            for method in QUICK_METHODS
            if method in config["calibrator_options"]
        },
    run:
        calibration.fit_step(
            input.logits,
            input.split,
            quick_calibrator_paths(wildcards),
            task="classification",
            log=log[0],
            **params,
        )


# The full-matrix methods (Dir-L2, Dir-ODIR, MS-ODIR) take seconds to hours: a job each, so that a killed
# or failed fit keeps the other methods' files (a rerun fits only what is missing), and each asks for the
# time the cost model expects for its method, grid and the model's logits (calibrepro.calibrators.cost.fit_minutes).
rule fit_calibrator:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
    output:
        LAYOUT.calibrator("{dataset}", "{model}", "{method}", "{seed}"),
    log:
        LAYOUT.log("fit_calibrator", "{dataset}/{model}/{method}/seed{seed}"),
    wildcard_constraints:
        method="|".join(OWN_JOB_METHODS) or "(?!x)x",
    priority: size_priority
    threads: FIT_THREADS
    resources:
        mem_mb=4000,
        runtime=fit_runtime,
    params:
        bins=BINS,
        options=lambda wildcards: {wildcards.method: config["calibrator_options"].get(wildcards.method, {})},
    run:
        calibration.fit_step(
            input.logits,
            input.split,
            {wildcards.method: output[0]},
            task="classification",
            log=log[0],
            bins=params.bins,
            options=params.options,
            threads=threads,
        )
