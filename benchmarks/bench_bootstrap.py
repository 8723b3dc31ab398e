"""Time B = 1000 bootstrap intervals of every metric for the thesis-shaped appendix, and the size study.

Intervals: synthetic test halves of the thesis's 32 models (13 x K=10 and 15 x K=100 with 5,000
test samples, 4 x K=1000 with 25,000), six methods each (six temperatures of the same logits, so
the probability matrices differ as calibrators' do), every metric of ``calibrepro.metrics.METRICS``
(``--metrics`` to restrict), resampled with shared counts per model as ``bootstrap_step`` does:
counts, replicates, the intervals of ``uncertainty.interval: auto`` and paired differences. Models run in ``--jobs``
worker processes (default 1: serial; 2 = what Snakemake does with ``--cores 2``; the replicates use one
BLAS thread either way, see ``bootstrap_replicates``); the wall and CPU time per shape and the total wall time
are printed (CPU time, user + system, is what a busy shared machine does not inflate).

The thesis appendix's bootstrap as the pipeline runs it: ``--appendix DIR`` writes the synthetic
logits of ``bench_pipeline.py`` (the 32 models: N = 10,000 / 50,000, so test halves of 5,000 /
25,000) as ``source: logits`` models with the thesis's calibrators, metrics, bins, split and
``uncertainty`` settings (``config/thesis.yaml``), runs the workflow up to ``metrics.csv`` (not
timed; cached in DIR), then times (a) ``snakemake --cores N`` making ``intervals.csv`` and
``comparisons.csv`` (the 32 ``bootstrap`` jobs: each reads its logits and split, loads the six fitted
calibrators, predicts, resamples, intervals and paired differences; Snakemake's start included) and
(b) the same 32 ``steps.uncertainty.bootstrap_step`` calls in ``--jobs`` worker processes, with their CPU
seconds (user + system, which a loaded machine does not inflate).

Size study: ``--size-study DIR`` also times ``size_study_step`` on the demo's cached logits and split
in DIR (a finished ``make demo`` / snakemake working directory), with the demo's sizes and seeds.

    .venv/bin/python benchmarks/bench_bootstrap.py [--resamples 1000] [--models 13,15,4] [--jobs 2] [--size-study .]
    .venv/bin/python benchmarks/bench_bootstrap.py --appendix DIR [--jobs 2] [--cores 2] [--no-snakemake]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
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


def _timed_step(kwargs: dict) -> tuple[int, float, float]:
    """Run one ``bootstrap_step``; return its K, wall seconds and CPU seconds (this process)."""
    from calibrepro.steps.uncertainty import bootstrap_step

    k = kwargs.pop("k")
    start, cpu = time.perf_counter(), time.process_time()
    bootstrap_step(**kwargs)
    return k, time.perf_counter() - start, time.process_time() - cpu


def time_appendix(args) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_pipeline as P

    workdir = args.appendix.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = P.make_config(workdir, small=False)  # the 32 models' logits, as bench_pipeline.py
    thesis = yaml.safe_load((ROOT / "config" / "thesis.yaml").read_text())
    config = {"models": yaml.safe_load(config_path.read_text())["models"],
              **{key: thesis[key] for key in ("split", "calibrators", "metrics", "bins", "uncertainty")}}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    from calibrepro.config import load_schema, validate_config

    config = validate_config(config, load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    layout, settings = P.LAYOUT, config["uncertainty"]
    print(f"thesis appendix bootstrap: 32 models, {len(config['calibrators'])} calibrators, "
          f"{len(config['metrics'])} metrics ({', '.join(config['metrics'])}), B = {settings['bootstrap']}; "
          f"preparing logits, splits, fits and metrics.csv in {workdir} (not timed)", flush=True)
    P.snakemake(workdir, config_path, args.cores, [], layout.metrics)
    bootstrap_dir = workdir / layout.results / "bootstrap"
    outputs = [workdir / layout.intervals, workdir / layout.comparisons]

    def clear():
        shutil.rmtree(bootstrap_dir, ignore_errors=True)
        for path in outputs:
            path.unlink(missing_ok=True)

    clear()
    first = None
    if not args.no_snakemake:
        load = os.getloadavg()[0]
        wall, busy = P.snakemake(workdir, config_path, args.cores, [], layout.intervals, layout.comparisons)
        print(f"  (a) snakemake --cores {args.cores} {layout.intervals} {layout.comparisons}: {wall:.1f} s wall "
              f"(machine busy {busy:.1f} CPU s meanwhile; load average {load:.1f} before)", flush=True)
        first = [path.read_bytes() for path in outputs]
        clear()
    seed = config["split"]["seeds"][0]
    k_of = {"cifar10": 10, "cifar100": 100, "imagenet": 1000}
    steps = []
    for dataset, models in config["models"].items():
        for model in models:
            bootstrap_dir.joinpath(dataset, model).mkdir(parents=True, exist_ok=True)
            steps.append(dict(
                k=k_of[dataset], logits_path=workdir / layout.logits(dataset, model),
                split_path=workdir / layout.split(dataset, seed),
                evaluation_csv=workdir / layout.evaluation(dataset, model, seed),
                intervals_output=workdir / layout.bootstrap(dataset, model, seed, "intervals"),
                comparisons_output=workdir / layout.bootstrap(dataset, model, seed, "comparisons"),
                calibrators={m: workdir / layout.calibrator(dataset, model, m, seed) for m in config["calibrators"]},
                metrics=config["metrics"], bins=config["bins"], dataset=dataset, model=model, seed=seed,
                resamples=settings["bootstrap"], level=settings["level"], bootstrap_seed=settings["seed"],
                interval=settings["interval"],
            ))
    steps.sort(key=lambda step: -step["k"])  # the largest first, as the workflow's priorities do
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_timed_step, steps))
    wall = time.perf_counter() - start
    for (dataset, k, n), count in zip(SHAPES, (13, 15, 4)):
        spent = sum(t for kk, t, _ in results if kk == k)
        cpu = sum(c for kk, _, c in results if kk == k)
        print(f"  (b) {dataset:9s} {count:2d} x K={k:<4d} test N={n:6,d}: {spent:7.2f} s in the workers, "
              f"{cpu:7.2f} s CPU ({cpu / count:.2f} per model)")
    total_cpu = sum(c for _, _, c in results)
    print(f"  (b) TOTAL 32 bootstrap_step calls in {args.jobs} process(es): {wall:.1f} s wall, {total_cpu:.1f} s CPU "
          f"(on {args.jobs} idle cores: about max(CPU / {args.jobs}, largest model) wall)")
    if first is not None:
        P.snakemake(workdir, config_path, args.cores, [], layout.intervals, layout.comparisons)
        same = [path.read_bytes() for path in outputs] == first
        print(f"  intervals.csv and comparisons.csv of (b) byte-identical to (a)'s: {'yes' if same else 'NO'}")


def time_size_study(workdir: Path) -> None:
    from calibrepro.steps.uncertainty import size_study_step

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
    parser.add_argument("--appendix", type=Path, help="time the thesis appendix's bootstrap jobs (working directory)")
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores of --appendix (default 2)")
    parser.add_argument("--no-snakemake", action="store_true", help="--appendix: only (b), the steps in-process")
    args = parser.parse_args()
    if args.appendix is not None:
        time_appendix(args)
        return
    time_intervals(args)
    if args.size_study is not None:
        time_size_study(args.size_study)


if __name__ == "__main__":
    main()
