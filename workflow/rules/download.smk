# Pinned files (weights, data sets, model code): fetched on the submit host, checksum-verified.

from calibrepro.steps import inputs


localrules:
    download,


rule download:
    output:
        f"{DOWNLOADS_DIR}/{{path}}",
    log:
        LAYOUT.log("download", "{path}"),
    wildcard_constraints:
        path="|".join(map(re.escape, DOWNLOADS)) or "(?!)",
    threads: 1
    resources:
        mem_mb=1000,
        runtime=60,
    params:
        mirrors=config["downloads"]["mirrors"],
        timeout=config["downloads"]["timeout"],
        retries=config["downloads"]["retries"],
    run:
        inputs.download_step(DOWNLOADS[wildcards.path], output[0], log=log[0], **params)
