# Split each data set once per seed; fit every calibrator on the calibration half.


rule split:
    input:
        split_source,
    output:
        "results/splits/{dataset}/seed{seed}.npz",
    params:
        calibration_fraction=config["split"]["calibration_fraction"],
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    run:
        from calibrepro.pipeline import split_step

        split_step(input[0], params.calibration_fraction, int(wildcards.seed), output[0])


rule fit_calibrator:
    input:
        logits="results/logits/{dataset}/{model}.npz",
        split="results/splits/{dataset}/seed{seed}.npz",
    output:
        "results/calibrators/{dataset}/{model}/{method}/seed{seed}.json",
    params:
        bins=BINS,
        options=lambda wildcards: config["calibrator_options"].get(wildcards.method, {}),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=15,
    run:
        from calibrepro.pipeline import fit_step

        fit_step(input.logits, input.split, wildcards.method, params.bins, output[0], params.options)
