# The only expensive step: each model's logits on its evaluation set, cached once.


rule logits:
    input:
        logits_inputs,
    output:
        "results/logits/{dataset}/{model}.npz",
    params:
        request=logits_request,
    log:
        "results/logs/logits/{dataset}/{model}.log",
    threads: lambda wildcards: logits_resources(wildcards)["threads"]
    resources:
        gpu=lambda wildcards: logits_resources(wildcards)["gpu"],
        mem_mb=lambda wildcards: logits_resources(wildcards)["mem_mb"],
        runtime=lambda wildcards: logits_resources(wildcards)["runtime"],
    shell:
        '"{PYTHON}" -m calibrepro.cli logits --request {params.request:q} --output {output:q} 2>&1 | tee {log:q}'
