"""Time recalibration + all metrics of one regression model, for each predictive family.

Run from the repository root::

    .venv/bin/python benchmarks/bench_regression_calibration.py            # UCI sizes and the energy series
    .venv/bin/python benchmarks/bench_regression_calibration.py --quick    # UCI sizes only

One "model" is what one split of the seed's study computes for it: the three recalibrators
(isotonic one- and two-sided, std scaling) fitted on the calibration part, then the 9 metrics of
``calibrepro.regression.metrics.REGRESSION_METRICS`` on the test part for the uncalibrated
predictive and the three recalibrated ones, plus the one- and two-sided reliability curves.
Predictives are synthetic, from a fixed seed, of the four kinds the regressors produce:
a heteroscedastic Gaussian ("aleatoric"), a 5-member ensemble mixture, 50- and 100-pass MC-Dropout
mixtures (100: the configs' default), and the evidential Student-t.  Sizes: UCI wine (288 calibration + 160 test samples, the
largest of wine and crime's test parts is crime's 200) and the energy series (600 calibration +
6,000 test windows' hours).  The target is under a second per model at the UCI sizes.  Wall and
process CPU seconds are printed (best of ``--repeat``): on a shared machine the CPU time is the
fairer figure.  numpy may use more than one thread (OpenBLAS) for the matrix products.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from calibrepro.regression.distributions import Gaussian, GaussianMixture, StudentT
from calibrepro.regression.metrics import LEVELS, REGRESSION_METRICS, accuracy_curve, sample_terms
from calibrepro.regression.recalibration import make_recalibrator

METHODS = ("uncalibrated", "isotonic", "isotonic_two_sided", "std_scaling")


def predictive(kind: str, n: int, rng: np.random.Generator):
    mu = rng.normal(size=n)
    sd = np.exp(0.3 * rng.normal(size=n))
    if kind == "gaussian":
        return Gaussian(mu, sd)
    if kind == "student_t":
        return StudentT(mu, sd, rng.uniform(3, 20, size=n))
    members = {"ensemble_5": 5, "mc_dropout_50": 50, "mc_dropout_100": 100}[kind]
    return GaussianMixture(mu[:, None] + 0.5 * sd[:, None] * rng.normal(size=(n, members)),
                           np.broadcast_to(0.8 * sd[:, None], (n, members)))


def one_model(kind: str, n_cal: int, n_test: int, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    dist = predictive(kind, n_cal + n_test, rng)
    y = dist.mean() + 1.8 * (dist.sample(1, seed=seed)[:, 0] - dist.mean())  # overconfident by 1.8
    cal, test = dist.take(slice(0, n_cal)), dist.take(slice(n_cal, None))
    y_cal, y_test = y[:n_cal], y[n_cal:]
    start, cpu = time.perf_counter(), time.process_time()
    for method in METHODS:
        recalibrated = make_recalibrator(method).fit(cal, y_cal).transform(test)
        terms = sample_terms(recalibrated, y_test)
        values = [metric.value(terms) for metric in REGRESSION_METRICS.values()]
        curves = [accuracy_curve(terms.pit, LEVELS, sided) for sided in ("one", "two")]
        assert np.isfinite(values).all() and all(np.isfinite(c).all() for c in curves), (kind, method, values)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="UCI sizes only")
    parser.add_argument("--repeat", type=int, default=3, help="best of R runs (default 3)")
    args = parser.parse_args()
    sizes = [("UCI wine", 288, 160), ("UCI crime", 360, 200)]
    if not args.quick:
        sizes.append(("energy", 600, 6000))
    print(f"{'size':<10} {'predictive':<14} {'wall s':>8} {'cpu s':>8}")
    for label, n_cal, n_test in sizes:
        for kind in ("gaussian", "student_t", "ensemble_5", "mc_dropout_50", "mc_dropout_100"):
            runs = [one_model(kind, n_cal, n_test, seed) for seed in range(args.repeat)]
            wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
            print(f"{label:<10} {kind:<14} {wall:8.3f} {cpu:8.3f}", flush=True)


if __name__ == "__main__":
    main()
