# Conformal prediction sets beside calibration: the test half split again (repeated, seeded), every calibrator's
# sets (LAC, APS, RAPS at each alpha) scored on it, conformal.csv, its tables, the temperature figures.

from calibrepro.steps import conformal


# Drawing the conformal splits and gathering the rows take a second: on a cluster they run in the submitting process.
localrules:
    conformal_split,
    conformal,
    conformal_tables,


rule conformal_split:
    input:
        LAYOUT.split("{dataset}", "{seed}"),
    output:
        LAYOUT.conformal_splits("{dataset}", "{seed}"),
    log:
        LAYOUT.log("conformal_split", "{dataset}/seed{seed}"),
    # the biggest data set's split first: its models' conformal_sets jobs are the longest
    priority: size_priority
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        repeats=CONFORMAL["repeats"],
        calibration_fraction=CONFORMAL["calibration_fraction"],
        seed=CONFORMAL["seed"],
    run:
        conformal.conformal_split_step(input[0], output[0], dataset=wildcards.dataset, log=log[0], **params)


# One job per model: every calibrator x score x alpha x repeat from the calibrators' test-half probabilities.
rule conformal_sets:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=LAYOUT.split("{dataset}", "{seed}"),
        conformal_splits=LAYOUT.conformal_splits("{dataset}", "{seed}"),
        calibrators=lambda wildcards: calibrator_paths(wildcards).values(),
    output:
        LAYOUT.conformal_part("{dataset}", "{model}", "{seed}"),
    log:
        LAYOUT.log("conformal_sets", "{dataset}/{model}/seed{seed}"),
    wildcard_constraints:
        dataset="|".join(map(re.escape, DATASETS)),
    priority: size_priority
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        **CONFORMAL_SETTINGS,
        calibrators=calibrator_paths,
        dataset=lambda wildcards: wildcards.dataset,
        model=lambda wildcards: wildcards.model,
    run:
        conformal.conformal_step(input.logits, input.split, input.conformal_splits, output[0], log=log[0], **params)


rule conformal:
    input:
        conformal_part_paths,
    output:
        LAYOUT.conformal,
    log:
        LAYOUT.log("conformal"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        conformal.gather_conformal_step(input, output[0], log=log[0])


rule conformal_tables:
    input:
        LAYOUT.conformal,
    output:
        md=report(LAYOUT.table("conformal", "md"), caption="../report/conformal.rst", category="Conformal"),
        tex=LAYOUT.table("conformal", "tex"),
    log:
        LAYOUT.log("conformal_tables"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        language=config["report"]["language"],
    run:
        conformal.conformal_tables_step(input[0], output.md, output.tex, log=log[0], **params)


rule conformal_figure:
    input:
        logits=LAYOUT.logits("{dataset}", "{model}"),
        split=lambda wildcards: LAYOUT.split(wildcards.dataset, SEEDS[0]),
        conformal_splits=lambda wildcards: LAYOUT.conformal_splits(wildcards.dataset, SEEDS[0]),
        calibrators=temperature_calibrator,
    output:
        sweep=LAYOUT.conformal_sweep("{dataset}", "{model}"),
        png=report(
            LAYOUT.conformal_figure("{dataset}", "{model}", "png"),
            caption="../report/conformal_figure.rst",
            category="Conformal",
        ),
        pdf=LAYOUT.conformal_figure("{dataset}", "{model}", "pdf"),
    log:
        LAYOUT.log("conformal_figure", "{dataset}/{model}"),
    wildcard_constraints:
        dataset="|".join(map(re.escape, DATASETS)),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        **CONFORMAL_SETTINGS,
        ts_calibrator=lambda wildcards, input: input.calibrators[0] if input.calibrators else None,
        dataset=lambda wildcards: wildcards.dataset,
        model=lambda wildcards: wildcards.model,
        language=config["report"]["language"],
    run:
        conformal.conformal_figure_step(
            input.logits,
            input.split,
            input.conformal_splits,
            output.sweep,
            output.png,
            output.pdf,
            log=log[0],
            **params,
        )
