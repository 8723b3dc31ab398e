"""Time B = 1000 bootstrap intervals of every metric for the thesis-shaped appendix, and the size study.

Intervals: synthetic test halves of the thesis's 32 models (13 x K=10 and 15 x K=100 with 5,000
test samples, 4 x K=1000 with 25,000), six methods each (six temperatures of the same logits, so
the probability matrices differ as calibrators' do), every metric of ``calibrepro.metrics.METRICS``
(``--metrics`` to restrict), resampled with shared counts per model as ``bootstrap_step`` does:
counts, replicates, percentile intervals and paired differences. One process, serial; the time per
shape is printed.

Size study: ``--size-study DIR`` also times ``size_study_step`` on the demo's cached logits and split
in DIR (a finished ``make demo`` / snakemake working directory), with the demo's sizes and seeds.

    .venv/bin/python benchmarks/bench_bootstrap.py [--resamples 1000] [--models 13,15,4] [--size-study .]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from scipy.special import softmax

from calibrepro import metrics as M
from calibrepro.bootstrap import (
    bootstrap_replicates, bootstrap_seed, paired_differences, percentile_interval, resample_counts,
)

ROOT = Path(__file__).resolve().parents[1]
SHAPES = (("cifar10", 10, 5_000), ("cifar100", 100, 5_000), ("imagenet", 1000, 25_000))
SCALES = (2.5, 1.0, 1.2, 1.4, 1.6, 1.8)


def test_half(k: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % k
    logits = rng.normal(size=(n, k))
    hit = rng.random(n) < 0.8
    target = np.where(hit, labels, rng.integers(0, k, size=n))
    logits[np.arange(n), target] += rng.gamma(4.0, 1.0, size=n)
    return logits, labels


def one_model(k: int, n: int, seed: int, names: list[str], resamples: int) -> None:
    logits, labels = test_half(k, n, seed)
    counts = resample_counts(n, resamples, bootstrap_seed(0, "bench", seed, 0))
    methods = [f"m{j}" for j in range(len(SCALES))]
    replicates = bootstrap_replicates(
        ((m, softmax(logits * s, axis=1)) for m, s in zip(methods, SCALES)), labels, names, counts
    )
    for name in names:
        estimates = {m: float(np.mean(replicates[m][name])) for m in methods}  # stand-in: not timed separately
        for m in methods:
            percentile_interval(replicates[m][name], 0.95)
        paired_differences({m: replicates[m][name] for m in methods}, estimates, methods[0], 0.95)


def time_intervals(args) -> None:
    names = args.metrics.split(",") if args.metrics else list(M.METRICS)
    counts = [int(c) for c in args.models.split(",")]
    total = 0.0
    print(f"B = {args.resamples} bootstrap intervals, {len(names)} metrics ({', '.join(names)}), 6 methods")
    for (dataset, k, n), count in zip(SHAPES, counts):
        start = time.perf_counter()
        for index in range(count):
            one_model(k, n, 1000 * k + index, names, args.resamples)
        elapsed = time.perf_counter() - start
        total += elapsed
        print(f"  {dataset:9s} {count:2d} x K={k:<4d} N={n:6,d}: {elapsed:7.2f} s ({elapsed / max(count, 1):.2f} s per model)")
    print(f"  TOTAL {sum(counts)} models: {total:.2f} s")


def time_size_study(workdir: Path) -> None:
    from calibrepro.pipeline import size_study_step

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    study = config["size_study"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for dataset, models in config["models"].items():
            for model in models:
                size_study_step(
                    workdir / f"results/logits/{dataset}/{model}.npz", workdir / f"results/splits/{dataset}/seed0.npz",
                    methods=config["calibrators"], sizes=study["sizes"], seeds=study["seeds"],
                    metrics=config["metrics"], bins=config["bins"], dataset=dataset, model=model,
                    output=Path(tmp) / f"{model}.csv",
                )
    elapsed = time.perf_counter() - start
    fits = sum(len(m) for m in config["models"].values()) * len(study["sizes"]) * len(study["seeds"])
    print(f"size study on the demo ({fits * len(config['calibrators'])} fits, {len(config['metrics'])} metrics each): "
          f"{elapsed:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--models", default="13,15,4", help="models per shape (K=10, K=100, K=1000)")
    parser.add_argument("--metrics", default="", help="comma-separated subset of the metrics (default: all)")
    parser.add_argument("--size-study", type=Path, help="a finished demo working directory")
    args = parser.parse_args()
    time_intervals(args)
    if args.size_study is not None:
        time_size_study(args.size_study)


if __name__ == "__main__":
    main()
