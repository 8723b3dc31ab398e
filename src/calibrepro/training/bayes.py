"""Bayes by Backprop (Blundell, Cornebise, Kavukcuoglu & Wierstra 2015, "Weight uncertainty in neural networks").

Every weight and bias has a factorised Gaussian posterior ``q(w | theta) = N(mu, sigma^2)`` with
``sigma = log(1 + exp(rho))`` (sec. 3.2), sampled by reparametrisation ``w = mu + sigma * eps``,
``eps ~ N(0, 1)``, afresh on every forward pass (training and test). The prior is ``N(0, prior_sigma^2)``
(a single Gaussian instead of the paper's scale mixture, so that the KL term has the closed form of
:func:`gaussian_kl`). Training minimises the minibatch cost of eq. (8) with ``pi_i = 1/M`` divided by
the batch size: ``KL[q || p] / N + mean cross-entropy`` (:func:`elbo_loss`, N the training-set size),
one weight sample per step. ``rho`` starts at :data:`RHO_INIT` (sigma ~ 0.007) and ``mu`` as the
deterministic layer's default initialisation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from calibrepro import portable
from calibrepro.training.networks import lenet5_layers, lenet_padding, mlp_layers

#: initial rho of every posterior standard deviation: softplus(-5) = 0.0067
RHO_INIT = -5.0


def gaussian_kl(mu: torch.Tensor, sigma: torch.Tensor, prior_sigma: float) -> torch.Tensor:
    """``KL(N(mu, sigma^2) || N(0, prior_sigma^2))`` summed over the elements, in closed form:
    ``log(prior_sigma / sigma) + (sigma^2 + mu^2) / (2 prior_sigma^2) - 1/2`` per element."""
    return (math.log(prior_sigma) - torch.log(sigma) + (sigma**2 + mu**2) / (2 * prior_sigma**2) - 0.5).sum()


class _GaussianWeights(nn.Module):
    """Posterior means and rho of a weight tensor and a bias vector; draws them by reparametrisation."""

    def __init__(self, weight_shape: tuple[int, ...], fan_in: int, prior_sigma: float):
        super().__init__()
        self.prior_sigma = float(prior_sigma)
        self.weight_mu = nn.Parameter(torch.empty(weight_shape))
        self.bias_mu = nn.Parameter(torch.empty(weight_shape[0]))
        nn.init.kaiming_uniform_(self.weight_mu, a=math.sqrt(5))  # as nn.Linear and nn.Conv2d initialise
        bound = 1 / math.sqrt(fan_in)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        self.weight_rho = nn.Parameter(torch.full(weight_shape, RHO_INIT))
        self.bias_rho = nn.Parameter(torch.full((weight_shape[0],), RHO_INIT))

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One sample ``mu + softplus(rho) * eps`` of the weight and the bias."""
        weight = self.weight_mu + F.softplus(self.weight_rho) * torch.randn_like(self.weight_mu)
        bias = self.bias_mu + F.softplus(self.bias_rho) * torch.randn_like(self.bias_mu)
        return weight, bias

    def kl(self) -> torch.Tensor:
        """KL of this layer's posterior from the prior (:func:`gaussian_kl`)."""
        return gaussian_kl(self.weight_mu, F.softplus(self.weight_rho), self.prior_sigma) + gaussian_kl(
            self.bias_mu, F.softplus(self.bias_rho), self.prior_sigma
        )


class BayesLinear(_GaussianWeights):
    """A fully connected layer with Gaussian weights."""

    def __init__(self, in_features: int, out_features: int, prior_sigma: float = 1.0):
        super().__init__((out_features, in_features), in_features, prior_sigma)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return portable.linear(x, *self.draw())


class BayesConv2d(_GaussianWeights):
    """A 2-d convolution with Gaussian weights (stride 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int = 0, prior_sigma: float = 1.0):
        super().__init__((out_channels, in_channels, kernel_size, kernel_size), in_channels * kernel_size**2, prior_sigma)
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, *self.draw(), padding=self.padding)


def kl_divergence(network: nn.Module) -> torch.Tensor:
    """Sum of the KL terms of every Bayesian layer of ``network``."""
    return sum((m.kl() for m in network.modules() if isinstance(m, _GaussianWeights)), torch.zeros(()))


def elbo_loss(network: nn.Module, logits: torch.Tensor, targets: torch.Tensor, train_size: int, label_smoothing: float = 0.0):
    """The negative ELBO per training sample of one minibatch (module docstring): ``KL / N + mean cross-entropy``."""
    nll = F.cross_entropy(logits, targets, label_smoothing=label_smoothing)
    return nll + kl_divergence(network) / train_size


def bayes_mlp(input_shape: tuple[int, ...], num_classes: int, options: dict) -> nn.Sequential:
    """:func:`calibrepro.training.networks.mlp` with :class:`BayesLinear` layers."""
    width = math.prod(input_shape)
    prior = float(options.get("prior_sigma", 1.0))
    layers = mlp_layers(width, num_classes, list(options.get("hidden", [])), 0.0, linear=_with_prior(BayesLinear, prior))
    return nn.Sequential(nn.Flatten(), *layers)


def bayes_lenet5(input_shape: tuple[int, ...], num_classes: int, options: dict) -> nn.Sequential:
    """LeNet-5 (:func:`calibrepro.training.networks.lenet5_layers`) with Bayesian convolutions and fully connected layers."""
    prior = float(options.get("prior_sigma", 1.0))
    layers = lenet5_layers(
        input_shape[0], lenet_padding(input_shape), num_classes, 0.0,
        conv=_with_prior(BayesConv2d, prior), linear=_with_prior(BayesLinear, prior), width=int(options.get("width", 1)),
    )  # fmt: skip
    return nn.Sequential(*layers)


def _with_prior(layer, prior_sigma: float):
    def make(*args, **kwargs):
        return layer(*args, prior_sigma=prior_sigma, **kwargs)

    return make
