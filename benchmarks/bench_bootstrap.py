"""Time B = 1000 bootstrap intervals of every metric for the thesis-shaped appendix, and the size study.

Intervals: synthetic test halves of the thesis's 32 models (13 x K=10 and 15 x K=100 with 5,000
test samples, 4 x K=1000 with 25,000), six methods each (six temperatures of the same logits, so
the probability matrices differ as calibrators' do), every metric of ``calibrepro.metrics.METRICS``
(``--metrics`` to restrict), resampled with shared counts per model as ``bootstrap_step`` does:
counts, replicates, the intervals of ``uncertainty.interval: auto`` and paired differences. Models run in ``--jobs``
worker processes (default 1: serial; 2 = what Snakemake does with ``--cores 2``; the replicates use one
BLAS thread either way, see ``bootstrap_replicates``); the wall and CPU time per shape and the total wall time
are printed (CPU time, user + system, is what a busy shared machine does not inflate).

Size study: ``--size-study DIR`` also times ``size_study_step`` on the demo's cached logits and split
in DIR (a finished ``make demo`` / snakemake working directory), with the demo's sizes and seeds.

    .venv/bin/python benchmarks/bench_bootstrap.py [--resamples 1000] [--models 13,15,4] [--jobs 2] [--size-study .]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml
from scipy.special import softmax

from calibrepro import metrics as M
from calibrepro.layout import Layout
from calibrepro.bootstrap import (
    bootstrap_replicates, bootstrap_seed, interval, interval_method, jackknife_values, paired_differences,
    resample_counts,
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
    chosen = {name: interval_method(name, "auto") for name in names}  # the default, uncertainty.interval: auto
    jackknifed = [name for name in names if chosen[name] == "bca"]
    jackknife = {}

    def probabilities():
        for m, s in zip(methods, SCALES):
            probs = softmax(logits * s, axis=1)
            if jackknifed:
                jackknife[m] = jackknife_values(probs, labels, jackknifed)
            yield m, probs

    replicates = bootstrap_replicates(probabilities(), labels, names, counts)
    for name in names:
        estimates = {m: float(np.mean(replicates[m][name])) for m in methods}  # stand-in: not timed separately
        jack = {m: jackknife[m][name] for m in methods} if chosen[name] == "bca" else None
        for m in methods:
            interval(replicates[m][name], estimates[m], 0.95, chosen[name], None if jack is None else jack[m])
        paired_differences({m: replicates[m][name] for m in methods}, estimates, methods[0], 0.95, chosen[name], jack)


def _timed_model(job):
    """Run one model; return its K, wall seconds and CPU seconds (user + system, this process)."""
    k, n, seed, names, resamples, single_thread = job
    if single_thread:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            start, cpu = time.perf_counter(), time.process_time()
            one_model(k, n, seed, names, resamples)
    else:
        start, cpu = time.perf_counter(), time.process_time()
        one_model(k, n, seed, names, resamples)
    return k, time.perf_counter() - start, time.process_time() - cpu


def time_intervals(args) -> None:
    names = args.metrics.split(",") if args.metrics else list(M.METRICS)
    counts = [int(c) for c in args.models.split(",")]
    print(f"B = {args.resamples} bootstrap intervals, {len(names)} metrics ({', '.join(names)}), 6 methods, "
          f"{args.jobs} worker process(es)")
    jobs = [(k, n, 1000 * k + index, names, args.resamples, args.jobs > 1)
            for (_, k, n), count in zip(SHAPES, counts) for index in range(count)]
    jobs.sort(key=lambda job: -job[0] * job[1])  # largest first: better balance over the workers
    start = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_timed_model, jobs))
    else:
        results = [_timed_model(job) for job in jobs]
    wall = time.perf_counter() - start
    for (dataset, k, n), count in zip(SHAPES, counts):
        spent = sum(t for kk, t, _ in results if kk == k)
        cpu = sum(c for kk, _, c in results if kk == k)
        print(f"  {dataset:9s} {count:2d} x K={k:<4d} N={n:6,d}: {spent:7.2f} s in the workers "
              f"({spent / max(count, 1):.2f} s per model), {cpu:7.2f} s CPU")
    print(f"  TOTAL {sum(counts)} models: {wall:.2f} s wall, {sum(c for _, _, c in results):.2f} s CPU "
          f"(user + system of the worker(s); wall/CPU shows how much of the cores the job got)")


def time_size_study(workdir: Path) -> None:
    from calibrepro.pipeline import size_study_step

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    study = config["size_study"]
    layout = Layout.named(config["name"])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for dataset, models in config["models"].items():
            for model in models:
                size_study_step(
                    workdir / layout.logits(dataset, model), workdir / layout.split(dataset, 0),
                    Path(tmp) / f"{model}.csv", methods=config["calibrators"], sizes=study["sizes"],
                    seeds=study["seeds"], metrics=config["metrics"], bins=config["bins"], dataset=dataset, model=model,
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
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--size-study", type=Path, help="a finished demo working directory")
    args = parser.parse_args()
    time_intervals(args)
    if args.size_study is not None:
        time_size_study(args.size_study)


if __name__ == "__main__":
    main()
