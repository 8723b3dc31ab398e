"""What every calibrator shares: the estimator interface, the softmax, input checks, JSON helpers.

Calibrators follow scikit-learn's estimator conventions: hyperparameters are the keyword
arguments of ``__init__`` stored unchanged (so ``get_params``, ``set_params`` and
``sklearn.base.clone`` work), nothing is computed in ``__init__``, ``fit(logits, labels)``
returns ``self`` and the fitted state lives in attributes ending in ``_``.  On top of that,
:meth:`Calibrator.to_json` / :meth:`Calibrator.from_json` serialise the fitted state so that a
JSON round trip reproduces ``predict_proba`` bit for bit.

Conventions (docs/decisions.md, "Calibrators"):

* **Softmax.**  :func:`softmax` is the only softmax in the package.  ``uncalibrated``,
  histogram binning and isotonic regression start from ``torch.softmax`` of the float32 logits,
  in float32, because that is what the thesis computed and isotonic regression is sensitive to
  it (scikit-learn merges float32 inputs closer than 1e-6, so float64 inputs form different
  ties).  The scaling methods are fitted in float64 and predict with a float64 softmax of the
  float64 scaled logits.  Every ``predict_proba`` returns float64.
* **Renormalisation** (binning and isotonic): each row is divided by its float64 sum; a row
  whose calibrated values are all 0 becomes uniform ``1/K`` (scikit-learn's
  ``CalibratedClassifierCV`` convention: a calibrator that rules out every class carries no
  information, so the least informative distribution is returned; its argmax is class 0).

Thread safety: no global state is touched (no ``torch.set_num_threads``, no default dtype, no
global RNG), so several calibrators may be fitted in threads of one process.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted


def softmax(logits: np.ndarray, precision: str = "float32") -> np.ndarray:
    """Row-wise softmax of (N, K) logits: the single softmax of the package.

    ``precision="float32"`` (default) returns ``torch.softmax`` of the logits cast to float32,
    as a float32 array: the probabilities the thesis's code saw (uncalibrated column, inputs of
    histogram binning and isotonic regression).  ``precision="float64"`` returns the float64
    softmax ``exp(z - max z) / sum exp(z - max z)`` computed with numpy (used by the scaling
    methods on their float64 scaled logits).
    """
    if precision == "float32":
        import torch  # imported where used: reading the registry (report labels) needs no torch

        z = torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float32))
        with torch.no_grad():
            return torch.softmax(z, dim=1).numpy()
    if precision == "float64":
        return softmax64_inplace(np.array(logits, dtype=np.float64, copy=True, order="C"))
    raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")


def softmax64_inplace(s: np.ndarray) -> np.ndarray:
    """float64 softmax of the rows of ``s``, overwriting ``s`` (max shift, exp, divide by sum)."""
    s -= s.max(axis=1, keepdims=True)
    exp64(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return s


def exp64(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Element-wise ``exp`` of a float64 array by torch's CPU kernel (into ``out`` when given).

    Why not ``np.exp``: NumPy's float64 ``exp`` and ``log`` have AVX-512 loops and no AVX2 ones, so
    under the pinned kernels (:mod:`calibrepro.determinism`: the same bits on AVX2 and AVX-512
    machines) NumPy calls the C library's scalar function element by element: 4.3 ns an element
    against 0.8 ns on its AVX-512 loop (AMD EPYC, one thread), which made the pin cost the scaling
    fits half their time. torch's float64 ``exp`` and ``log`` give the same bits under every ATen
    capability (DEFAULT, AVX2, AVX-512), contiguous or strided and whatever MKL's branch (measured),
    at 1.6 and 2.4 ns an element: as fast pinned as unpinned (benchmarks/README.md, "Kernels").
    """
    return _torch_unary("exp", a, out)


def log64(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Element-wise natural ``log`` of a float64 array by torch's CPU kernel (why: :func:`exp64`)."""
    return _torch_unary("log", a, out)


#: Elements per torch call: torch's grain size (at::internal::GRAIN_SIZE), below which its element-wise
#: kernels never start its thread pool, so a call from a worker thread stays on that thread
_TORCH_GRAIN = 1 << 15


def _torch_unary(name: str, a: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    import torch  # imported where used: reading the registry (report labels) needs no torch

    a = np.ascontiguousarray(a, dtype=np.float64)
    if out is None:
        out = np.empty_like(a)
    elif out.dtype != np.float64 or not out.flags.c_contiguous or out.shape != a.shape:
        raise ValueError(f"{name}64 writes into a C-contiguous float64 array of shape {a.shape}")
    source, target = torch.from_numpy(a.reshape(-1)), torch.from_numpy(out.reshape(-1))
    function = getattr(torch, name)
    for start in range(0, source.numel(), _TORCH_GRAIN):
        function(source[start : start + _TORCH_GRAIN], out=target[start : start + _TORCH_GRAIN])
    return out


def check_logits(logits, n_classes: int | None = None) -> np.ndarray:
    """Validate (N, K) finite real logits; return them as a numpy array (dtype unchanged)."""
    z = np.asarray(logits)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 2:
        raise ValueError(f"logits must be a 2-D array (N, K) with K >= 2, got shape {z.shape}")
    if not np.issubdtype(z.dtype, np.floating) and not np.issubdtype(z.dtype, np.integer):
        raise ValueError(f"logits must be real numbers, got dtype {z.dtype}")
    if n_classes is not None and z.shape[1] != n_classes:
        raise ValueError(f"logits have {z.shape[1]} classes, the calibrator was fitted on {n_classes}")
    if not np.isfinite(z).all():
        raise ValueError("logits contain NaN or infinite values")
    return z


def check_labels(labels, n: int, k: int) -> np.ndarray:
    """Validate integer labels in [0, k) of length n; return int64."""
    y = np.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    y = y.astype(np.int64, copy=False)
    if y.min() < 0 or y.max() >= k:
        raise ValueError(f"labels must lie in [0, {k - 1}]")
    return y


def renormalise(q: np.ndarray) -> np.ndarray:
    """Divide each row by its sum, in place; all-zero rows become uniform ``1/K`` (module docstring)."""
    total = q.sum(axis=1)
    zero = total == 0
    if zero.any():
        q[zero] = 1.0 / q.shape[1]
        total[zero] = 1.0
    q /= total[:, None]
    return q


def f32_json(a: np.ndarray) -> list:
    """float32 values as short JSON numbers that parse back to the same float32, exactly.

    The shortest float32 decimal is used when parsing it as a float64 (what ``json`` does) and
    rounding to float32 gives the value back; otherwise the exact float64 of the float32 value.
    """
    a = np.asarray(a, dtype=np.float32)
    short = a.astype(str).astype(np.float64)
    exact = a.astype(np.float64)
    ok = short.astype(np.float32) == a
    return np.where(ok, short, exact).tolist()


def f32_from_json(values) -> np.ndarray:
    """Inverse of :func:`f32_json`."""
    return np.asarray(values, dtype=np.float64).astype(np.float32)


def spread(name: str, values) -> dict[str, int | float]:
    """``{name_mean, name_min, name_max}`` of ``values``: K fitted numbers in three (the smallest and largest
    of the values' type; the mean from the correctly rounded sum, ``math.fsum``, whatever the machine)."""
    values = np.asarray(values)
    return {f"{name}_mean": math.fsum(values.tolist()) / values.size, f"{name}_min": values.min().item(),
            f"{name}_max": values.max().item()}


class FittedState:
    """The JSON round trip of a fitted estimator, shared by the calibrators and the regression
    recalibrators (:mod:`calibrepro.regression.recalibration`).

    ``to_json`` returns ``{"method", "hyperparameters", "params", "diagnostics"}`` (the ``__init__``
    keywords from scikit-learn's ``get_params``; the fitted state from ``_fitted_params``); ``from_json``
    rebuilds the estimator through ``_set_fitted_params``, so that it predicts bit-identically.  A class
    sets :attr:`method` and implements ``_fitted_params``, ``_set_fitted_params`` and ``_check_fitted``.
    """

    method: ClassVar[str] = ""

    def _fitted_params(self) -> dict:
        raise NotImplementedError

    def _set_fitted_params(self, params: dict) -> None:
        raise NotImplementedError

    def _check_fitted(self) -> None:
        raise NotImplementedError

    def to_json(self) -> dict:
        """Fitted state as a JSON-serialisable dict."""
        self._check_fitted()
        return {
            "method": self.method,
            "hyperparameters": self.get_params(),
            "params": self._fitted_params(),
            "diagnostics": dict(getattr(self, "diagnostics_", {})),
        }

    def convergence(self) -> dict:
        """How the fit ended, for the run's convergence records (:mod:`calibrepro.report.convergence_file`).

        ``converged`` and ``iterations`` as the fit's ``diagnostics_`` record them (``converged``,
        ``n_iter``; None where the fit does not iterate), the regularisation strengths of the fit
        (``lambda``, ``mu``: the fitted ``reg_lambda_`` and ``reg_mu_`` of the full-matrix methods,
        the grid point their cross-validation chose; None for the others) and ``search_capped``
        (``diagnostics_["search_capped"]``: that search stopped at its cap with its best score at
        the grid's edge; None where not recorded).
        """
        diagnostics = getattr(self, "diagnostics_", {})
        return {
            "converged": diagnostics.get("converged"),
            "iterations": diagnostics.get("n_iter"),
            "lambda": getattr(self, "reg_lambda_", None),
            "mu": getattr(self, "reg_mu_", None),
            "search_capped": diagnostics.get("search_capped"),
        }

    def parameters(self) -> dict[str, int | float]:
        """The fitted state that can be written as numbers, name -> number, for the run's table of fitted
        parameters (:mod:`calibrepro.report.parameters_file`); none by default.

        A class that has some defines each name in this method's docstring, next to its fit; how the fit
        ended (:meth:`convergence`) joins them in the table.
        """
        self._check_fitted()
        return {}

    @classmethod
    def from_json(cls, data: dict):
        """Rebuild a fitted estimator from :meth:`to_json` output."""
        if data.get("method") != cls.method:
            raise ValueError(f"JSON is for method {data.get('method')!r}, not {cls.method!r}")
        obj = cls(**data.get("hyperparameters", {}))
        obj._set_fitted_params(data["params"])
        obj.diagnostics_ = dict(data.get("diagnostics", {}))
        return obj


class Calibrator(FittedState, BaseEstimator):
    """Common interface: ``fit(logits, labels) -> self``, ``predict_proba(logits) -> (N, K)``.

    ``predict_proba`` returns float64 probabilities whose rows sum to 1.  ``to_json`` returns
    ``{"method", "hyperparameters", "params", "diagnostics"}``; ``from_json`` rebuilds a fitted
    calibrator whose ``predict_proba`` is bit-identical.  A subclass sets :attr:`display_names`
    (table headings per report language) and :attr:`reference` (the paper), implements ``fit``,
    ``predict_proba`` and the pair ``_fitted_params`` / ``_set_fitted_params`` (fitted state <->
    JSON-ready dict); its :attr:`method` comes from the registry (``calibrepro.calibrators``).
    """

    #: the registry key of the class (set on subclassing; "" for a class that is not registered)
    method: ClassVar[str] = ""
    #: column heading of the method in the report, per language
    display_names: ClassVar[dict[str, str]] = {}
    #: the paper the method comes from (shown by ``calibrepro`` and in docs)
    reference: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        from calibrepro.calibrators import method_of

        cls.method = method_of(cls)

    def fit(self, logits: np.ndarray, labels: np.ndarray) -> "Calibrator":
        """Fit on calibration logits (N, K) and integer labels (N,); return ``self``."""
        raise NotImplementedError

    def predict_proba(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated probabilities (N, K), float64, for new logits."""
        raise NotImplementedError

    def _check_fitted(self) -> None:
        check_is_fitted(self, "n_classes_")


class Uncalibrated(Calibrator):
    """Identity calibrator: ``torch.softmax`` of the float32 logits (the thesis's uncalibrated column).

    Float32 because the thesis computed its uncalibrated probabilities with torch in float32 and
    because these are exactly the probabilities that histogram binning and isotonic regression
    calibrate; returned as float64 (exact widening).
    """

    display_names = {"ru": "До калибровки", "en": "Uncalibrated"}
    reference = "softmax of the model's logits"

    def fit(self, logits, labels) -> "Uncalibrated":
        """Record the number of classes (nothing to learn)."""
        z = check_logits(logits)
        check_labels(labels, z.shape[0], z.shape[1])
        self.n_classes_ = int(z.shape[1])
        self.diagnostics_ = {}
        return self

    def predict_proba(self, logits) -> np.ndarray:
        """float32 torch softmax of the logits, widened to float64."""
        self._check_fitted()
        z = check_logits(logits, self.n_classes_)
        return softmax(z, "float32").astype(np.float64)

    def _fitted_params(self) -> dict:
        return {"n_classes": self.n_classes_}

    def _set_fitted_params(self, params: dict) -> None:
        self.n_classes_ = int(params["n_classes"])
