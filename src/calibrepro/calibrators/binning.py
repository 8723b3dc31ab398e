"""Histogram binning, one-vs-rest (Zadrozny & Elkan 2001; Guo et al. 2017)."""

from __future__ import annotations

import numpy as np

from calibrepro.calibrators.base import Calibrator, check_labels, check_logits, renormalise, softmax
from calibrepro.metrics.bins import bin_index


class HistogramBinning(Calibrator):
    """One-vs-rest histogram binning (Zadrozny & Elkan 2001; Guo et al. 2017), then row renormalisation.

    For class k, the float32 softmax probability ``p_ik`` falls into equal-width bin
    ``m`` = ``((m-1)/M, m/M]`` (0 in the first; edges as in :func:`calibrepro.metrics.bins.bin_index`,
    exact for float32 inputs).  The calibrated value is the fraction of calibration samples in
    that bin whose label is k (``positives / count``).  **A bin that received no calibration
    sample leaves the probability unchanged.**  Rows are then divided by their sum; an all-zero
    row becomes uniform.

    Fitted state: ``counts_`` and ``positives_`` (K, M) integers (so the JSON is exact);
    ``values_`` (K, M) float64 with NaN for empty bins.
    """

    display_names = {"ru": "Hist-binning", "en": "Hist. binning"}
    reference = "Zadrozny & Elkan 2001; Guo et al. 2017"

    def __init__(self, bins: int = 15):
        self.bins = bins

    def _split(self, p: np.ndarray):
        """Entries in the first bin (mask) and the (row, col, bin) of all the others."""
        e1 = np.float64(1.0) / np.float64(self.bins)
        # float32 array vs float64 scalar: compared in float64 (NumPy 2 promotion), exact
        small = p <= e1
        where = np.flatnonzero(~small)  # (much faster than a 2-D nonzero)
        rows, cols = np.divmod(where, p.shape[1])
        vals = p.reshape(-1)[where]
        return small, rows, cols, vals, bin_index(vals, self.bins)

    def fit(self, logits, labels) -> "HistogramBinning":
        """Count calibration samples and positives per (class, bin)."""
        if int(self.bins) != self.bins or self.bins < 1:
            raise ValueError(f"bins must be a positive integer, got {self.bins!r}")
        z = check_logits(logits)
        n, k = z.shape
        y = check_labels(labels, n, k)
        m = int(self.bins)
        p = softmax(z, "float32")
        _, _, cols, _, b = self._split(p)
        counts = np.bincount(cols * m + b, minlength=k * m).reshape(k, m)
        counts[:, 0] = n - np.bincount(cols, minlength=k)  # everything else is in bin 1
        py = p[np.arange(n), y]
        positives = np.bincount(y * m + bin_index(py, m), minlength=k * m).reshape(k, m)
        self.n_classes_ = int(k)
        self.counts_ = counts.astype(np.int64)
        self.positives_ = positives.astype(np.int64)
        self._finish()
        self.diagnostics_ = {"empty_bins": int((self.counts_ == 0).sum())}
        return self

    def _finish(self) -> None:
        with np.errstate(invalid="ignore", divide="ignore"):
            self.values_ = np.where(self.counts_ > 0, self.positives_ / np.maximum(self.counts_, 1), np.nan)

    def predict_proba(self, logits) -> np.ndarray:
        """Bin values (or the unchanged probability for empty bins), rows renormalised."""
        self._check_fitted()
        z = check_logits(logits, self.n_classes_)
        p = softmax(z, "float32")
        small, rows, cols, vals, b = self._split(p)
        first = self.values_[:, 0]
        q = np.empty(p.shape, dtype=np.float64)
        q[...] = first  # most entries are in bin 1: one broadcast write
        for k in np.flatnonzero(np.isnan(first)):  # classes whose first bin was empty
            q[:, k] = p[:, k]
        v = self.values_[cols, b]
        empty = np.isnan(v)
        v[empty] = vals[empty]
        q[rows, cols] = v
        return renormalise(q)

    def _fitted_params(self) -> dict:
        return {
            "n_classes": self.n_classes_,
            "counts": self.counts_.tolist(),
            "positives": self.positives_.tolist(),
        }

    def _set_fitted_params(self, params: dict) -> None:
        self.n_classes_ = int(params["n_classes"])
        self.counts_ = np.asarray(params["counts"], dtype=np.int64).reshape(self.n_classes_, int(self.bins))
        self.positives_ = np.asarray(params["positives"], dtype=np.int64).reshape(self.n_classes_, int(self.bins))
        self._finish()

    def parameters(self) -> dict[str, int]:
        """``bins``: the K x M bins of the K one-vs-rest histograms; ``empty_bins``: those that received no
        calibration sample, where the probability is left unchanged (the class docstring)."""
        self._check_fitted()
        return {"bins": int(self.counts_.size), "empty_bins": int((self.counts_ == 0).sum())}
