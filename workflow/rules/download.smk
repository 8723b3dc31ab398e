# Pinned files (weights, data sets, model code): fetched on the submit host, checksum-verified.


localrules:
    download,


rule download:
    output:
        f"{DOWNLOADS_DIR}/{{path}}",
    wildcard_constraints:
        path="|".join(map(re.escape, DOWNLOADS)) or "(?!)",
    params:
        url=lambda wildcards: DOWNLOADS[wildcards.path].url,
        checksum=lambda wildcards: DOWNLOADS[wildcards.path].checksum,
    threads: 1
    resources:
        mem_mb=1000,
        runtime=60,
    run:
        from calibrepro.download import fetch

        fetch(
            DOWNLOADS[wildcards.path],
            output[0],
            mirrors=config["downloads"]["mirrors"],
            timeout=config["downloads"]["timeout"],
            retries=config["downloads"]["retries"],
        )
