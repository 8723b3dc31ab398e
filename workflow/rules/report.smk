# Thesis-style tables, reliability diagrams and the comparison with published values.


# These read only metrics.csv or one model's reliability bins and take about a second each: on a
# cluster they run in the submitting Snakemake process, not as batch jobs of their own.
localrules:
    table,
    reliability_figure,
    named_figure,
    reproduction,


rule table:
    input:
        "results/metrics.csv",
        **uncertainty_table_inputs(),  # issue 12: tie marks / interval cells (workflow/rules/uncertainty.smk)
    output:
        md=report("reports/tables/{metric}.md", caption="../report/table.rst", category="Tables"),
        tex="reports/tables/{metric}.tex",
    params:
        language=config["report"]["language"],
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        from calibrepro.report.tables import write_table

        write_table(
            input[0],
            wildcards.metric,
            output.md,
            output.tex,
            language=params.language,
            comparisons_csv=input.get("comparisons"),
            intervals_csv=input.get("intervals"),
        )


rule reliability_figure:
    input:
        lambda wildcards: f"results/reliability/{wildcards.dataset}/{wildcards.model}/seed{SEEDS[0]}.json",
    output:
        png=report(
            "reports/figures/reliability/{dataset}/{model}.png",
            caption="../report/reliability.rst",
            category="Reliability diagrams",
            subcategory="{dataset}",
        ),
        pdf="reports/figures/reliability/{dataset}/{model}.pdf",
    params:
        language=config["report"]["language"],
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        from calibrepro.report.figures import write_reliability_figure

        write_reliability_figure(
            input[0], output.png, output.pdf, language=params.language, intervals=RELIABILITY_LEVEL
        )


rule named_figure:
    input:
        lambda wildcards: f"results/reliability/{config['report']['figures'][wildcards.name]}/seed{SEEDS[0]}.json",
    output:
        png=report("reports/figures/{name}.png", caption="../report/figure.rst", category="Figures"),
        pdf="reports/figures/{name}.pdf",
    wildcard_constraints:
        name="|".join(config["report"]["figures"]) or "(?!)",
    params:
        language=config["report"]["language"],
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        from calibrepro.report.figures import write_reliability_figure

        write_reliability_figure(
            input[0], output.png, output.pdf, language=params.language, intervals=RELIABILITY_LEVEL
        )


rule reproduction:
    input:
        metrics="results/metrics.csv",
        published=[config["report"]["published"]] if config["report"]["published"] else [],
        **uncertainty_reproduction_inputs(),  # issue 12: "inside our interval" column
    output:
        report("reports/reproduction.md", caption="../report/reproduction.rst", category="Reproduction"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    run:
        from calibrepro.report.reproduction import write_reproduction_report

        write_reproduction_report(
            input.metrics,
            output[0],
            published_csv=config["report"]["published"],
            language="en",
            intervals_csv=input.get("intervals"),
        )
