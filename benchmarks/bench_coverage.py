"""Coverage of the 95 % bootstrap intervals of every metric, on simulated models with known truth.

A simulated model: per sample, true class probabilities ``q = softmax(g)`` with logits ``g`` drawn
around a random class (``g ~ N(0, 1)`` per class, ``+ boost`` on one), the label ``y ~ q``, and the
model's prediction ``p = softmax(g / tau)``: calibrated (``tau = 1``), mildly overconfident
(``tau = 0.95``: ECE 2.2 % at K = 10, 3.8 % at K = 100, the realistic case), overconfident
(``tau = 0.6``) or underconfident (``tau = 1.6``). The population value of every metric is computed
on a pool of ``--pool`` samples with the expectation over the label taken exactly (accuracy
``E[q_argmax]``, Brier ``E[sum p^2 - 2 p.q + 1]``, NLL ``E[-q.log p]``, and the binned calibration
errors from the per-bin sums of ``q`` instead of the 0/1 labels), so only the binning of a finite
pool remains.

Each replication draws a test half of n samples, computes the metrics and B bootstrap replicates of
all of them at once (``bootstrap_replicates``: one count matrix, every metric's resampled form), and
the percentile, basic, BCa and debiased intervals as the pipeline makes them (clipped to the
metric's range, :func:`calibrepro.bootstrap.interval`); a cell is the share of the R intervals that
contain the population value (Monte Carlo standard error ``sqrt(0.95 * 0.05 / R)``: 0.015 at
R = 200) and their mean width.  The last table is the per-metric choice of
``uncertainty.interval: auto`` this data supports: the method with the smallest mean of
``|coverage - 0.95|`` over all scenarios, where differences below :data:`TIE` go to the simpler
method (:data:`PREFERENCE`).

Every finished scenario is saved under ``--out`` (one ``.npz``: the population values and all R x
metrics x methods intervals); a rerun with the same ``--out`` and settings loads it, computes only
replications beyond the saved ones (a larger R later extends a run), and ``--replications 0`` only
prints the tables of what is saved.

    nice -n 10 .venv/bin/python benchmarks/bench_coverage.py [--replications 200] [--resamples 1000] [--jobs 2]
        [--sizes 5000,500] [--calibrations calibrated,mild,overconfident,underconfident] [--classes 10,100]
        [--metrics a,b] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.special import softmax
from threadpoolctl import threadpool_limits

from calibrepro import bootstrap as B
from calibrepro import metrics as M

CALIBRATIONS = {"calibrated": 1.0, "mild": 0.95, "overconfident": 0.6, "underconfident": 1.6}
#: boost of one class's logit (about 59 % accuracy at K = 10 and 38 % at K = 100)
BOOST = {10: 3.0, 100: 4.5}
BINS = 15
LEVEL = 0.95
#: mean |coverage - 0.95| differences below this count as ties (about the Monte Carlo standard
#: error of one cell at R = 200, 0.015); a tie goes to the first method in PREFERENCE: the
#: simplest, and BCa (a jackknife per cell) last
TIE = 0.015
PREFERENCE = ("percentile", "basic", "debiased", "bca")
METHODS = B.INTERVAL_METHODS


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


def _seed(k: int, tau: float, n: int) -> list[int]:
    return [k, round(tau * 100), n]


def scenario_population(args) -> np.ndarray:
    k, tau, pool, names = args
    with threadpool_limits(1):
        truth = population(k, tau, pool, seed=k + round(tau * 100))
    return np.array([truth[name] for name in names])


def one_replication(args) -> np.ndarray:
    """(metrics, methods, 3) array of the intervals' low, high, centre of one simulated test half."""
    k, tau, n, replication, resamples, names = args
    with threadpool_limits(1):  # one BLAS thread per worker: the workers are the parallelism
        rng = np.random.default_rng([*_seed(k, tau, n), replication])
        p, q = draw(k, tau, n, rng)
        labels = (q.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(0, k - 1)
        estimates = M.compute_metrics(p, labels, names, bins=BINS)
        counts = B.resample_counts(n, resamples, B.bootstrap_seed(0, "coverage", *_seed(k, tau, n), replication))
        replicates = B.bootstrap_replicates([("m", p)], labels, names, counts, bins=BINS)["m"]
        jackknife = B.jackknife_values(p, labels, names, bins=BINS)
    out = np.empty((len(names), len(METHODS), 3))
    for i, name in enumerate(names):
        for j, method in enumerate(METHODS):
            bounds = B.interval(replicates[name], estimates[name], LEVEL, method, jackknife[name], M.spec(name).bounds)
            out[i, j] = bounds.low, bounds.high, bounds.centre
    return out


def _scale(name: str) -> float:
    return 1.0 if name in ("brier", "nll") else 100.0


def _load(path: Path | None, names: list[str], resamples: int, pool: int):
    """The saved ``(truth, intervals)`` of a scenario if its settings match, else None."""
    if path is None or not path.is_file():
        return None
    saved = np.load(path, allow_pickle=False)
    same = list(saved["names"]) == names and int(saved["resamples"]) == resamples and int(saved["pool"]) == pool
    return (saved["truth"], saved["intervals"]) if same else None


def run(args, names: list[str], scenarios: list[tuple]) -> dict:
    """``{scenario: (truth (metrics,), intervals (R, metrics, methods, 3))}``.

    Saved scenarios are loaded; one saved with fewer than R replications gets only the missing ones
    (replication r always draws the same test half and resamples, so R can be raised later).
    """
    results: dict = {}
    todo = []
    for scenario in scenarios:
        path = args.out / f"K{scenario[0]}_{scenario[1]}_n{scenario[3]}.npz" if args.out else None
        saved = _load(path, names, args.resamples, args.pool)
        have = 0 if saved is None else saved[1].shape[0]
        if saved is not None:
            results[scenario] = saved
        if args.replications > have:
            todo.append((scenario, path, have))
    start = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        populations = {}  # one per (K, tau): the same for every n
        for (k, _, tau, _), _, have in todo:
            if have == 0 and (k, tau) not in populations:
                known = next((results[s][0] for s in results if s[0] == k and s[2] == tau), None)
                populations[k, tau] = known if known is not None else pool.submit(
                    scenario_population, (k, tau, args.pool, names))
        pending = {s: [pool.submit(one_replication, (s[0], s[2], s[3], r, args.resamples, names))
                       for r in range(have, args.replications)] for s, _, have in todo}
        for scenario, path, have in todo:
            new = np.stack([future.result() for future in pending[scenario]])
            if have:
                truth, old = results[scenario]
                intervals = np.concatenate([old, new])
            else:
                truth = populations[scenario[0], scenario[2]]
                truth = truth if isinstance(truth, np.ndarray) else truth.result()
                intervals = new
            results[scenario] = truth, intervals
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(".part.npz")
                np.savez(partial, names=np.array(names), resamples=args.resamples, pool=args.pool, truth=truth,
                         intervals=intervals)
                partial.replace(path)
            print(f"K = {scenario[0]}, {scenario[1]}, n = {scenario[3]}: {intervals.shape[0]} replications, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    return results


def coverage(truth: np.ndarray, intervals: np.ndarray):
    """(metrics, methods) coverage and mean width of the intervals."""
    t = truth[None, :, None]
    covered = (intervals[..., 0] <= t) & (t <= intervals[..., 1])
    return covered.mean(axis=0), (intervals[..., 1] - intervals[..., 0]).mean(axis=0)


def print_tables(results: dict, names: list[str], scenarios: list[tuple]) -> None:
    done = [s for s in scenarios if s in results]
    for n in sorted({s[3] for s in done}, reverse=True):
        columns = [s for s in done if s[3] == n]
        reps = sorted({results[s][1].shape[0] for s in columns})
        print(f"\n### Coverage, n = {n:,} (R = {'/'.join(map(str, reps))}; "
              f"`truth (printed units): {' / '.join(METHODS)}`)\n")
        print("| metric | " + " | ".join(f"K={s[0]} {s[1]}" for s in columns) + " |")
        print("|---|" + "---|" * len(columns))
        for i, name in enumerate(names):
            cells = []
            for s in columns:
                truth, intervals = results[s]
                cover, _ = coverage(truth, intervals)
                cells.append(f"{truth[i] * _scale(name):.4g}: " + " / ".join(f"{c:.2f}" for c in cover[i]))
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"\nMean width (printed units), n = {n:,}: `{' / '.join(METHODS)}`\n")
        print("| metric | " + " | ".join(f"K={s[0]} {s[1]}" for s in columns) + " |")
        print("|---|" + "---|" * len(columns))
        for i, name in enumerate(names):
            cells = []
            for s in columns:
                _, width = coverage(*results[s])
                cells.append(" / ".join(f"{w * _scale(name):.3g}" for w in width[i]))
            print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n### Choice per metric (smallest mean |coverage - {LEVEL}| over the {len(done)} scenarios; "
          f"n = 5,000 alone in brackets)\n")
    print("| metric | " + " | ".join(METHODS) + " | choice | now |")
    print("|---|" + "---|" * (len(METHODS) + 2))
    for i, name in enumerate(names):
        deviation = np.array([np.abs(coverage(*results[s])[0][i] - LEVEL) for s in done])  # (scenarios, methods)
        large = np.array([s[3] == max(x[3] for x in done) for s in done])
        scores = dict(zip(METHODS, deviation.mean(axis=0)))
        best = min(scores.values())
        choice = next(m for m in PREFERENCE if scores[m] <= best + TIE)
        cells = " | ".join(f"{scores[m]:.3f} ({deviation[large].mean(axis=0)[j]:.3f})" for j, m in enumerate(METHODS))
        print(f"| {name} | {cells} | {choice} | {M.spec(name).interval} |")
    print(f"\n(ties within {TIE}: {' > '.join(PREFERENCE)}; `now`: `Metric.interval`, what `auto` uses)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replications", type=int, default=200, help="R test halves per scenario (0: print saved)")
    parser.add_argument("--resamples", type=int, default=1000, help="B bootstrap resamples")
    parser.add_argument("--pool", type=int, default=1_000_000, help="samples of the population values")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sizes", default="5000,500", help="test-half sizes n (comma-separated)")
    parser.add_argument("--metrics", default=",".join(M.METRICS))
    parser.add_argument("--calibrations", default=",".join(CALIBRATIONS), help="scenarios, in this order")
    parser.add_argument("--classes", default="10,100", help="K of the scenarios, in this order")
    parser.add_argument("--out", type=Path, help="folder of the saved scenarios (reused by a rerun)")
    args = parser.parse_args()
    names = args.metrics.split(",")
    sizes = [int(size) for size in args.sizes.split(",")]
    calibrations = [(label, CALIBRATIONS[label]) for label in args.calibrations.split(",")]
    classes = [int(k) for k in args.classes.split(",")]
    scenarios = [(k, label, tau, n) for n in sizes for (label, tau), k in itertools.product(calibrations, classes)]
    start, cpu = time.perf_counter(), time.process_time()
    print(f"R = {args.replications} replications, B = {args.resamples}, level {LEVEL}, pool {args.pool:,}, "
          f"jobs {args.jobs}, {len(names)} metrics, {len(scenarios)} scenarios", flush=True)
    results = run(args, names, scenarios)
    print_tables(results, names, scenarios)
    children = __import__("os").times()
    print(f"\ntotal {time.perf_counter() - start:.0f} s wall, "
          f"{children.children_user + children.children_system + time.process_time() - cpu:.0f} s CPU")


if __name__ == "__main__":
    main()
