"""Networks the pipeline trains itself (model source ``train``, :mod:`calibrepro.zoo.train`).

One module per concern: :mod:`.data` (the training and evaluation sets: the bundled 8x8 digits,
MNIST, CIFAR-10), :mod:`.networks` (the architectures, by name), :mod:`.bayes` (Bayes by Backprop
layers and their ELBO), :mod:`.trainer` (seeded training, the weights cache, stochastic predictions).
The names below are kept free of torch so that validating a configuration does not import it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    """A trainable network, by name: where it is built and what it accepts."""

    builder: str  # "module:function" returning an nn.Module from (input shape, classes, options)
    images: bool  # needs image inputs (C, H, W) rather than feature vectors
    bayesian: bool = False  # weights are distributions (Bayes by Backprop): trained on the ELBO, sampled at test time


#: network name -> architecture (``network`` of a ``source: train`` entry)
ARCHITECTURES: dict[str, Architecture] = {
    "mlp": Architecture("calibrepro.training.networks:mlp", images=False),
    "lenet5": Architecture("calibrepro.training.networks:lenet5", images=True),
    "bayes_mlp": Architecture("calibrepro.training.bayes:bayes_mlp", images=False, bayesian=True),
    "bayes_lenet5": Architecture("calibrepro.training.bayes:bayes_lenet5", images=True, bayesian=True),
}

#: data sets a network can be trained on; their training sets come from :mod:`.data`
TRAINING_DATASETS: tuple[str, ...] = ("digits", "mnist", "cifar10", "cifar100")
