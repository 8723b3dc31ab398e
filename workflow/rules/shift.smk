# Calibrated on one data set, tested on another (datasets.<key>.calibrate_on): each model of the
# first set, with the calibrators fitted on its calibration half, evaluated on every sample of the second.

from calibrepro.steps import calibration


rule evaluate_shift:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        calibrated_on=lambda wildcards: LAYOUT.logits(SHIFTS[wildcards.dataset], wildcards.model),
        calibrators=lambda wildcards: shift_calibrator_paths(wildcards).values(),
    output:
        metrics=LAYOUT.evaluation("{dataset}", "{model}", "{seed}"),
        reliability=LAYOUT.reliability("{dataset}", "{model}", "{seed}"),
        convergence=LAYOUT.convergence_part("{dataset}", "{model}", "{seed}"),
    log:
        LAYOUT.log("evaluate_shift", "{dataset}/{model}/seed{seed}"),
    wildcard_constraints:
        dataset="|".join(map(re.escape, SHIFTS)) or "(?!)",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    params:
        calibrators=lambda wildcards: shift_calibrator_paths(wildcards),
        metrics=METRICS,
        bins=BINS,
        dataset=lambda wildcards: wildcards.dataset,
        model=lambda wildcards: wildcards.model,
        seed=lambda wildcards: int(wildcards.seed),
    run:
        calibration.evaluate_step(
            input.logits,
            None,
            output.metrics,
            output.reliability,
            task="classification",
            calibrated_on=input.calibrated_on,
            convergence_output=output.convergence,
            log=log[0],
            **params,
        )
