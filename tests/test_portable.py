"""calibrepro.portable: no kernel whose bits depend on the processor's vendor on the path of any output.

MKL's products (``aten.mm``/``addmm``/...) and MKL's vector-math square root (``aten.sqrt``) give other
bits on Intel and AMD processors (docs/reproducibility.md, docs/fingerprints/). These tests watch every
ATen operation the training and the fits dispatch (a ``TorchDispatchMode``) and fail if one of those is
among them, whatever the processor; the subprocess tests of tests/test_determinism.py make MKL take the
other vendor's code paths and check that the demo's networks do not change.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from calibrepro import portable
from calibrepro.calibrators.scaling import run_lbfgs
from calibrepro.regression import models as regression_models
from calibrepro.training import data, trainer

#: ATen operations that run MKL's GEMM/BLAS or its vector-math square root on the CPU
VENDOR_DEPENDENT = {"mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "addr", "matmul", "sqrt", "sqrt_", "_foreach_sqrt",
                    "_foreach_sqrt_"}


class Operations(TorchDispatchMode):
    """Records the name of every ATen operation dispatched inside the block."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def digits_parts(n: int = 128) -> data.Parts:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 64)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return data.Parts(x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :], 10, {"generated": 0})


def exact_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x @ w.T + b`` with every sum exact (math.fsum), rounded once to float32."""
    rows = [[math.fsum([*(float(a) * float(c) for a, c in zip(xi, wj)), float(bj)]) for wj, bj in zip(w, b)] for xi in x]
    return np.array(rows, dtype=np.float64).astype(np.float32)


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64)).max())


def test_linear_is_the_float64_product_rounded_once_and_differentiates_like_nn_linear():
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.normal(size=(2, 7, 13)).astype(np.float32)).requires_grad_(True)
    layer = portable.Linear(13, 5)
    out = layer(x)
    assert out.shape == (2, 7, 5) and out.dtype == torch.float32
    reference = exact_linear(x.detach().numpy().reshape(-1, 13), layer.weight.detach().numpy(), layer.bias.detach().numpy())
    assert ulps(out.detach().numpy().reshape(-1, 5), reference) <= 1
    grad = torch.from_numpy(rng.normal(size=(2, 7, 5)).astype(np.float32))
    out.backward(grad)
    x64, w64 = x.detach().double().requires_grad_(True), layer.weight.detach().double().requires_grad_(True)
    b64 = layer.bias.detach().double().requires_grad_(True)
    torch.nn.functional.linear(x64, w64, b64).backward(grad.double())
    for ours, exact in ((x.grad, x64.grad), (layer.weight.grad, w64.grad), (layer.bias.grad, b64.grad)):
        assert ours.dtype == torch.float32
        assert ulps(ours.numpy(), exact.float().numpy()) <= 1
    assert set(layer.state_dict()) == set(torch.nn.Linear(13, 5).state_dict())


def test_adams_square_root_is_correctly_rounded():
    """With no momentum and no epsilon, one step moves each weight by exactly -lr * g / sqrt(g * g) = -lr * sign(g)
    when the square root is correctly rounded (MKL's vector math misses it by an ulp for some g, differently on
    each vendor)."""
    g = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    weights = torch.nn.Parameter(torch.zeros_like(g))
    optimiser = portable.adam([weights], lr=1.0, betas=(0.0, 0.0), eps=0.0)
    weights.grad = g.clone()
    optimiser.step()
    assert torch.equal(weights.detach(), -torch.sign(g))


@pytest.mark.parametrize("options", [
    {"hidden": [32, 32], "dropout": 0.5, "label_smoothing": 0.1},
    {"network": "bayes_mlp", "hidden": [16]},
    {"optimiser": "sgd", "hidden": [16], "weight_decay": 1e-3},
])
def test_training_dispatches_no_vendor_dependent_kernel(options):
    parts = digits_parts()
    settings = {**trainer.training_options(options), "epochs": 2, "batch_size": 16}
    with Operations() as seen:
        network, _ = trainer.train(parts, settings, torch.device("cpu"))
        trainer.forward(network, parts.x_eval, torch.device("cpu"))
    assert seen.names & VENDOR_DEPENDENT == set()
    assert "_fused_adam_" in seen.names or settings["optimiser"] == "sgd"


def test_the_regression_networks_dispatch_no_vendor_dependent_kernel():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 4)), rng.normal(size=60)
    with Operations() as seen:
        for kind, extra in (("mc_dropout", {"passes": 3, "noise": "none"}), ("mc_dropout", {"passes": 3}),
                            ("aleatoric", {"passes": 3}), ("evidential", {})):
            regression_models.fit_predict(kind, x[:40], y[:40], x[40:], {"epochs": 2, **extra}, seed=0)
    assert seen.names & VENDOR_DEPENDENT == set()


def test_the_lbfgs_fits_line_search_takes_the_exact_square_root():
    """torch's strong-Wolfe line search calls ``Tensor.sqrt`` when it interpolates; inside the project's fits it
    is :class:`portable.ExactSqrt`'s, so no ``aten.sqrt`` is dispatched (and without it, one is: the control)."""

    def rosenbrock(theta):  # its curved valley makes the line search interpolate (Nocedal & Wright 2006, sec. 3.5)
        x, y = theta
        return float((1 - x) ** 2 + 100 * (y - x * x) ** 2), np.array([-2 * (1 - x) - 400 * x * (y - x * x),
                                                                       200 * (y - x * x)])

    settings = {"lr": 1, "max_iter": 100, "max_eval": 200, "tolerance_grad": 1e-12, "tolerance_change": 1e-15,
                "history_size": 10, "line_search_fn": "strong_wolfe"}
    start = np.array([-1.2, 1.0])
    with Operations() as seen:
        theta, _ = run_lbfgs(start, rosenbrock, settings)
    assert "sqrt" not in seen.names and np.abs(theta - 1).max() < 1e-6

    param = torch.tensor(start, requires_grad=True)
    plain = torch.optim.LBFGS([param], **settings)

    def closure():
        loss, grad = rosenbrock(param.detach().numpy().copy())
        param.grad = torch.from_numpy(grad)
        return torch.tensor(loss, dtype=torch.float64)

    with Operations() as seen:
        plain.step(closure)
    assert "sqrt" in seen.names
