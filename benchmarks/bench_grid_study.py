"""Where the cross-validated (lambda, mu) of Dir-L2, Dir-ODIR and MS-ODIR lies, and what it gives (issue 33).

Run from the repository root::

    # the 19 real CIFAR-10 models (../shared/realdata), the thesis's split, default grids
    .venv/bin/python benchmarks/bench_grid_study.py --real '../shared/realdata/logits/chenyaofo/cifar10/*.npz'
    # synthetic CIFAR-100-like logits, calibration halves of 1,000 to 10,000 samples, a wide grid
    .venv/bin/python benchmarks/bench_grid_study.py --synthetic 100:1000 100:2500 100:5000 100:10000 \\
        --lambdas 1e-2 1e-1 1 10 1e2 1e3 1e4 1e5 1e6 1e7 1e8 --out /tmp/study100.json
    # ImageNet-sized (about an hour on 2 cores for the three methods): in the background, once
    nohup .venv/bin/python benchmarks/bench_grid_study.py --synthetic 1000:25000 --out /tmp/study1000.json &
    .venv/bin/python benchmarks/bench_grid_study.py --table /tmp/study100.json /tmp/study1000.json

For every data set and method it fits the calibrator as the pipeline does (5-fold CV on the
calibration half, folds in ``--threads`` threads, the search of
``calibrepro.calibrators.regularisation_search``) and prints: the chosen (lambda, mu), where it lies
(inside the grid, at its edge, or found by the extension beyond it), the points the extension added,
whether the search was capped, the fits made, CPU and wall seconds, and the test NLL against the
uncalibrated model, temperature scaling (TS) and vector scaling (VS).  Real logits are split as the
thesis splits them (``train_test_split(np.arange(N), test_size=0.5, random_state=0,
stratify=labels)``, calibrate on the first half); synthetic ones come from
``synthetic_logits.realistic`` (K classes, N calibration + N test samples).  ``--out`` appends each
finished fit to a JSON file at once (a long run keeps what it did); ``--table`` prints saved files.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:  # run from a checkout without installing the package
    import calibrepro  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from synthetic_logits import realistic  # noqa: E402

METHODS = ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir"]
REFERENCES = ["uncalibrated", "temperature_scaling", "vector_scaling"]


def real_halves(path: str):
    """The calibration and test halves of a real logits archive, split as the thesis splits them."""
    from calibrepro.splits import make_split

    with np.load(path, allow_pickle=False) as archive:
        logits, labels = archive["logits"], archive["labels"]
    calibration, test = make_split(labels, 0.5, 0, where=path)
    return (logits[calibration], labels[calibration]), (logits[test], labels[test])


def data_sets(real: list[str], synthetic: list[str]):
    """``(name, calibration half, test half)`` of every real archive and every synthetic ``K:N``."""
    for path in sorted(p for pattern in real for p in glob.glob(pattern)):
        yield os.path.basename(path).removesuffix(".npz"), *real_halves(path)
    for shape in synthetic:
        k, n = (int(part) for part in shape.split(":"))
        yield f"synthetic K={k} n={n}", *realistic(k, n)


def where(value: float, grid: list[float]) -> str:
    """``inside``, ``edge`` (the grid's first or last value) or ``beyond`` the sorted ``grid``."""
    if len(grid) == 1 or grid[0] < value < grid[-1]:
        return "inside" if value in grid else "beyond"
    return "edge" if value in (grid[0], grid[-1]) else "beyond"


def study_row(name, calibration, test, method, options, references) -> dict:
    """Fit ``method`` with ``options`` on the calibration half; the row of the study's table."""
    from calibrepro.calibrators import make_calibrator
    from calibrepro.metrics import nll

    (zc, yc), (zt, yt) = calibration, test
    start, cpu = time.perf_counter(), time.process_time()
    calibrator = make_calibrator(method, **options).fit(zc, yc)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    cv = calibrator.diagnostics_["cross_validation"]
    fitted = [point for point in cv["grid"] + cv["extension"] if point["cv_nll"] is not None]
    lambdas = sorted({point["lambda"] for point in cv["grid"]})
    mus = sorted({point["mu"] for point in cv["grid"]})
    return {
        "data": name, "k": int(zc.shape[1]), "n": int(len(yc)), "method": method,
        "lambda": calibrator.reg_lambda_, "mu": calibrator.reg_mu_,
        "lambda_where": where(calibrator.reg_lambda_, lambdas),
        "mu_where": where(calibrator.reg_mu_, mus) if method != "dirichlet_l2" else "-",
        "cv_nll": min(point["cv_nll"] for point in fitted),
        "extension": [(point["lambda"], point["mu"]) for point in cv["extension"]],
        "capped": calibrator.diagnostics_["search_capped"],
        "stops": cv["search"]["stops"],
        "fits": 1 + sum(len(point["newton_iterations"]) for point in fitted),
        "converged": bool(calibrator.diagnostics_["converged"]),
        "cpu": cpu, "wall": wall, "load": os.getloadavg()[0],
        "test_nll": nll(calibrator.predict_proba(zt), yt), **references,
    }


def reference_nlls(calibration, test) -> dict:
    from calibrepro.calibrators import make_calibrator
    from calibrepro.metrics import nll

    (zc, yc), (zt, yt) = calibration, test
    return {method: nll(make_calibrator(method).fit(zc, yc).predict_proba(zt), yt) for method in REFERENCES}


def print_table(rows: list[dict], summary: bool = True, header: bool = True) -> None:
    if header:
        print(
            f"{'data':28s} {'method':20s} {'lambda*':>8s} {'where':7s} {'mu*':>7s} {'where':7s} {'ext':>3s} {'capped':6s}"
            f" {'fits':>4s} {'cpu s':>7s} {'test NLL':>8s} {'/ TS':>6s} {'/ unc':>6s} {'/ VS':>6s}"
        )
    for r in rows:
        print(
            f"{r['data'][:28]:28s} {r['method']:20s} {r['lambda']:8.0e} {r['lambda_where']:7s} {r['mu']:7.0e}"
            f" {r['mu_where']:7s} {len(r['extension']):3d} {str(r['capped']):6s} {r['fits']:4d} {r['cpu']:7.1f}"
            f" {r['test_nll']:8.4f} {r['test_nll'] / r['temperature_scaling']:6.3f} {r['test_nll'] / r['uncalibrated']:6.3f}"
            f" {r['test_nll'] / r['vector_scaling']:6.3f}"
        )
    for method in sorted({r["method"] for r in rows}) if summary else []:
        mine = [r for r in rows if r["method"] == method]
        places = " / ".join(str(sum(r["lambda_where"] == place for r in mine)) for place in ("inside", "edge", "beyond"))
        to_ts = [r["test_nll"] / r["temperature_scaling"] for r in mine]
        worse = sum(r["test_nll"] > r["uncalibrated"] for r in mine)
        capped = sum(r["capped"] for r in mine)
        print(f"{method}: {len(mine)} fits; chosen lambda inside / at the edge of / beyond the grid: {places};"
              f" capped {capped}; test NLL / TS median {np.median(to_ts):.4f}, worst {max(to_ts):.4f};"
              f" worse than uncalibrated: {worse}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", nargs="*", default=[], metavar="GLOB", help="real logits archives (logits, labels)")
    parser.add_argument("--synthetic", nargs="*", default=[], metavar="K:N", help="synthetic_logits.realistic(K, N)")
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--lambdas", type=float, nargs="+", help="the lambda grid (default: the library's)")
    parser.add_argument("--mus", type=float, nargs="+", help="the mu grid of the ODIR methods (default: the library's)")
    parser.add_argument("--max-extensions", type=int, help="the search's cap (default: the library's)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the folds")
    parser.add_argument("--out", help="append each finished row to this JSON file")
    parser.add_argument("--table", nargs="+", metavar="JSON", help="only print the rows of these --out files")
    args = parser.parse_args(argv)
    if args.table:
        rows = [row for path in args.table for row in json.load(open(path))]
        print_table(rows)
        return 0
    options = {"threads": args.threads, "device": "cpu"}
    for key in ("lambdas", "mus", "max_extensions"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    print(f"load average {os.getloadavg()[0]:.2f}; options {options}", flush=True)
    rows = json.load(open(args.out)) if args.out and os.path.exists(args.out) else []
    printed = False
    for name, calibration, test in data_sets(args.real, args.synthetic):
        references = reference_nlls(calibration, test)
        for method in args.methods:
            row = study_row(name, calibration, test, method, options, references)
            rows.append(row)
            print_table([row], summary=False, header=not printed)
            printed = True
            if args.out:
                with open(args.out + ".tmp", "w") as handle:
                    json.dump(rows, handle)
                os.replace(args.out + ".tmp", args.out)
    print()
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
