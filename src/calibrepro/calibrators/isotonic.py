"""Isotonic regression, one-vs-rest (Zadrozny & Elkan 2002), bit-identical to scikit-learn's."""

from __future__ import annotations

import numpy as np
from scipy.interpolate import interp1d
from scipy.optimize import isotonic_regression as _scipy_isotonic_regression

from calibrepro.calibrators.base import (
    Calibrator,
    check_labels,
    check_logits,
    f32_from_json,
    f32_json,
    renormalise,
    softmax,
    spread,
)


_F32_EPS = np.float32(np.finfo(np.float32).resolution)  # 1e-6: scikit-learn's tie tolerance


def _transposed(a: np.ndarray, dtype=None, rows: int = 512) -> np.ndarray:
    """C-contiguous transpose of a 2-D array (optionally cast), copied in cache-sized row blocks.

    About 2.5x faster than ``np.ascontiguousarray(a.T)`` for (25000, 1000) float32.
    """
    out = np.empty(a.shape[::-1], dtype=a.dtype if dtype is None else dtype)
    for i in range(0, a.shape[0], rows):
        out[:, i : i + rows] = a[i : i + rows].T
    return out


def _unique_groups(s: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_make_unique`` grouping of every row of the row-sorted float32 array ``s``.

    scikit-learn walks the sorted X and starts a new group when ``x - start >= 1e-6`` in float32
    (``np.finfo(float32).resolution``), ``start`` being the first value of the current group.  A
    gap >= 1e-6 between neighbours therefore always starts a group; inside a run of smaller gaps
    that spans more than 1e-6 the greedy chain is followed, for all such runs of all rows at
    once: from each group start, a galloping then bisecting search (the test is monotone along
    the sorted run) finds the first value with ``x - start >= 1e-6``.  Returns the flat indices
    of the group starts (sorted).
    """
    k, n = s.shape
    flat = s.reshape(-1)
    start = np.empty(flat.size, dtype=bool)
    start[0] = True
    np.greater_equal(flat[1:] - flat[:-1], _F32_EPS, out=start[1:])
    start[::n] = True  # every row starts a group
    heads = np.flatnonzero(start)
    ends = np.append(heads[1:], flat.size)  # exclusive end of each run
    need = (flat[ends - 1] - flat[heads]) >= _F32_EPS  # run longer than 1e-6: split it
    cur, end = heads[need], ends[need]
    while cur.size:
        v = flat[cur]
        lo = cur + 1  # test false here (gap < 1e-6 inside a run)
        hi = end - 1  # test true here (checked above)
        step = 2
        open_ = np.ones(cur.size, dtype=bool)
        while True:  # gallop: probe cur + 2, 4, 8, ... below hi
            probe = cur + step
            idx = np.flatnonzero(open_ & (probe < hi))
            if not idx.size:
                break
            ok = (flat[probe[idx]] - v[idx]) >= _F32_EPS
            hit, miss = idx[ok], idx[~ok]
            hi[hit] = probe[hit]
            open_[hit] = False
            lo[miss] = probe[miss]
            step *= 2
        while True:  # bisect between lo (false) and hi (true)
            idx = np.flatnonzero(hi - lo > 1)
            if not idx.size:
                break
            mid = (lo[idx] + hi[idx]) // 2
            ok = (flat[mid] - v[idx]) >= _F32_EPS
            hi[idx[ok]] = mid[ok]
            lo[idx[~ok]] = mid[~ok]
        start[hi] = True
        more = (flat[end - 1] - flat[hi]) >= _F32_EPS
        cur, end = hi[more], end[more]
    return np.flatnonzero(start)


class IsotonicCalibration(Calibrator):
    """One-vs-rest isotonic regression (Zadrozny & Elkan 2002), then row renormalisation.

    Per class k: scikit-learn ``IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip")``
    fitted on the float32 softmax probabilities ``p_ik`` against ``1(y_i = k)``, prediction by
    its linear interpolation between thresholds (inputs clipped to the fitted range).  Rows
    are then divided by their sum; a row whose values are all 0 becomes uniform ``1/K``.

    Implementation: the fit re-implements scikit-learn's ``IsotonicRegression.fit`` for all
    classes at once -- one sort of every class column, scikit-learn's duplicate merging (values
    closer than 1e-6 in float32 are one point; see :func:`_unique_groups`), then the PAVA that
    scikit-learn calls (SciPy's, see :func:`_pava_like_sklearn`) per class and the same trimming
    of repeated thresholds.  Prediction replays ``scipy.interpolate.interp1d``'s float32 linear
    interpolation.  The result is bit-identical to calling scikit-learn per class (tested), and
    faster: at K=1000 with 25,000 + 25,000 samples, fit + predict take ~1.4 s instead of ~4.5 s
    for 1000 ``IsotonicRegression`` objects on the 2-core development machine.

    Fitted state: ``x_thresholds_`` / ``y_thresholds_``, lists (one per class) of float32
    arrays, exactly scikit-learn's ``X_thresholds_`` / ``y_thresholds_``.
    """

    display_names = {"ru": "Isotonic", "en": "Isotonic"}
    reference = "Zadrozny & Elkan 2002"

    def fit(self, logits, labels) -> "IsotonicCalibration":
        """Fit the K one-vs-rest isotonic regressions on the float32 softmax probabilities."""
        z = check_logits(logits)
        n, k = z.shape
        y = check_labels(labels, n, k)
        p = softmax(z, "float32")
        s = _transposed(p)
        s.sort(axis=1)  # (K, N): each class's probabilities sorted
        starts = _unique_groups(s)
        flat = s.reshape(-1)
        sizes = np.diff(np.append(starts, flat.size))
        # positives per group: locate each sample's true-class probability in its sorted row
        py = p[np.arange(n), y]
        order = np.argsort(y, kind="stable")
        cuts = np.searchsorted(y[order], np.arange(k + 1))
        where = np.empty(n, dtype=np.int64)
        for j in np.flatnonzero(np.diff(cuts)):
            rows = order[cuts[j] : cuts[j + 1]]
            where[rows] = j * n + np.searchsorted(s[j], py[rows], side="left")
        group = np.searchsorted(starts, where, side="right") - 1
        positives = np.bincount(group, minlength=starts.size)
        x_unique = flat[starts]
        weight = sizes.astype(np.float32)
        y_mean = positives.astype(np.float32) / weight  # float32, as scikit-learn's _make_unique
        bounds = np.searchsorted(starts, np.arange(k + 1, dtype=np.int64) * n)
        xs, ys = [], []
        for j in range(k):
            g = slice(bounds[j], bounds[j + 1])
            yj = _pava_like_sklearn(y_mean[g], weight[g])
            xj = x_unique[g]
            keep = np.ones(yj.shape[0], dtype=bool)
            keep[1:-1] = (yj[1:-1] != yj[:-2]) | (yj[1:-1] != yj[2:])
            xs.append(np.ascontiguousarray(xj[keep]))
            ys.append(np.ascontiguousarray(yj[keep]))
        self.n_classes_ = int(k)
        self.x_thresholds_ = xs
        self.y_thresholds_ = ys
        self.diagnostics_ = {"thresholds_per_class_mean": float(np.mean([len(x) for x in xs]))}
        return self

    def predict_proba(self, logits) -> np.ndarray:
        """Interpolated isotonic values per class (float32, as scikit-learn), rows renormalised."""
        self._check_fitted()
        z = check_logits(logits, self.n_classes_)
        pt = _transposed(softmax(z, "float32"))
        for j in range(self.n_classes_):  # in place, class by class
            pt[j] = _interp_f32(pt[j], self.x_thresholds_[j], self.y_thresholds_[j])
        return renormalise(_transposed(pt, np.float64))

    def _fitted_params(self) -> dict:
        return {
            "n_classes": self.n_classes_,
            "x_thresholds": [f32_json(x) for x in self.x_thresholds_],
            "y_thresholds": [f32_json(y) for y in self.y_thresholds_],
        }

    def _set_fitted_params(self, params: dict) -> None:
        self.n_classes_ = int(params["n_classes"])
        self.x_thresholds_ = [f32_from_json(x) for x in params["x_thresholds"]]
        self.y_thresholds_ = [f32_from_json(y) for y in params["y_thresholds"]]

    def parameters(self) -> dict[str, float]:
        """The thresholds of each class's isotonic fit (the points of its step-and-interpolate map, scikit-learn's
        ``X_thresholds_``) per class, summarised over the K classes: ``thresholds_mean``, ``_min``, ``_max``."""
        self._check_fitted()
        return spread("thresholds", [len(x) for x in self.x_thresholds_])


def _pava_like_sklearn(y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``sklearn.isotonic.isotonic_regression(y, sample_weight=weight, y_min=0, y_max=1)`` for float32 input.

    scikit-learn's function is three lines around SciPy's PAVA: ``scipy.optimize.
    isotonic_regression`` (float64 inside), the result cast back to the input dtype (float32)
    and clipped to [y_min, y_max] in place.  Calling SciPy directly skips scikit-learn's
    parameter validation: 0.015 s instead of 0.14 s for the 1000 classes of ImageNet (measured);
    the tests check bit-identity with ``IsotonicRegression``.
    """
    out = np.asarray(_scipy_isotonic_regression(y, weights=weight, increasing=True).x, dtype=y.dtype)
    np.clip(out, 0.0, 1.0, out)
    return out


def _interp_f32(t: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """scikit-learn ``IsotonicRegression.predict`` with ``out_of_bounds="clip"`` on float32 input.

    Clip to ``[x[0], x[-1]]``, then the same ``scipy.interpolate.interp1d(kind="linear")`` that
    scikit-learn calls, on float32: its arithmetic changed in SciPy 1.18 (``slope * (t - x_lo) +
    y_lo`` before, the convex combination of ``y_lo`` and ``y_hi`` since), so calling it keeps the
    predictions bit-identical to scikit-learn's under any SciPy (the tests check it).
    """
    t = np.clip(t, x[0], x[-1])
    if x.shape[0] == 1:
        return np.full(t.shape, y[0], dtype=np.float32)
    return interp1d(x, y, kind="linear", bounds_error=False, assume_sorted=True)(t).astype(np.float32, copy=False)
