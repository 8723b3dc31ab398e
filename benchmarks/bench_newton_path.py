"""One cross-validation fold's regularisation path of Dir-L2, Dir-ODIR, MS-ODIR: Newton-CG's work.

Run from the repository root::

    .venv/bin/python benchmarks/bench_newton_path.py --classes 320 --samples 8000 --levels 1
    .venv/bin/python benchmarks/bench_newton_path.py --classes 320 --samples 8000 --levels 1 --diagonal-rank-one

For each method: the first of the 5 stratified folds of the synthetic calibration half of
``bench_calibrators.synthetic(K, samples)`` (``--logits realistic``: ``synthetic_logits.realistic``'s)
(its training part, 4/5 of the samples), fitted along
the default grid's path from strong to weak regularisation as the cross-validation does (each
point warm-started from its stronger neighbour), for the ``--levels`` strongest lambdas (the
early stop's usual reach: 2 at K = 1000 on the GPU).  Printed per fit and in total: Newton
iterations, Hessian-vector products, loss and gradient at the end, and the CPU seconds of the
process (single-threaded BLAS, as the fits run).  ``--diagonal-rank-one`` sets
``newton._SAMPLED_BLOCKS = False``: the GPU's preconditioner on the CPU (to compare it with the
sampled blocks); ``--no-shift-correction`` leaves out the correction on the softmax's flat
directions (``newton._SHIFT_CORRECTION``); ``--rest-floor F`` sets the sampled blocks' floor
``newton._REST_FLOOR``.  An older library: ``git archive REV src | tar -x -C /tmp/rev`` and run with
``PYTHONPATH=/tmp/rev/src``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:  # run from a checkout without installing the package
    import calibrepro  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from bench_calibrators import beyond_halves  # noqa: E402

METHODS = ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir"]


def fold_path(method: str, k: int, samples: int, levels: int, logits: str = "simple") -> tuple[int, int, bool, float, float]:
    """Fit one fold's path; print each fit; return (Newton iterations, products, all converged, CPU s, wall s)."""
    from sklearn.model_selection import StratifiedKFold

    from calibrepro.calibrators import make_calibrator
    from calibrepro.calibrators.dirichlet import one_blas_thread
    from calibrepro.calibrators.newton import SoftmaxRegression
    from calibrepro.calibrators.regularisation_search import grid_path

    (zc, yc), _ = beyond_halves(k, samples, logits)
    calibrator = make_calibrator(method)
    x = calibrator._x(zc)
    train, _ = next(StratifiedKFold(5, shuffle=True, random_state=0).split(zc, yc))
    grid = calibrator._grid()
    newton = products = 0
    converged = True
    start, cpu = time.perf_counter(), time.process_time()
    with one_blas_thread():
        problem = SoftmaxRegression(x[train], yc[train])
        solutions = {}
        for level in grid_path(*zip(*grid))[:levels]:
            for point, begin in level:
                w, b, info = calibrator._solve(problem, *point, solutions.get(begin), calibrator._centre(k))
                solutions[point] = (w, b)
                newton, products = newton + info["n_iter"], products + info["n_hessp"]
                converged = converged and info["converged"]
                print(
                    f"    (lambda, mu) = {point}: {info['n_iter']:3d} Newton, {info['n_hessp']:4d} H.v,"
                    f" converged {info['converged']}, loss {info['final_loss']:.10f}, max|g| {info['final_grad_max_abs']:.1e}",
                    flush=True,
                )
    return newton, products, converged, time.process_time() - cpu, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, nargs="+", default=[100])
    parser.add_argument("--samples", type=int, default=5000, help="calibration samples (a fold trains on 4/5)")
    parser.add_argument("--levels", type=int, default=2, help="the strongest lambdas of the path to fit")
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--logits", choices=["simple", "realistic"], default="simple", help="which synthetic halves")
    parser.add_argument("--diagonal-rank-one", action="store_true", help="the GPU's preconditioner instead of the sampled blocks")
    parser.add_argument("--no-shift-correction", action="store_true", help="without newton._SHIFT_CORRECTION")
    parser.add_argument("--rest-floor", type=float, help="the sampled blocks' newton._REST_FLOOR instead of its default")
    args = parser.parse_args(argv)
    from calibrepro.calibrators import newton

    if args.diagonal_rank_one:
        newton._SAMPLED_BLOCKS = False
    if args.no_shift_correction:
        newton._SHIFT_CORRECTION = False
    if args.rest_floor is not None:
        newton._REST_FLOOR = args.rest_floor
    print(
        f"load average {os.getloadavg()[0]:.2f}; diagonal plus rank one {args.diagonal_rank_one};"
        f" no shift correction {args.no_shift_correction}; rest floor {newton._REST_FLOOR:g}"
    )
    for k in args.classes:
        for method in args.methods:
            print(f"K={k} {args.samples} samples (fold: {args.samples * 4 // 5}) {method}:", flush=True)
            its, products, converged, cpu, wall = fold_path(method, k, args.samples, args.levels, args.logits)
            print(
                f"  total: {its} Newton, {products} H.v, all converged {converged}, {cpu:.1f} CPU s, {wall:.1f} s wall",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
