"""The architectures of :data:`calibrepro.training.ARCHITECTURES`, built by name.

Every builder takes ``(input_shape, num_classes, options)``: the shape of one input without the
batch dimension, the number of classes and the model entry's options (``hidden``, ``dropout``).
"""

from __future__ import annotations

import importlib
import math

from torch import nn

from calibrepro import portable
from calibrepro.training import ARCHITECTURES


class ArchitectureError(ValueError):
    """A network cannot be built for these inputs; the message names the config key."""


def build(name: str, input_shape: tuple[int, ...], num_classes: int, options: dict) -> nn.Module:
    """The network ``name`` of :data:`~calibrepro.training.ARCHITECTURES`, freshly initialised."""
    module_name, function = ARCHITECTURES[name].builder.split(":")
    return getattr(importlib.import_module(module_name), function)(tuple(input_shape), num_classes, options)


def has_dropout(network: nn.Module) -> bool:
    """Whether ``network`` holds a dropout layer with a positive rate (what MC-Dropout switches on)."""
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in network.modules())


def set_dropout(network: nn.Module, active: bool) -> int:
    """Switch every dropout layer to training mode (``active``) or eval mode; return how many there are."""
    layers = [m for m in network.modules() if isinstance(m, nn.modules.dropout._DropoutNd)]
    for layer in layers:
        layer.train(active)
    return len(layers)


def mlp_layers(width: int, num_classes: int, hidden: list[int], dropout: float, linear=portable.Linear) -> list[nn.Module]:
    """Linear + ReLU (+ dropout) per hidden width, then the linear output layer (no dropout layer at rate 0)."""
    layers: list[nn.Module] = []
    for units in hidden:
        layers += [linear(width, units), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = units
    layers.append(linear(width, num_classes))
    return layers


def mlp(input_shape: tuple[int, ...], num_classes: int, options: dict) -> nn.Sequential:
    """A multilayer perceptron with ReLU activations on the flattened input (logistic regression when ``hidden`` is [])."""
    layers = mlp_layers(math.prod(input_shape), num_classes, list(options.get("hidden", [])), float(options.get("dropout", 0.0)))
    return nn.Sequential(nn.Flatten(), *layers)


def lenet_padding(input_shape: tuple[int, ...]) -> int:
    """Zero padding of LeNet-5's first convolution: 2 for 28x28 (MNIST, as LeCun et al. 1998 pad to 32x32), 0 for 32x32."""
    if len(input_shape) != 3 or input_shape[1] != input_shape[2] or input_shape[1] not in (28, 32):
        raise ArchitectureError(
            f"network lenet5 needs square 28x28 or 32x32 images (mnist, cifar10), not inputs of shape {input_shape}"
        )
    return (32 - input_shape[1]) // 2


def lenet5_layers(channels: int, padding: int, num_classes: int, dropout: float, conv=nn.Conv2d, linear=portable.Linear,
                  width: int = 1):
    """LeNet-5 (LeCun et al. 1998) as Guo et al. 2017 train it: conv 6@5x5, max-pool, conv 16@5x5, max-pool,
    fully connected 120, 84, classes, ReLU activations; dropout (when > 0) before the last two fully connected layers.
    ``width`` multiplies every layer's channels and units (1: LeNet-5 itself)."""
    c1, c2, f1, f2 = 6 * width, 16 * width, 120 * width, 84 * width

    def drop() -> list[nn.Module]:
        return [nn.Dropout(dropout)] if dropout > 0 else []

    return [
        conv(channels, c1, 5, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
        conv(c1, c2, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        linear(c2 * 5 * 5, f1), nn.ReLU(), *drop(),
        linear(f1, f2), nn.ReLU(), *drop(),
        linear(f2, num_classes),
    ]  # fmt: skip


def lenet5(input_shape: tuple[int, ...], num_classes: int, options: dict) -> nn.Sequential:
    """LeNet-5 for 28x28 or 32x32 images with any number of channels (:func:`lenet5_layers`)."""
    padding = lenet_padding(input_shape)
    dropout, width = float(options.get("dropout", 0.0)), int(options.get("width", 1))
    return nn.Sequential(*lenet5_layers(input_shape[0], padding, num_classes, dropout, width=width))
