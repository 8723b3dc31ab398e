"""Calibrated regression (seed 002, second half): predictive distributions, recalibrators, metrics, data.

:mod:`.distributions` (Gaussian, Gaussian mixture, Student-t predictives), :mod:`.recalibration`
(isotonic one- and two-sided, std scaling; registry :data:`~.recalibration.RECALIBRATORS`),
:mod:`.metrics` (MSCE, miscalibration area, coverage, RMSE, NLL, CRPS, sharpness; registry
:data:`~.metrics.REGRESSION_METRICS`), :mod:`.data` (UCI wine and crime, the energy series, user
tables and prediction files), :mod:`.task` (the regression task on the pipeline's fit/evaluate seam,
:mod:`calibrepro.tasks`).
"""
