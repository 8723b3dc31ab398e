"""Full-matrix calibrators of Kull et al. 2019: Dirichlet calibration (Dir-L2, Dir-ODIR), MS-ODIR.

Kull, Perello-Nieto, Kängsepp, Silva Filho, Song & Flach, "Beyond temperature scaling: Obtaining
well-calibrated multi-class probabilities with Dirichlet calibration", NeurIPS 2019, section 3:
the calibration map is ``q = softmax(W x + b)`` with a full K x K matrix ``W`` and intercept
``b``, where ``x = log p`` (log of the uncalibrated probabilities; Dirichlet calibration, eq. (2)
of the paper, ``mu_DirLin(q; W, b) = sigma(W ln q + b)``) or ``x = z`` (the logits; matrix
scaling, Guo et al. 2017).  ``W`` and ``b`` minimise the mean negative log-likelihood of the
calibration half plus a regulariser (paper, section 3 "Regularisation"):

* **L2** (Dir-L2): ``lambda / (K (K + 1)) * (sum_ij w_ij^2 + sum_j b_j^2)``;
* **ODIR** (off-diagonal and intercept regularisation; Dir-ODIR, MS-ODIR):
  ``lambda / (K (K - 1)) * sum_{i != j} w_ij^2 + mu / K * sum_j b_j^2``.

The division by the number of penalised entries is the paper's ODIR normalisation; the
``dirichletcal`` package applies the same scaling with ``reg_norm=True`` (and ``ref_row=False``
gives its objective exactly ours; its default ``ref_row=True`` subtracts the last row of
``W, b`` before penalising, a different problem).  As in the paper (section 5), ``lambda``
(and ``mu``) are chosen by K-fold cross-validation inside the calibration half over a grid
(stratified folds, seeded; score: held-out mean NLL, unpenalised; ties go to the first grid
point), then the model is refitted on the whole calibration half with the chosen values.  The
test half is never seen: :meth:`fit` receives only calibration data.

Numerics.  ``log p`` is the float64 log-softmax ``z - logsumexp(z)`` (no clipping: it is the log
of the float64 softmax without underflow to ``log 0``).  Fits minimise the objective in float64
with scipy's L-BFGS-B and an analytic gradient (:func:`_lbfgs_fit`), in centred coordinates,
starting from the identity map ``W = I, b = 0`` (the uncalibrated probabilities); the loss and
gradient are evaluated with numpy on the CPU, or with torch on the GPU when ``device`` is
``auto`` and one is present.  On the CPU results are bit-identical across runs (BLAS is
single-threaded during the fits); on a GPU they are repeatable on that GPU but may differ from
the CPU's in the last bits (different matrix-multiply kernels), so the fitted JSON records the
device type.  Predictions are always computed on the CPU with numpy in float64.

Threads.  BLAS runs single-threaded during these fits (:func:`one_blas_thread`).

Cost and limits.  One loss-and-gradient evaluation costs about ``4 N K^2`` floating-point
operations (two N x K x K products); a fit typically needs 100-2000 evaluations (more the weaker the regularisation), and the
cross-validation ``folds * len(grid)`` fits plus one refit.  Before fitting on the CPU the work is
estimated with a nominal 200 evaluations per fit; above ``cpu_flop_budget`` (default 1e14, a few
hours on 2 cores at ~10 GFLOP/s) :meth:`fit` fails at once with a message saying what to change
(a GPU, a single grid point, fewer folds or grid points).  With the default grid this refuses
ImageNet (K = 1000, N = 25,000: ~1.5e15) on the CPU but allows a single-point fit there (~2e13)
and the full grid at K = 100 (~3e12).  A GPU has no limit.
"""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from typing import ClassVar

import numpy as np

from calibrepro.calibrators.base import Calibrator, check_labels, check_logits, softmax64_inplace

#: default regularisation grids (normalised penalties, see the module docstring)
DEFAULT_LAMBDAS = (1e-2, 1e-1, 1.0, 10.0, 100.0)
DEFAULT_MUS = (1e-2, 1.0, 100.0)
#: nominal loss-and-gradient evaluations per fit, for the CPU cost estimate
_NOMINAL_EVALUATIONS = 200


class CalibrationCostError(ValueError):
    """A fit would exceed its CPU budget; the message says which option to change."""


def log_softmax64(logits: np.ndarray) -> np.ndarray:
    """float64 ``z - logsumexp(z)`` per row: the log of the float64 softmax, never ``-inf``."""
    s = np.array(logits, dtype=np.float64, copy=True, order="C")
    s -= s.max(axis=1, keepdims=True)
    s -= np.log(np.exp(s).sum(axis=1, keepdims=True))
    return s


def check_grid(values, name: str) -> tuple[float, ...]:
    """A non-empty grid of finite, non-negative regularisation strengths, as floats."""
    grid = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=np.float64)))
    if not grid:
        raise ValueError(f"{name}: the regularisation grid is empty; give at least one value >= 0")
    bad = [v for v in grid if not np.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"{name}: regularisation strengths must be finite and >= 0, got {bad}")
    return grid


def _backend(device):
    """(array module, row-max) for the fitting device: numpy on the CPU, torch on a GPU.

    numpy rather than torch on the CPU: with several processes on few cores, torch's intra-op
    thread pool made each small operation ~1000x slower (15 ms instead of 12 us for a 450 x 10
    product, measured on the 2-core build machine under load), and numpy's small products run
    single-threaded; setting torch's thread count would change process-wide state.
    """
    if device.type == "cpu":
        return np, lambda s: np.amax(s, axis=1, keepdims=True)
    import torch

    return torch, lambda s: torch.amax(s, dim=1, keepdim=True)


_blas_lock = threading.Lock()
_blas_state = {"users": 0, "limiter": None}


@contextmanager
def one_blas_thread():
    """Run the block with one BLAS thread; nested and concurrent uses share one limit.

    Why: scipy's L-BFGS-B step makes many small BLAS calls, and on a loaded 2-core machine
    OpenBLAS's threads made each step ~12 ms instead of ~0.4 ms (measured: one K = 10 fit took
    25 s instead of 0.75 s, same result).  And determinism: with one thread, BLAS reductions
    (dot products of the L-BFGS two-loop recursion) are summed in one fixed order.  The limit is
    process-wide (threadpoolctl), so it is taken when the first fit starts and released when
    the last concurrent one ends: every fit of this module runs entirely single-threaded in BLAS.
    The other calibrators use no threaded BLAS reduction, so their results do not depend on it.
    """
    from threadpoolctl import threadpool_limits

    with _blas_lock:
        if _blas_state["users"] == 0:
            _blas_state["limiter"] = threadpool_limits(1, "blas")
        _blas_state["users"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_state["users"] -= 1
            if _blas_state["users"] == 0:
                _blas_state["limiter"].restore_original_limits()
                _blas_state["limiter"] = None


def _lbfgs_fit(x, y, lam: float, mu: float, penalty: str, max_iter: int, device) -> tuple:
    """Minimise mean NLL of ``softmax(x W^T + b)`` + penalty from ``W = I, b = 0``; return (W, b, info).

    ``x`` (N, K) float64 and ``y`` (N,) int64 are numpy arrays.  Loss and analytic gradient
    (``dL/dW = (P - Y)^T x / N``, ``dL/db = sum_i (P - Y)_i / N``, plus the penalty's
    ``2 lambda w / count``) are computed in float64 on ``device`` (numpy on the CPU, torch on a
    GPU, see :func:`_backend`); scipy's L-BFGS-B (``maxcor=10``) steps on the CPU.  scipy rather
    than ``torch.optim.LBFGS``: its Fortran driver costs microseconds per step where torch's
    Python loop cost ~20 ms per evaluation at K = 10 (measured, 450 samples); it is deterministic.
    """
    from scipy.optimize import minimize

    xp, rowmax = _backend(device)
    n, k = x.shape
    label_at = np.arange(n) * k + y  # flat index of each sample's true class in an (N, K) array
    if penalty == "l2":
        cw, cb = np.full((k, k), 2.0 * lam / (k * (k + 1))), 2.0 * lam / (k * (k + 1))
    else:
        cw, cb = (1.0 - np.eye(k)) * (2.0 * lam / (k * (k - 1))), 2.0 * mu / k
    # Centred coordinates: s = W (x - m) + c with c = b + W m, m the column means of x.  The same
    # model and objective (the penalty is on b = c - W m), but the W and c directions are
    # decorrelated, which L-BFGS needs on log-probabilities (every column shares -logsumexp z):
    # measured at K = 100, lambda = mu = 0.01, Dir-ODIR reached 0.128 in 500 iterations
    # without centring and a lower objective with it.
    m = x.mean(axis=0)
    xc = x - m
    ones_n, ones_k = np.ones(n), np.ones(k)
    if xp is not np:
        xc, cw, m, label_at, ones_n, ones_k = (
            xp.from_numpy(np.ascontiguousarray(a)).to(device) for a in (xc, cw, m, label_at, ones_n, ones_k)
        )
    evaluations = []

    # Few, in-place operations: at the demo's K = 10 and 360 samples one evaluation is ~20 small
    # array operations, and their fixed cost, not the arithmetic, sets the fit time (sums as
    # products with a vector of ones, the true-class entries by flat index).
    def fun(theta: np.ndarray):
        t = theta if xp is np else xp.from_numpy(theta).to(device)
        w, c = t[: k * k].reshape(k, k), t[k * k :]
        b = c - w @ m
        s = xc @ w.T
        s += c
        s -= s.max()  # one shift for all rows (a row-wise max costs more than the rest at K = 10) ...
        e = xp.exp(s)
        total = e @ ones_k
        if total.min() < 1e-250:  # ... unless a row lies so far below it that its exponentials underflow
            s -= rowmax(s)
            e = xp.exp(s)
            total = e @ ones_k
        picked = s.reshape(-1)[label_at].sum()
        nll = (xp.log(total).sum() - picked) / n
        e /= total[:, None]
        e.reshape(-1)[label_at] -= 1.0  # P - Y
        pb = cb * b  # gradient of the intercept penalty in b
        gw = (e.T @ xc) / n
        gw += cw * w
        gw -= pb[:, None] * m[None, :]
        gc = (ones_n @ e) / n + pb
        loss = float(nll + 0.5 * ((cw * w * w).sum() + cb * (b @ b)))
        grad = xp.concatenate([gw.reshape(-1), gc]) if xp is np else xp.cat([gw.reshape(-1), gc]).cpu().numpy()
        evaluations.append((loss, float(nll)))
        return loss, grad

    theta0 = np.concatenate([np.eye(k).reshape(-1), m])  # W = I, b = 0
    options = {"maxiter": int(max_iter), "maxfun": int(max_iter) * 5 // 4, "maxcor": 10, "ftol": 1e-12, "gtol": 1e-7}
    with one_blas_thread():
        result = minimize(fun, theta0, jac=True, method="L-BFGS-B", options=options)
    loss, grad = fun(result.x)
    info = {
        "optimizer": "scipy.optimize.minimize(method='L-BFGS-B')",
        "settings": options,
        "n_iter": int(result.nit),
        "n_eval": int(result.nfev),
        "initial_loss": evaluations[0][0],
        "final_loss": loss,
        "final_nll": evaluations[-1][1],
        "final_grad_max_abs": float(np.abs(grad).max()),
        "stop_reason": str(result.message),
        "converged": bool(result.success),
    }
    w = result.x[: k * k].reshape(k, k).copy()
    m = m if xp is np else m.cpu().numpy()
    return w, result.x[k * k :] - w @ m, info


class _MatrixCalibrator(Calibrator):
    """Shared fit/CV/predict of ``softmax(W x + b)`` (module docstring)."""

    #: "log_probabilities" (Dirichlet calibration) or "logits" (matrix scaling)
    _features: ClassVar[str]
    #: "l2" or "odir"
    _penalty: ClassVar[str]

    def _grid(self) -> list[tuple[float, float]]:
        lambdas = check_grid(self.lambdas, f"calibrator_options.{self.method}.lambdas")
        if self._penalty == "l2":
            return [(lam, 0.0) for lam in lambdas]
        mus = check_grid(self.mus, f"calibrator_options.{self.method}.mus")
        return [(lam, mu) for lam in lambdas for mu in mus]

    def _x(self, z: np.ndarray) -> np.ndarray:
        if self._features == "log_probabilities":
            return log_softmax64(z)
        return np.array(z, dtype=np.float64, order="C")

    def _check_budget(self, n: int, k: int, fits: int, device) -> None:
        if device.type != "cpu":
            return
        work = fits * _NOMINAL_EVALUATIONS * 4.0 * n * k * k
        if work > self.cpu_flop_budget:
            raise CalibrationCostError(
                f"{self.method}: fitting on the CPU would take about {work:.1e} floating-point operations "
                f"({fits} full {k}x{k} fits on {n} samples: {self.folds}-fold cross-validation over "
                f"{fits - 1} grid points and a refit), more than calibrator_options.{self.method}."
                f"cpu_flop_budget = {self.cpu_flop_budget:.1e}. Run on a GPU (device: auto picks one), "
                f"or give a single value in calibrator_options.{self.method}.lambdas"
                + ("" if self._penalty == "l2" else " and .mus")
                + " (no cross-validation), or raise cpu_flop_budget"
            )

    def fit(self, logits, labels) -> "_MatrixCalibrator":
        """Choose (lambda, mu) by cross-validation on the calibration half, then refit on all of it."""
        from sklearn.model_selection import StratifiedKFold

        from calibrepro.inference import select_device

        z = check_logits(logits)
        n, k = z.shape
        y = check_labels(labels, n, k)
        grid = self._grid()
        folds = int(self.folds)
        if len(grid) > 1 and not 2 <= folds <= n:
            raise ValueError(
                f"calibrator_options.{self.method}.folds = {self.folds}: need 2 <= folds <= {n} "
                "(the calibration samples) to cross-validate the grid"
            )
        device = select_device(self.device)
        fits = 1 + (folds * len(grid) if len(grid) > 1 else 0)
        self._check_budget(n, k, fits, device)
        x = self._x(z)
        cv = None
        if len(grid) > 1:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                splits = list(StratifiedKFold(folds, shuffle=True, random_state=int(self.seed)).split(z, y))
            scores = []
            for lam, mu in grid:
                total = 0.0
                for train, held in splits:
                    w, b, _ = _lbfgs_fit(x[train], y[train], lam, mu, self._penalty, self.max_iter, device)
                    total += _nll_sum(x[held], y[held], w, b)
                scores.append(total / n)
            best = int(np.argmin(scores))  # first minimum: ties go to the earlier grid point
            cv = {
                "folds": folds,
                "seed": int(self.seed),
                "scoring": "held-out mean NLL (unpenalised), StratifiedKFold(shuffle=True)",
                "grid": [
                    {"lambda": lam, "mu": mu, "cv_nll": score} for (lam, mu), score in zip(grid, scores)
                ],
                "warnings": sorted({str(w.message) for w in caught}),
            }
            lam, mu = grid[best]
        else:
            lam, mu = grid[0]
        w, b, info = _lbfgs_fit(x, y, lam, mu, self._penalty, self.max_iter, device)
        self.n_classes_ = k
        self.weights_ = w
        self.bias_ = b
        self.reg_lambda_ = lam
        self.reg_mu_ = mu
        self.diagnostics_ = {**info, "device": device.type, "cross_validation": cv}
        return self

    def predict_proba(self, logits) -> np.ndarray:
        """float64 ``softmax(x W^T + b)`` computed with numpy on the CPU."""
        self._check_fitted()
        z = check_logits(logits, self.n_classes_)
        s = self._x(z) @ self.weights_.T
        s += self.bias_
        return softmax64_inplace(s)

    def _fitted_params(self) -> dict:
        return {
            "n_classes": self.n_classes_,
            "weights": self.weights_.tolist(),
            "bias": self.bias_.tolist(),
            "lambda": self.reg_lambda_,
            "mu": self.reg_mu_,
        }

    def _set_fitted_params(self, params: dict) -> None:
        self.n_classes_ = int(params["n_classes"])
        self.weights_ = np.asarray(params["weights"], dtype=np.float64).reshape(self.n_classes_, self.n_classes_)
        self.bias_ = np.asarray(params["bias"], dtype=np.float64)
        self.reg_lambda_ = float(params["lambda"])
        self.reg_mu_ = float(params["mu"])


def _nll_sum(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: np.ndarray) -> float:
    """Summed NLL of ``softmax(x W^T + b)`` on held-out rows (float64, numpy)."""
    s = x @ w.T
    s += b
    m = s.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(s - m).sum(axis=1))
    return float(np.sum(lse - s[np.arange(len(y)), y]))


class DirichletL2(_MatrixCalibrator):
    """Dirichlet calibration with L2 regularisation (Dir-L2; Kull et al. 2019, eq. (2), sec. 3).

    ``softmax(W log p + b)``, penalty ``lambda / (K (K + 1)) * (||W||^2 + ||b||^2)``; ``lambda``
    from ``lambdas`` by ``folds``-fold cross-validation seeded with ``seed`` (module docstring).
    """

    display_names = {"ru": "Dir-L2", "en": "Dir-L2"}
    reference = "Kull et al. 2019, eq. (2), sec. 3 (L2)"
    _features = "log_probabilities"
    _penalty = "l2"

    def __init__(
        self,
        lambdas=DEFAULT_LAMBDAS,
        folds: int = 5,
        seed: int = 0,
        device: str = "auto",
        max_iter: int = 2000,
        cpu_flop_budget: float = 1e14,
    ):
        self.lambdas = lambdas
        self.folds = folds
        self.seed = seed
        self.device = device
        self.max_iter = max_iter
        self.cpu_flop_budget = cpu_flop_budget


class DirichletODIR(_MatrixCalibrator):
    """Dirichlet calibration with ODIR (Dir-ODIR; Kull et al. 2019, eq. (2), sec. 3 "ODIR").

    ``softmax(W log p + b)``, penalty ``lambda / (K (K - 1)) * sum_{i != j} w_ij^2 + mu / K *
    sum_j b_j^2``; ``(lambda, mu)`` from ``lambdas x mus`` by cross-validation (module docstring).
    """

    display_names = {"ru": "Dir-ODIR", "en": "Dir-ODIR"}
    reference = "Kull et al. 2019, eq. (2), sec. 3 (ODIR)"
    _features = "log_probabilities"
    _penalty = "odir"

    def __init__(
        self,
        lambdas=DEFAULT_LAMBDAS,
        mus=DEFAULT_MUS,
        folds: int = 5,
        seed: int = 0,
        device: str = "auto",
        max_iter: int = 2000,
        cpu_flop_budget: float = 1e14,
    ):
        self.lambdas = lambdas
        self.mus = mus
        self.folds = folds
        self.seed = seed
        self.device = device
        self.max_iter = max_iter
        self.cpu_flop_budget = cpu_flop_budget


class MatrixScalingODIR(DirichletODIR):
    """Matrix scaling with ODIR (MS-ODIR; Kull et al. 2019, sec. 3; matrix scaling: Guo et al. 2017).

    ``softmax(W z + b)`` on the logits, with the ODIR penalty and cross-validation of
    :class:`DirichletODIR`.
    """

    display_names = {"ru": "MS-ODIR", "en": "MS-ODIR"}
    reference = "Kull et al. 2019, sec. 3 (ODIR); Guo et al. 2017, sec. 4.2 (matrix scaling)"
    _features = "logits"
