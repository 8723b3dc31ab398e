"""Confidence-calibration experiments: calibrators, metrics, model zoo and report."""
