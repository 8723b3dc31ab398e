"""Source ``demo``: small torch classifiers trained on scikit-learn's bundled 8x8 digits.

The embedded default configuration uses it so that a fresh clone runs the whole pipeline
offline in seconds. The 1,797 digits are split (stratified, seeded) into a training part and
an evaluation part; each model is trained on the first and its logits are cached on the second,
which the pipeline then splits into calibration and test halves like any other data set.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from calibrepro.io import save_logits
from calibrepro.zoo import LogitsRequest, Source

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
def _single_threaded_torch():
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


class DemoClassifier(Source):
    """Train a small classifier on the digits' training part; cache its logits on the evaluation part."""

    name = "demo"

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        if request.dataset != "digits":
            raise ValueError(
                f"models.{request.dataset}.{request.model}: source 'demo' trains on the 'digits' data set only; "
                f"put the model under models.digits"
            )
        digits = request.config.get("datasets", {}).get("digits", {})
        fraction = digits.get("evaluation_fraction", 0.5)
        split_seed = digits.get("seed", 0)
        x_train, y_train, x_eval, y_eval = digits_parts(fraction, split_seed)
        options = {key: value for key, value in request.spec.items() if key != "source"}
        with _single_threaded_torch():
            network = train_classifier(x_train, y_train, 10, options)
            with torch.no_grad():
                logits = network(torch.from_numpy(x_eval)).numpy()
        metadata = {
            "source": self.name,
            "options": {**DEFAULTS, **options},
            "digits": {"evaluation_fraction": fraction, "seed": split_seed, "train_size": len(y_train)},
            "torch": torch.__version__,
        }
        save_logits(output, logits, y_eval, metadata)
