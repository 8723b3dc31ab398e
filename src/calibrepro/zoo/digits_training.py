"""Training of the demo's small torch classifiers on scikit-learn's bundled 8x8 digits.

Kept apart from :mod:`calibrepro.zoo.demo` so that planning a workflow does not import torch.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

#: defaults of a model entry with ``source: demo`` (the config schema documents each key)
DEFAULTS = {
    "hidden": [],
    "epochs": 100,
    "batch_size": 64,
    "learning_rate": 1e-3,
    "weight_decay": 0.0,
    "label_smoothing": 0.0,
    "seed": 0,
}


def digits_parts(evaluation_fraction: float = 0.5, seed: int = 0):
    """Return ``(x_train, y_train, x_eval, y_eval)``: the digits scaled to [0, 1], split stratified by class."""
    digits = load_digits()
    features = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    train, evaluation = train_test_split(
        np.arange(len(labels)), test_size=evaluation_fraction, random_state=seed, stratify=labels
    )
    return features[train], labels[train], features[evaluation], labels[evaluation]


def build_network(num_features: int, num_classes: int, hidden: list[int]) -> nn.Sequential:
    """A multilayer perceptron with ReLU activations (a linear softmax model when ``hidden`` is empty)."""
    layers: list[nn.Module] = []
    width = num_features
    for units in hidden:
        layers += [nn.Linear(width, units), nn.ReLU()]
        width = units
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


@contextmanager
def single_threaded_torch():
    """Run torch on one thread, so that the trained weights do not depend on the core count."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train_classifier(x_train, y_train, num_classes: int, options: dict) -> nn.Sequential:
    """Train with Adam on the cross-entropy (with optional label smoothing, thesis sec. 4.4)."""
    opts = {**DEFAULTS, **options}
    generator = torch.Generator().manual_seed(opts["seed"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(opts["seed"])  # the layers' default initialisation draws from the global RNG
        network = build_network(x_train.shape[1], num_classes, opts["hidden"])
    optimiser = torch.optim.Adam(
        network.parameters(), lr=opts["learning_rate"], weight_decay=opts["weight_decay"]
    )
    loss_fn = nn.CrossEntropyLoss(label_smoothing=opts["label_smoothing"])
    inputs, targets = torch.from_numpy(x_train), torch.from_numpy(y_train)
    network.train()
    for _ in range(opts["epochs"]):
        order = torch.randperm(len(targets), generator=generator)
        for batch in order.split(opts["batch_size"]):
            optimiser.zero_grad()
            loss_fn(network(inputs[batch]), targets[batch]).backward()
            optimiser.step()
    return network.eval()


def train_and_predict(options: dict, evaluation_fraction: float, seed: int):
    """Train one demo classifier; return its float32 logits and the labels of the evaluation part, and metadata."""
    x_train, y_train, x_eval, y_eval = digits_parts(evaluation_fraction, seed)
    with single_threaded_torch():
        network = train_classifier(x_train, y_train, 10, options)
        with torch.no_grad():
            logits = network(torch.from_numpy(x_eval)).numpy()
    metadata = {
        "options": {**DEFAULTS, **options},
        "digits": {"evaluation_fraction": evaluation_fraction, "seed": seed, "train_size": len(y_train)},
        "torch": torch.__version__,
    }
    return logits, y_eval, metadata
