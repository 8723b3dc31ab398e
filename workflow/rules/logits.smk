# The only expensive step: each model's logits on its evaluation set, cached once.

from calibrepro.steps import inputs


# The request file carries the model's config entry and settings to the command line (instead of a
# page of JSON in the shell command); it is rewritten, and the logits redone, when they change.
localrules:
    logits_request,


rule logits_request:
    output:
        LAYOUT.logits_request("{dataset}", "{model}"),
    log:
        LAYOUT.log("logits_request", "{dataset}/{model}"),
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        request=logits_request,
    run:
        inputs.logits_request_step(params.request, output[0], log=log[0])


rule logits:
    input:
        request=LAYOUT.logits_request("{dataset}", "{model}"),
        files=logits_inputs,
    output:
        LAYOUT.logits("{dataset}", "{model}"),
    log:
        LAYOUT.log("logits", "{dataset}/{model}"),
    conda:
        "../envs/calibrepro.yaml"
    threads: lambda wildcards: logits_resources(wildcards)["threads"]
    resources:
        gpu=lambda wildcards: logits_resources(wildcards)["gpu"],
        mem_mb=lambda wildcards: logits_resources(wildcards)["mem_mb"],
        runtime=lambda wildcards: logits_resources(wildcards)["runtime"],
    params:
        python=PYTHON,
    run:
        # A user's file is read, checked and written by a step in this process; a network runs in a process of
        # its own (its threads, its GPU, its conda environment), which checks what it wrote.
        if model_spec(wildcards)["source"] == "logits":
            inputs.own_logits_step(input.request, output[0], log=log[0])
        else:
            shell(
                '{params.python} -m calibrepro.cli logits --request "$(cat {input.request:q})" --output {output:q}'
                " 2>&1 | tee {log:q}"
            )
