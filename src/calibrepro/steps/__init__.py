"""The pipeline's steps on files: the door from the Snakemake rules to the library.

Every rule calls one ``*_step`` function; each rule file calls the steps of one module (the
logits rule of a network goes through the command line, ``calibrepro logits``, in a process of its own):

==================================================  ===============================================
``workflow/rules/download.smk``, ``logits.smk``     :mod:`.inputs`
``workflow/rules/calibrate.smk``, ``evaluate.smk``  :mod:`.calibration` (the steps every task shares)
``workflow/rules/shift.smk``                        :mod:`.calibration`
``workflow/rules/uncertainty.smk``                  :mod:`.uncertainty`
``workflow/rules/report.smk``                       :mod:`.reports`
``workflow/rules/regression.smk``                   :mod:`calibrepro.regression.steps` (and the
                                                    shared evaluation of :mod:`.calibration`)
``workflow/rules/regression_report.smk``            :mod:`calibrepro.regression.report_steps`
``workflow/rules/common.smk`` (start and end)       :mod:`.run`; the fit jobs' runtimes:
                                                    :mod:`calibrepro.calibrators.cost`
==================================================  ===============================================

Each step reads its inputs through the module that owns their format, does the work, writes its
outputs atomically, and records what it did in its ``log`` file (:func:`.run.step_log`). The compute
steps are decorated with :func:`calibrepro.workers.offload`: in a local run they execute in worker
processes (the threads only wait), elsewhere in the caller. The Snakefile imports these modules to
parse the workflow (on every start, dry runs and cluster jobs included), so the heavy libraries
(torch, scikit-learn, matplotlib: about 4 s) are imported by the steps that use them, not here.
A new task adds its own step modules in its package and its own rule files (docs/architecture.md).
"""
