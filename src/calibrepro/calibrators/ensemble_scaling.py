"""Ensemble temperature scaling (ETS; Zhang, Kailkhura & Han 2020, "Mix-n-Match", ICML, sec. 3.1).

``q = w_1 softmax(z / T) + w_2 softmax(z) + w_3 / K`` with ``w`` on the probability simplex
(``w >= 0, sum w = 1``): a convex combination of the temperature-scaled, the uncalibrated and
the uniform prediction (the paper's eq. for ETS).  As in the paper, ``T`` is fitted first and the
weights second, on the calibration half:

* ``T``: :class:`~calibrepro.calibrators.scaling.TemperatureScaling` (NLL, Guo et al. 2017), the
  paper's "standard TS" member.  The authors' released code (``ets_calibrate`` in
  Mix-n-Match-Calibration) fits T with the squared error instead; the NLL temperature is used here
  so that the ETS member is exactly this pipeline's temperature-scaling column.
* ``w``: minimises the mean squared error ``1/N sum_i ||q_i - e_{y_i}||^2`` (the Brier score;
  the authors' code uses ``loss='mse'`` for the weights), a convex quadratic on the 2-simplex.
  It is solved exactly (no iterative optimiser): for every face of the simplex (7 of them) the
  equality-constrained quadratic is solved in closed form, infeasible solutions (a negative
  weight) are dropped, and the face with the lowest objective wins (first in a fixed order on
  ties).  The authors use SLSQP for the same problem; the exact solution is at least as good.

Predictions are float64; the accuracy of ``argmax q`` equals the model's (all three members
rank classes alike or uniformly), as the paper notes (accuracy-preserving).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from calibrepro.calibrators.base import Calibrator, check_labels, check_logits, softmax
from calibrepro.calibrators.scaling import TemperatureScaling

#: the members' names, in the order of ``weights_``
MEMBERS = ("temperature_scaled", "uncalibrated", "uniform")


def simplex_least_squares(gram: np.ndarray, linear: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact ``argmin_{w in simplex} w^T G w - 2 c^T w`` for a PSD 3x3 ``G`` (all 7 faces tried)."""
    m = len(linear)
    best, best_value = None, np.inf
    for size in range(m, 0, -1):
        for face in combinations(range(m), size):
            idx = list(face)
            # KKT of min over w_S with sum(w_S) = 1: [2 G_SS, 1; 1^T, 0] [w_S; nu] = [2 c_S; 1]
            kkt = np.zeros((size + 1, size + 1))
            kkt[:size, :size] = 2.0 * gram[np.ix_(idx, idx)]
            kkt[:size, size] = kkt[size, :size] = 1.0
            rhs = np.append(2.0 * linear[idx], 1.0)
            solution = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:size]
            if np.any(solution < -1e-12) or abs(solution.sum() - 1.0) > 1e-9:
                continue
            w = np.zeros(m)
            w[idx] = np.clip(solution, 0.0, None)
            w /= w.sum()
            value = float(w @ gram @ w - 2.0 * linear @ w)
            if value < best_value - 1e-15:
                best, best_value = w, value
    return best, best_value


class EnsembleTemperatureScaling(Calibrator):
    """Ensemble temperature scaling (ETS; Zhang et al. 2020, sec. 3.1): see the module docstring."""

    display_names = {"ru": "ETS", "en": "ETS"}
    reference = "Zhang, Kailkhura & Han 2020 (Mix-n-Match, ICML), sec. 3.1"

    def fit(self, logits, labels) -> "EnsembleTemperatureScaling":
        """Temperature by NLL, then the simplex weights by exact least squares (Brier score)."""
        z = check_logits(logits)
        n, k = z.shape
        y = check_labels(labels, n, k)
        ts = TemperatureScaling().fit(z, y)
        members = self._members(z, ts.inverse_temperature_)
        onehot = np.zeros((n, k))
        onehot[np.arange(n), y] = 1.0
        # einsum's own loop, not BLAS: the sums do not depend on the BLAS thread count
        gram = np.array([[np.einsum("ij,ij->", a, b) for b in members] for a in members]) / n
        linear = np.array([np.einsum("ij,ij->", a, onehot) for a in members]) / n
        w, value = simplex_least_squares(gram, linear)
        self.n_classes_ = k
        self.inverse_temperature_ = ts.inverse_temperature_
        self.weights_ = w
        self.diagnostics_ = {
            "temperature": ts.diagnostics_,
            "weights": {
                "solver": "exact least squares on the 2-simplex (all faces)",
                "members": list(MEMBERS),
                "brier": value + float(onehot.sum()) / n,
            },
        }
        return self

    @staticmethod
    def _members(z: np.ndarray, inverse_temperature: float) -> list[np.ndarray]:
        """The temperature-scaled (the temperature-scaling column's own ``a * z``), uncalibrated and uniform members."""
        k = z.shape[1]
        scaled = np.multiply(z, np.float64(inverse_temperature), dtype=np.float64)
        return [softmax(scaled, "float64"), softmax(z, "float64"), np.full(z.shape, 1.0 / k)]

    def predict_proba(self, logits) -> np.ndarray:
        """``w_1 softmax(z / T) + w_2 softmax(z) + w_3 / K`` in float64."""
        self._check_fitted()
        z = check_logits(logits, self.n_classes_)
        p0, p1, p2 = self._members(z, self.inverse_temperature_)
        return self.weights_[0] * p0 + self.weights_[1] * p1 + self.weights_[2] * p2

    def _fitted_params(self) -> dict:
        return {
            "n_classes": self.n_classes_,
            "inverse_temperature": self.inverse_temperature_,
            "temperature": 1.0 / self.inverse_temperature_,
            "weights": self.weights_.tolist(),
        }

    def _set_fitted_params(self, params: dict) -> None:
        self.n_classes_ = int(params["n_classes"])
        self.inverse_temperature_ = float(params["inverse_temperature"])
        self.weights_ = np.asarray(params["weights"], dtype=np.float64)

    def parameters(self) -> dict[str, float]:
        """The member temperature ``temperature`` T (and ``inverse_temperature`` 1/T) and the simplex weights
        ``weight_temperature_scaled``, ``weight_uncalibrated``, ``weight_uniform`` (w_1, w_2, w_3 of the module
        docstring; Zhang et al. 2020, sec. 3.1)."""
        self._check_fitted()
        weights = {f"weight_{member}": float(w) for member, w in zip(MEMBERS, self.weights_)}
        return {"temperature": 1.0 / self.inverse_temperature_, "inverse_temperature": self.inverse_temperature_,
                **weights}
