"""Computations whose bits do not depend on the processor's vendor: matrix products and square roots.

The kernel pin (:mod:`calibrepro.determinism`) puts every library on its AVX2 path, but two of torch's
CPU primitives still take code that differs between Intel and AMD processors, measured with the
kernel fingerprints of docs/fingerprints/ (docs/reproducibility.md):

* ``torch.sqrt`` (and so the step of ``torch.optim.Adam`` without ``fused``, and the line search of
  ``torch.optim.LBFGS``) goes to MKL's vector math, which is not correctly rounded and rounds
  differently on each vendor: on an AMD EPYC (family 26) it is one ulp off the exact square root for
  15 of 1,003 random float64 numbers, and on an Intel Xeon its bytes are neither AMD's nor the exact
  ones;
* ``torch.mm``/``addmm`` (``nn.Linear``) go to MKL's GEMM, which runs processor-specific kernels even
  under ``MKL_CBWR=COMPATIBLE`` (preloading a library that makes MKL believe it runs on an AMD Zen
  changes 26 of the fingerprint's matrix products).

Here, instead: :func:`linear` multiplies in float64 through NumPy's OpenBLAS on the pinned Haswell
kernel (the same bytes on both vendors' processors in every fingerprint measured) and rounds once to
float32; :class:`ExactSqrt` answers ``torch.sqrt`` inside its block with the correctly rounded square
root (IEEE 754's ``sqrt``, as NumPy computes it); training uses Adam's ``fused`` step, whose square root is
the processor's correctly rounded instruction. On a GPU everything is torch's own.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode


def _float64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().numpy().astype(np.float64)


class _Float64Linear(torch.autograd.Function):
    """``x @ weight.T + bias`` and its gradients, each a float64 product rounded once to float32.

    Written here rather than taken from torch because torch's CPU product is MKL's, whose bits depend
    on the vendor (module docstring); float64 accumulation is also closer to the exact product than
    float32 GEMM.
    """

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        flat = _float64(x).reshape(-1, x.shape[-1])
        out = flat @ _float64(weight).T
        if bias is not None:
            out += _float64(bias)
        return torch.from_numpy(out.astype(np.float32)).reshape(*x.shape[:-1], weight.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        g = _float64(grad).reshape(-1, weight.shape[0])
        flat = _float64(x).reshape(-1, x.shape[-1])

        def back(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(array.astype(np.float32)).to(like.dtype)

        grad_x = back(g @ _float64(weight), x).reshape(x.shape) if ctx.needs_input_grad[0] else None
        grad_w = back(g.T @ flat, weight) if ctx.needs_input_grad[1] else None
        grad_b = back(g.sum(axis=0), weight) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear`` with vendor-independent bits on the CPU (:class:`_Float64Linear`)."""
    if x.device.type != "cpu" or x.dtype != torch.float32:
        return nn.functional.linear(x, weight, bias)
    return _Float64Linear.apply(x, weight, bias)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, initialisation and state dict) computed by :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def sqrt(tensor: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root of a tensor without gradient (NumPy's on the CPU, torch's elsewhere)."""
    if tensor.device.type != "cpu":
        return torch.sqrt(tensor)
    return torch.from_numpy(np.asarray(np.sqrt(tensor.detach().numpy())))


class ExactSqrt(TorchFunctionMode):
    """Inside ``with ExactSqrt():`` every ``torch.sqrt``/``Tensor.sqrt`` of a CPU tensor without gradient is
    :func:`sqrt`'s: for code of torch's own that calls it (the line search of ``torch.optim.LBFGS``)."""

    _SQRT = {torch.sqrt, torch.Tensor.sqrt}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._SQRT and len(args) == 1 and not kwargs:
            (tensor,) = args
            if tensor.device.type == "cpu" and tensor.is_floating_point() and not tensor.requires_grad:
                return sqrt(tensor)
        return func(*args, **kwargs)


def adam(parameters, **options) -> torch.optim.Adam:
    """``torch.optim.Adam`` with its fused step (one kernel whose square root is correctly rounded)."""
    return torch.optim.Adam(parameters, fused=True, **options)
