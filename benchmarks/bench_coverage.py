"""Coverage of the 95 % bootstrap intervals of every metric, on simulated models with known truth.

A simulated model: per sample, true class probabilities ``q = softmax(g)`` with logits ``g`` drawn
around a random class (``g ~ N(0, 1)`` per class, ``+ boost`` on one), the label ``y ~ q``, and the
model's prediction ``p = softmax(g / tau)``: calibrated (``tau = 1``), overconfident (``tau = 0.6``)
or underconfident (``tau = 1.6``). The population value of every metric is computed on a pool of
``--pool`` samples with the expectation over the label taken exactly (accuracy ``E[q_argmax]``,
Brier ``E[sum p^2 - 2 p.q + 1]``, NLL ``E[-q.log p]``, and the binned calibration errors from the
per-bin sums of ``q`` instead of the 0/1 labels), so only the binning of a finite pool remains.

Each replication draws a test half of n samples, computes the metrics and B bootstrap replicates
(as ``bootstrap_step``), and the percentile, basic, BCa and debiased intervals
(:mod:`calibrepro.bootstrap`); the table gives, per scenario, metric and method, the share of the R
intervals that contain the population value and their mean width (in the metric's printed units).
The last table is the per-metric choice of ``uncertainty.interval: auto`` this data supports: the
method whose coverage is closest to 0.95 on average over the scenarios, where differences below
:data:`TIE` go to the simpler method (:data:`PREFERENCE`).

    .venv/bin/python benchmarks/bench_coverage.py [--replications 100] [--resamples 1000] [--jobs 2] [--sizes 5000,500] [--metrics a,b]
"""

from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy.special import softmax

from calibrepro import bootstrap as B
from calibrepro import metrics as M

CALIBRATIONS = {"calibrated": 1.0, "overconfident": 0.6, "underconfident": 1.6}
#: boost of one class's logit: about 80 % accuracy at K = 10 and 65 % at K = 100
BOOST = {10: 3.0, 100: 4.5}
BINS = 15
LEVEL = 0.95
#: coverage differences below this count as ties (the Monte Carlo standard error of a 0.95
#: coverage over R = 100 replications is 0.022); a tie goes to the first method in PREFERENCE:
#: the simplest, and BCa (a jackknife per cell) last
TIE = 0.02
PREFERENCE = ("percentile", "basic", "debiased", "bca")


def draw(k: int, tau: float, n: int, rng: np.random.Generator):
    """``n`` samples of the scenario: model probabilities ``p`` and true class probabilities ``q``."""
    g = rng.normal(size=(n, k))
    g[np.arange(n), rng.integers(0, k, size=n)] += BOOST[k]
    return softmax(g / tau, axis=1), softmax(g, axis=1)


def _binned(gap_sums: np.ndarray, counts: np.ndarray, total: int, kind: str) -> float:
    """Population ECE / MCE / l2 from per-bin sums of (q - conf) and bin counts."""
    nonempty = counts > 0
    gap = np.abs(gap_sums[nonempty]) / counts[nonempty]
    weight = counts[nonempty] / total
    if kind == "ece":
        return float(np.sum(weight * gap))
    if kind == "mce":
        return float(np.max(gap))
    return float(np.sqrt(np.sum(weight * gap * gap)))


def population(k: int, tau: float, size: int, seed: int, chunk: int = 100_000) -> dict[str, float]:
    """Population values of every metric on ``size`` samples (expectation over the label exact)."""
    rng = np.random.default_rng(seed)
    acc = brier = nll = 0.0
    class_p = np.zeros((k, BINS))
    class_q = np.zeros((k, BINS))
    confs, q_top = [], []
    for start in range(0, size, chunk):
        p, q = draw(k, tau, min(chunk, size - start), rng)
        rows = np.arange(p.shape[0])
        pred = np.argmax(p, axis=1)
        conf, qp = p[rows, pred], q[rows, pred]
        confs.append(conf)
        q_top.append(qp)
        acc += qp.sum()
        brier += np.sum(np.sum(p * p, axis=1) - 2 * np.sum(p * q, axis=1) + 1)
        nll += np.sum(-np.sum(q * np.log(np.clip(p, M.NLL_EPS, 1 - M.NLL_EPS)), axis=1))
        b = M.bin_index(p.ravel(), BINS).reshape(p.shape) + (np.arange(k) * BINS)[None, :]
        class_p += np.bincount(b.ravel(), weights=p.ravel(), minlength=k * BINS).reshape(k, BINS)
        class_q += np.bincount(b.ravel(), weights=q.ravel(), minlength=k * BINS).reshape(k, BINS)
    conf, qp = np.concatenate(confs), np.concatenate(q_top)
    out = {"accuracy": acc / size, "brier": brier / size, "nll": nll / size}
    b = M.bin_index(conf, BINS)
    counts = np.bincount(b, minlength=BINS)
    gaps = np.bincount(b, weights=qp - conf, minlength=BINS)
    for name, kind in (("ece", "ece"), ("mce", "mce"), ("ece_l2", "l2")):
        out[name] = _binned(gaps, counts, size, kind)
    order = np.argsort(conf, kind="stable")
    chunks = np.array_split(np.arange(size), BINS)
    mass_counts = np.array([c.size for c in chunks])
    mass_gaps = np.array([np.sum(qp[order[c]] - conf[order[c]]) for c in chunks])
    out["ece_equal_mass"] = _binned(mass_gaps, mass_counts, size, "ece")
    out["mce_equal_mass"] = _binned(mass_gaps, mass_counts, size, "mce")
    out["ece_l2_debiased"] = _binned(mass_gaps, mass_counts, size, "l2")  # its target: the binned l2 error
    out["classwise_ece"] = float(np.sum(np.abs(class_q - class_p)) / size / k)
    sigma = M.smooth_ece_bandwidth(conf, qp)
    out["smooth_ece"] = M.smooth_ece_at(conf, qp, sigma)
    return out


def one_replication(args) -> dict:
    k, tau, n, replication, resamples, names = args
    rng = np.random.default_rng([k, int(tau * 10), n, replication])
    p, q = draw(k, tau, n, rng)
    labels = (q.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(0, k - 1)
    estimates = M.compute_metrics(p, labels, names, bins=BINS)
    counts = B.resample_counts(n, resamples, B.bootstrap_seed(0, "coverage", k, tau, n, replication))
    replicates = B.bootstrap_replicates([("m", p)], labels, names, counts, bins=BINS)["m"]
    jackknife = B.jackknife_values(p, labels, names, bins=BINS)
    return {
        name: {
            method: B.interval(replicates[name], estimates[name], LEVEL, method, jackknife[name])
            for method in B.INTERVAL_METHODS
        }
        for name in names
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replications", type=int, default=100, help="R test halves per scenario")
    parser.add_argument("--resamples", type=int, default=1000, help="B bootstrap resamples")
    parser.add_argument("--pool", type=int, default=1_000_000, help="samples of the population values")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sizes", default="5000,500", help="test-half sizes n (comma-separated)")
    parser.add_argument("--metrics", default=",".join(M.METRICS))
    args = parser.parse_args()
    names = args.metrics.split(",")
    sizes = [int(size) for size in args.sizes.split(",")]
    scenarios = [(k, calibration, n) for n in sizes for k, calibration in itertools.product((10, 100), CALIBRATIONS.items())]
    start = time.perf_counter()
    print(f"R = {args.replications} replications, B = {args.resamples}, level {LEVEL}, pool {args.pool:,}, "
          f"jobs {args.jobs}", flush=True)
    summary: dict = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for k, (label, tau), n in scenarios:
            truth = population(k, tau, args.pool, seed=k + int(tau * 10))
            tasks = [(k, tau, n, r, args.resamples, names) for r in range(args.replications)]
            results = list(pool.map(one_replication, tasks, chunksize=max(1, len(tasks) // (4 * args.jobs))))
            print(f"\n### K = {k}, {label} (tau = {tau}), n = {n}   [{time.perf_counter() - start:.0f} s]\n")
            print("| metric | truth | " + " | ".join(f"{m} cover | width" for m in B.INTERVAL_METHODS) + " |")
            print("|---|---|" + "---|---|" * len(B.INTERVAL_METHODS))
            for name in names:
                scale = 100.0 if name not in ("brier", "nll") else 1.0
                cells = []
                for method in B.INTERVAL_METHODS:
                    bounds = [res[name][method] for res in results]
                    cover = np.mean([b.low <= truth[name] <= b.high for b in bounds])
                    width = np.mean([b.high - b.low for b in bounds]) * scale
                    summary.setdefault(name, {}).setdefault(method, []).append((n, cover, width))
                    cells.append(f"{cover:.2f} | {width:.3g}")
                print(f"| {name} | {truth[name] * scale:.4g} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n### Choice per metric (closest mean coverage to 0.95 over the scenarios with n = {max(sizes):,})\n")
    print("| metric | " + " | ".join(B.INTERVAL_METHODS) + " | choice |")
    print("|---|" + "---|" * (len(B.INTERVAL_METHODS) + 1))
    for name in names:
        scores = {}
        for method in B.INTERVAL_METHODS:
            rows = [(c, w) for n, c, w in summary[name][method] if n == max(sizes)]
            scores[method] = (round(abs(np.mean([c for c, _ in rows]) - LEVEL), 3), np.mean([w for _, w in rows]))
        best = min(score for score, _ in scores.values())
        choice = next(m for m in PREFERENCE if scores[m][0] <= best + TIE)
        line = " | ".join(f"{score:.3f}" for score, _ in scores.values())
        print(f"| {name} | {line} | {choice} |")
    print(f"\n(|mean coverage - 0.95| per method; ties within {TIE}: {' > '.join(PREFERENCE)})  "
          f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
