# Calibration of pretrained classifiers, from logits to the thesis's appendix:
#   logits -> split -> fit calibrator -> evaluate -> metrics.csv -> tables, figures, reproduction report.
# Configuration: config/config.yaml (the offline demo) unless --configfile is given; see config/README.md.


include: "workflow/rules/common.smk"


rule all:
    input:
        target_paths(),


# Only the regression part of a configuration: `snakemake regression --cores 2 --configfile <config>` (the target before --configfile).
rule regression:
    input:
        regression_paths(),


include: "workflow/rules/download.smk"
include: "workflow/rules/logits.smk"
include: "workflow/rules/calibrate.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/shift.smk"
include: "workflow/rules/uncertainty.smk"
include: "workflow/rules/conformal.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/curves.smk"
include: "workflow/rules/regression.smk"
include: "workflow/rules/regression_report.smk"
