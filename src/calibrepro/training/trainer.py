"""Seeded training of a named network, its weights cache, and its (stochastic) predictions.

Determinism: the initialisation, dropout masks and Bayesian weight draws come from torch's global
generator, seeded with the entry's ``seed`` inside :func:`torch.random.fork_rng` (the caller's
generator is left alone); the minibatch order and the augmentation from a CPU ``torch.Generator``
of the same seed. On the CPU torch trains and predicts on ``threads`` threads (default 1: the bytes of
the weights and logits do not depend on the machine's core count) and on the kernels
:mod:`calibrepro.determinism` pins (the same bytes on AVX2 and AVX-512 machines); on a GPU
deterministic algorithms are switched on. Same options and seed on the same device -> byte-identical
weights and logits.

Predictions of a stochastic model (MC-Dropout, Gal & Ghahramani 2016; Bayes by Backprop,
Blundell et al. 2015; a deep ensemble, Lakshminarayanan et al. 2017) are stored like an ensemble's:
``log(1/T sum_t softmax(z_t))`` over the T passes, draws or members
(:func:`calibrepro.averaging.log_mean_softmax`).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from calibrepro import portable
from calibrepro.averaging import log_mean_softmax
from calibrepro.determinism import seeded, torch_threads
from calibrepro.checkpoints import load_weights
from calibrepro.io import atomic_path
from calibrepro.training import ARCHITECTURES
from calibrepro.training.bayes import elbo_loss
from calibrepro.training.data import Parts
from calibrepro.training.networks import build, set_dropout

#: training options of a ``source: train`` entry and their defaults (the config schema documents each)
DEFAULTS = {
    "network": "mlp",
    "hidden": [],
    "dropout": 0.0,
    "prior_sigma": 1.0,
    "epochs": 100,
    "batch_size": 64,
    "optimiser": "adam",
    "learning_rate": 1e-3,
    "momentum": 0.9,
    "weight_decay": 0.0,
    "lr_milestones": [],
    "lr_gamma": 0.1,
    "label_smoothing": 0.0,
    "augmentation": "none",
    "width": 1,
    "threads": 1,
    "seed": 0,
}
#: images per forward pass when predicting (the 899 digits go in one pass, as the demo always did)
PREDICT_BATCH = 1000
#: version of the weights files; part of the cache key
CACHE_FORMAT = 2


class TrainingError(ValueError):
    """Training or the weights cache cannot go on; the message names the key or file to fix."""


def training_options(spec: dict) -> dict:
    """The entry's training options with defaults filled in (the variant keys and ``source`` left out)."""
    return {**DEFAULTS, **{key: value for key, value in spec.items() if key in DEFAULTS}}


def cache_key(dataset: str, provenance: dict, options: dict, device: torch.device) -> str:
    """sha256 of everything the weights depend on: data set, its settings, the options, device type, format."""
    payload = {
        "dataset": dataset,
        "data": provenance,
        "options": options,
        "device": device.type,
        "format": CACHE_FORMAT,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def weights_path(root: str | Path, dataset: str, options: dict, key: str) -> Path:
    """Where the trained weights of one network are cached: ``<root>/trained/<dataset>/<network>-<key>.pt``."""
    return Path(root) / "trained" / dataset / f"{options['network']}-{key[:16]}.pt"


def crop_flip(batch: torch.Tensor, generator: torch.Generator, padding: int = 4) -> torch.Tensor:
    """Random crops of the zero-padded images and random horizontal flips (He et al. 2016, as Guo et al. 2017 train)."""
    size, height, width = len(batch), batch.shape[2], batch.shape[3]
    offsets = torch.randint(0, 2 * padding + 1, (size, 2), generator=generator).tolist()
    flips = (torch.rand(size, generator=generator) < 0.5).tolist()
    padded = nn.functional.pad(batch, (padding, padding, padding, padding))
    crops = []
    for image, (dy, dx), flip in zip(padded, offsets, flips):
        crop = image[:, dy : dy + height, dx : dx + width]
        crops.append(crop.flip(-1) if flip else crop)
    return torch.stack(crops)


def flip(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flips only (half of the images, drawn from ``generator``)."""
    flips = torch.rand(len(batch), generator=generator) < 0.5
    return torch.where(flips[:, None, None, None].to(batch.device), batch.flip(-1), batch)


#: ``augmentation`` -> the function applied to every training minibatch
AUGMENTATIONS = {"crop_flip": crop_flip, "flip": flip}


def make_optimiser(network: nn.Module, options: dict) -> torch.optim.Optimizer:
    """Adam (Kingma & Ba 2015) or SGD with momentum, with L2 weight decay."""
    if options["optimiser"] == "adam":
        return portable.adam(network.parameters(), lr=options["learning_rate"], weight_decay=options["weight_decay"])
    return torch.optim.SGD(
        network.parameters(),
        lr=options["learning_rate"],
        momentum=options["momentum"],
        weight_decay=options["weight_decay"],
    )


def train(parts: Parts, options: dict, device: torch.device, desc: str = "training",
          on_epoch=None) -> tuple[nn.Module, list[dict]]:
    """Train ``options['network']`` on the training part; return it (eval mode) and the curve, one dict per epoch.

    ``on_epoch(network, record)``, when given, is called after each epoch with its record, which it may
    extend (:class:`calibrepro.training.curves.Recorder`); it must leave the network in training mode."""
    bayesian = ARCHITECTURES[options["network"]].bayesian
    generator = torch.Generator().manual_seed(options["seed"])
    inputs = torch.from_numpy(parts.x_train).to(device)
    targets = torch.from_numpy(parts.y_train).to(device)
    history = []
    with torch_threads(options["threads"]), seeded(options["seed"], device):
        network = build(options["network"], parts.input_shape, parts.num_classes, options).to(device)
        optimiser = make_optimiser(network, options)
        milestones = options["lr_milestones"]
        schedule = torch.optim.lr_scheduler.MultiStepLR(optimiser, milestones, options["lr_gamma"]) if milestones else None
        loss_fn = nn.CrossEntropyLoss(label_smoothing=options["label_smoothing"])
        network.train()
        for epoch in range(1, options["epochs"] + 1):
            start, total_loss, correct = time.perf_counter(), 0.0, 0
            order = torch.randperm(len(targets), generator=generator)
            for batch in order.split(options["batch_size"]):
                batch = batch.to(device)
                x = inputs[batch]
                if options["augmentation"] in AUGMENTATIONS:
                    x = AUGMENTATIONS[options["augmentation"]](x, generator)
                optimiser.zero_grad()
                logits = network(x)
                if bayesian:
                    loss = elbo_loss(network, logits, targets[batch], len(targets), options["label_smoothing"])
                else:
                    loss = loss_fn(logits, targets[batch])
                loss.backward()
                optimiser.step()
                total_loss += float(loss.detach()) * len(batch)
                correct += int((logits.detach().argmax(dim=1) == targets[batch]).sum())
            if schedule is not None:
                schedule.step()
            record = {"epoch": epoch, "loss": total_loss / len(targets), "train_accuracy": correct / len(targets)}
            history.append(record)  # no times in it: it goes into the logits' metadata, which reruns reproduce
            seconds = time.perf_counter() - start
            print(
                f"{desc}: epoch {epoch}/{options['epochs']}: loss {record['loss']:.4f}, training accuracy "
                f"{100 * record['train_accuracy']:.2f} %, {seconds:.1f} s "
                f"({len(targets) / max(seconds, 1e-9):,.0f} images/s)",
                file=sys.stderr,
                flush=True,
            )
            if on_epoch is not None:
                on_epoch(network, record)
    return network.eval(), history


def save_weights(path: Path, network: nn.Module, options: dict, history: list[dict]) -> None:
    """Write the weights and their training record atomically, loadable with ``torch.load(weights_only=True)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": CACHE_FORMAT,
        "architecture": options["network"],
        "options": json.dumps(options, sort_keys=True),
        "history": json.dumps(history),
        "torch": str(torch.__version__),
        "state_dict": {key: value.detach().cpu() for key, value in network.state_dict().items()},
    }
    # into memory, then the file: given a path, torch names the archive's top folder after the file (here
    # the temporary one), so two saves of the same weights would differ in that name; and torch's own
    # writer reports a full disk as "unexpected pos", where a plain write says "No space left on device"
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(buffer.getbuffer())


def load_cached(path: Path, parts: Parts, options: dict, device: torch.device) -> tuple[nn.Module, list[dict]]:
    """The network and curve cached at ``path``; a file of another architecture or shape stops with its name."""
    payload = load_weights(path)
    fix = "delete it to train the network again"
    if not isinstance(payload, dict) or "state_dict" not in payload or payload.get("architecture") != options["network"]:
        found = payload.get("architecture") if isinstance(payload, dict) else type(payload).__name__
        raise TrainingError(
            f"{path}: cached weights of network {found!r}, not {options['network']!r}; {fix}"
        )
    network = build(options["network"], parts.input_shape, parts.num_classes, options)
    try:
        network.load_state_dict(payload["state_dict"])
    except RuntimeError as error:
        raise TrainingError(f"{path}: the cached weights do not fit {options['network']} ({str(error)[:300]}); {fix}") from None
    return network.to(device).eval(), json.loads(payload["history"])


def trained_network(
    parts: Parts, dataset: str, options: dict, device: torch.device, cache_root: str | Path, desc: str,
    on_epoch=None,
) -> tuple[nn.Module, dict]:
    """The trained network from the cache, else trained now (``on_epoch``: as :func:`train`) and cached; and its
    training record."""
    key = cache_key(dataset, parts.provenance, options, device)
    path = weights_path(cache_root, dataset, options, key)
    cached = path.is_file()
    if cached:
        print(f"{desc}: weights from the cache {path}", file=sys.stderr, flush=True)
        network, history = load_cached(path, parts, options, device)
    else:
        network, history = train(parts, options, device, desc, on_epoch)
        save_weights(path, network, options, history)
    # whether the weights came from the cache is said in the log only: the logits archive of a network
    # shared by two models (plain and MC-Dropout) must not depend on which job trained it
    record = {"weights": str(path), "sha256": weights_digest(network), "history": history}
    return network, record


def weights_digest(network: nn.Module) -> str:
    """sha256 of the weights' names, dtypes, shapes and values: equal weights give equal digests, whatever
    else the file holds (its training record, the torch version)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(network.state_dict().items()):
        values = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{values.dtype}:{tuple(values.shape)}".encode())
        digest.update(values.numpy().tobytes())
    return digest.hexdigest()


def forward(network: nn.Module, x: np.ndarray, device: torch.device, threads: int = 1) -> np.ndarray:
    """float32 logits of ``network`` on ``x``, :data:`PREDICT_BATCH` rows per pass, on ``threads`` CPU threads."""
    outputs = []
    with torch_threads(threads), torch.no_grad():
        for start in range(0, len(x), PREDICT_BATCH):
            chunk = torch.from_numpy(x[start : start + PREDICT_BATCH]).to(device)
            outputs.append(network(chunk).float().cpu())
    return torch.cat(outputs).numpy()


def stochastic_logits(
    network: nn.Module,
    x: np.ndarray,
    passes: int,
    seed: int,
    device: torch.device,
    dropout: bool = True,
    threads: int = 1,
) -> np.ndarray:
    """``log(1/T sum_t softmax(z_t))`` (float32) over ``passes`` forward passes with dropout on (MC-Dropout)
    or, for a Bayesian network, with fresh weight draws; the draws are seeded with ``seed``; ``threads`` as in
    :func:`forward`."""
    network.eval()
    set_dropout(network, dropout)
    try:
        with seeded(seed, device):
            draws = [forward(network, x, device, threads) for _ in range(passes)]
    finally:
        set_dropout(network, False)
    return log_mean_softmax(draws).astype(np.float32)
