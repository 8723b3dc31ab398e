"""Confidence-calibration experiments: calibrators, metrics, model zoo and report.

Importing the package pins the numerical libraries' kernels (:mod:`calibrepro.determinism`) before
anything else of it imports NumPy or torch.
"""

from calibrepro.determinism import pin_kernels

pin_kernels()
