"""Training throughput of the networks ``source: train`` trains, MC-Dropout cost, and what config/blog.yaml costs.

On generated images of MNIST's and CIFAR-10's shapes (the numbers do not depend on the pixels),
for each network of ``config/blog.yaml`` (LeNet-5, Bayesian LeNet-5) and each device (the CPU with
1 and 2 torch threads; the GPU when there is one):

* **training**: images/s of :func:`calibrepro.training.trainer.train` over one epoch of ``--n``
  images (SGD steps of the entry's batch size and augmentation, after one warm-up epoch);
* **prediction**: ms per forward pass over the 10,000 evaluation images, with dropout off (the
  plain network) and on (one MC-Dropout pass): a variant with ``mc_dropout: T`` costs about T passes;
* **estimate of config/blog.yaml**: the sum of every model's epochs x training-set size / its throughput
  (an ensemble of M counts M networks).

Run::

    .venv/bin/python benchmarks/bench_training.py            # CPU 1 and 2 threads (+ GPU if present), ~2 min
    .venv/bin/python benchmarks/bench_training.py --n 2000   # quicker, noisier
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from calibrepro.determinism import torch_threads
from calibrepro.training import data, trainer

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"mnist": ((1, 28, 28), 60_000), "cifar10": ((3, 32, 32), 50_000)}


def parts(dataset: str, n: int) -> data.Parts:
    shape, _ = SHAPES[dataset]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, 10, n)
    evaluation = rng.normal(size=(10_000, *shape)).astype(np.float32)
    return data.Parts(x, y, evaluation, rng.integers(0, 10, 10_000), 10)


def throughput(batch: data.Parts, options: dict, device: torch.device) -> float:
    """Images/s of the second of two one-epoch trainings (the first pays torch's lazy imports)."""
    trainer.train(batch, {**options, "epochs": 1}, device, desc="warm-up")
    start = time.perf_counter()
    trainer.train(batch, {**options, "epochs": 1}, device, desc="timed")
    if device.type == "cuda":
        torch.cuda.synchronize()
    return len(batch.y_train) / (time.perf_counter() - start)


def pass_ms(network, x: np.ndarray, device: torch.device, dropout: bool) -> float:
    """ms of one forward pass over ``x`` (best of 3)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        if dropout:
            trainer.stochastic_logits(network, x, 1, seed=0, device=device)
        else:
            trainer.forward(network, x, device)
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="training images per timed epoch")
    parser.add_argument("--config", default=str(ROOT / "config" / "blog.yaml"))
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    setups = [("cpu", 1), ("cpu", 2)] + ([("cuda", 1)] if torch.cuda.is_available() else [])
    rates: dict[tuple, float] = {}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads available")
    print("| device | data set | model | network | training (images/s) | forward pass, 10,000 images (ms) | MC-Dropout pass (ms) |")
    print("|---|---|---|---|---|---|---|")
    for device_type, threads in setups:
        device = torch.device(device_type)
        for dataset, entries in config["models"].items():
            for model, spec in entries.items():
                if spec.get("source") != "train":
                    continue
                options = {**trainer.training_options(spec), "threads": threads}
                key = (device_type, threads, dataset, options["network"], options["augmentation"], options["batch_size"])
                if key not in rates:
                    batch = parts(dataset, args.n)
                    rates[key] = throughput(batch, options, device)
                    network, _ = trainer.train(parts(dataset, 64), {**options, "epochs": 1, "dropout": 0.5}
                                               if not options["network"].startswith("bayes") else {**options, "epochs": 1}, device)  # fmt: skip
                    with torch_threads(threads):
                        plain = pass_ms(network, batch.x_eval, device, dropout=False)
                        mc = pass_ms(network, batch.x_eval, device, dropout=True)
                    where = f"{device_type} ({threads} thread{'s' if threads > 1 else ''})" if device_type == "cpu" else device_type
                    print(f"| {where} | {dataset} | {model} | {options['network']} | {rates[key]:,.0f} | {plain:,.0f} | {mc:,.0f} |", flush=True)
    print()
    for device_type, threads in setups:
        total = 0.0
        for dataset, entries in config["models"].items():
            for spec in entries.values():
                if spec.get("source") != "train":
                    continue
                options = {**trainer.training_options(spec), "threads": threads}
                key = (device_type, threads, dataset, options["network"], options["augmentation"], options["batch_size"])
                total += spec.get("ensemble", 1) * options["epochs"] * SHAPES[dataset][1] / rates[key]
        print(
            f"estimated training time of {Path(args.config).name} on {device_type} ({threads} threads): "
            f"{total / 60:.0f} min (an upper bound: an ensemble's first member is the single network's cached one)"
        )


if __name__ == "__main__":
    main()
