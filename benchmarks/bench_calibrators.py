"""Time fit + predict + all metrics of every calibrator on synthetic logits of the thesis's shapes.

Run from the repository root::

    .venv/bin/python benchmarks/bench_calibrators.py           # K = 10, 100, 1000
    .venv/bin/python benchmarks/bench_calibrators.py --quick   # K = 10, 100 only (smoke run)

Shapes (calibration + test samples): K=10 and K=100 with 5,000 + 5,000 (CIFAR), K=1000 with
25,000 + 25,000 (ImageNet).  Logits are synthetic, from a fixed seed: Gaussian noise plus a
boost of the true class, so the "network" is accurate and overconfident like the real ones.

Where installed, netcal and torch-uncertainty run side by side on the same data (other_libraries.py): for every
method both are timed (fit + predict), their result is compared with ours (a tolerance stated
per method) and the ratio ours / theirs is printed (< 1 means ours is faster).  netcal's vector
scaling + bias estimates its gradient by finite differences (2K+1 losses per step): it runs in a
child process capped at ``--netcal-cap`` seconds (default 300) and is not run at K=1000, where
it needs hours.  Known pitfalls handled here: netcal's TemperatureScaling silently returns T=1
on float32 input (float64 is passed) and its ``.temperature`` is 1/T; its LogisticCalibration
scales *log-probabilities*, so it is given ``exp(z - C)`` with one global constant C, whose log
is the logits up to a constant -- which makes its model exactly vector scaling + bias of the
logits (the constant is absorbed by the bias).

Beyond the thesis (``--beyond``, or ``--beyond-only`` for just this part): per K, time (wall and
CPU seconds of the process), peak memory and work of Dir-L2, Dir-ODIR, MS-ODIR (default grids,
5-fold CV, folds in ``--threads`` threads) and ETS, on ``synthetic_logits.realistic``'s halves
(``--logits simple``: :func:`synthetic`'s, the logits of issue 18's measurements): fits made
(the search's extension beyond the grid included), Newton iterations, Hessian-vector
products, the refit's loss evaluations, whether every fit converged, the chosen (lambda, mu), the
NLL on the test half (held out) and on the calibration half.  Peak memory is Python's
``tracemalloc`` peak (numpy's arrays included) on the CPU and ``torch.cuda.max_memory_allocated``
on a GPU.  ``--device cpu|cuda|auto`` (default auto: a GPU when present) picks where the
full-matrix fits run, so the CPU path can be timed on a machine with a GPU (e.g. under
``taskset -c 0,1`` for two cores).  Where the CPU budget refuses the full grid the refusal is
printed and one fit at the grid point (0.01, 0.01) is timed instead; ``--cpu-flop-budget`` raises
the budget to time the full grid anyway.  ``--before REV`` runs the same measurements with
the library of git revision REV (its ``src/``, in a child process) and prints both and the ratios.

Cross-check with the ``dirichletcal`` package (Kull et al.'s code, ``--dirichletcal-python``, a
Python >= 3.12 that has it): at the chosen regularisation strengths its ``reg_norm=True,
ref_row=False`` objective is exactly ours; both solutions are scored with our penalised objective
on our features and ours must not be worse by more than 1e-4.  It runs in a child process
(``benchmarks/dirichletcal_fit.py``) with its L-BFGS-B path, at K <= 100 only (it materialises an
N x (K+1)^2 tensor).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
import warnings
from importlib import metadata

import numpy as np

try:  # run from a checkout without installing the package
    import calibrepro  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import torch

from calibrepro.calibrators import CALIBRATORS, make_calibrator
from calibrepro.metrics import METRICS, compute_metrics
from calibrepro.metrics.binned import ece, mce
from calibrepro.metrics.scores import accuracy, nll
from calibrepro.reliability import reliability_bins
from other_libraries import Capped, run_netcal, run_netcal_metrics, run_tu, run_tu_metrics, timed
from synthetic_logits import realistic

SHAPES = [(10, 5000), (100, 5000), (1000, 25000)]  # (classes, samples per half)
#: methods beyond the thesis: benchmarked in their own section (full-matrix fits with CV)
BEYOND = ["dirichlet_l2", "dirichlet_odir", "matrix_scaling_odir", "ensemble_temperature_scaling"]
THESIS_METHODS = [m for m in CALIBRATORS if m not in BEYOND]
THESIS_MODELS = {10: 13, 100: 15, 1000: 4}  # appendix models per shape (CIFAR-10/100, ImageNet)
SEED = 0


def synthetic(k: int, n: int, seed: int = SEED):
    """Calibration and test halves of overconfident synthetic logits (float32) with labels.

    Gaussian noise (sd 1.5) plus a boost N(6 + 1.5 ln(K/10), 1.5) of one class, which is the
    true class for 80 % of the samples and a random one otherwise: ~79 % accuracy and
    overconfident (fitted temperatures 1.5-1.7) at every K, logits spanning < 36.
    """
    rng = np.random.default_rng([seed, k])

    def half():
        labels = rng.integers(0, k, n)
        boosted = np.where(rng.uniform(size=n) < 0.2, rng.integers(0, k, n), labels)
        logits = (rng.standard_normal((n, k)) * 1.5).astype(np.float32)
        logits[np.arange(n), boosted] += rng.normal(6.0 + 1.5 * np.log(k / 10), 1.5, n).astype(np.float32)
        return logits, labels

    return half(), half()


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# ours
# --------------------------------------------------------------------------------------------
def run_ours(method, calib, test, repeat):
    (zc, yc), (zt, yt) = calib, test
    cal, t_fit = timed(lambda: make_calibrator(method).fit(zc, yc), repeat)
    probs, t_pred = timed(lambda: cal.predict_proba(zt), repeat)

    def all_metrics():
        values = compute_metrics(probs, yt, list(METRICS))
        reliability_bins(probs, yt)  # the pipeline also writes the reliability diagram data
        return values

    values, t_met = timed(all_metrics, repeat)
    return {"cal": cal, "probs": probs, "metrics": values, "fit": t_fit, "predict": t_pred, "metric_time": t_met}


# --------------------------------------------------------------------------------------------
# beyond the thesis: Dir-L2, Dir-ODIR, MS-ODIR, ETS; dirichletcal
# --------------------------------------------------------------------------------------------
def measured(fn, memory: bool, cuda: bool):
    """(result, seconds, CPU seconds of this process, peak MB or None) of ``fn()``.

    Time from an untraced run.  Peak memory: on a GPU (``cuda``) ``torch.cuda.max_memory_allocated``
    of that run; on the CPU (``memory=True``) ``tracemalloc``'s peak (numpy's arrays included) of a
    second, traced run, as tracing slows the first down.
    """
    import tracemalloc

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if cuda:
        return result, seconds, cpu, torch.cuda.max_memory_allocated() / 2**20
    if not memory:
        return result, seconds, cpu, None
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, seconds, cpu, peak / 2**20


def penalised_objective(method, features, labels, w, b, lam, mu):
    """Our penalised objective (calibrepro.calibrators.dirichlet) at (W, b), and the plain mean NLL."""
    k = w.shape[0]
    s = features @ w.T + b
    m = s.max(axis=1, keepdims=True)
    nll = float(np.mean(m[:, 0] + np.log(np.exp(s - m).sum(axis=1)) - s[np.arange(len(labels)), labels]))
    if method == "dirichlet_l2":
        pen = lam * ((w**2).sum() + (b**2).sum()) / (k * (k + 1))
    else:
        pen = lam * ((w - np.diag(np.diag(w))) ** 2).sum() / (k * (k - 1)) + mu * (b**2).sum() / k
    return nll + pen, nll


def dirichletcal_fit(python, method, zc, yc, lam, mu):
    """dirichletcal's fit at (lam, mu) in a child process of ``python``: (W, b, seconds, version).

    Its own environment (dirichletcal needs Python >= 3.12; this project's is 3.11): the child runs
    ``benchmarks/dirichletcal_fit.py``, which imports only numpy and dirichletcal.
    """
    import subprocess
    import tempfile

    from calibrepro.calibrators.dirichlet import log_softmax64

    features = zc.astype(np.float64) if method == "matrix_scaling_odir" else np.exp(log_softmax64(zc))
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dirichletcal_fit.py")
    with tempfile.TemporaryDirectory() as folder:
        source, target = os.path.join(folder, "in.npz"), os.path.join(folder, "out.npz")
        np.savez(source, features=features, labels=yc, method=method, lam=lam, mu=mu)
        subprocess.run([python, child, source, target], check=True, env={**os.environ, "PYTHONPATH": ""})
        with np.load(target, allow_pickle=False) as out:
            return out["weights"], out["bias"], float(out["seconds"]), str(out["version"])


def beyond_halves(k: int, n: int, logits: str):
    """The halves the beyond section fits: ``synthetic_logits.realistic`` (``logits="realistic"``) or :func:`synthetic`."""
    if logits == "realistic":
        return realistic(k, n)
    return synthetic(k, n)


def beyond_rows(shapes, single: bool, threads: int, device: str = "auto", budget: float | None = None,
                logits: str = "realistic") -> list[dict]:
    """Fit Dir-L2, Dir-ODIR, MS-ODIR and ETS on the synthetic halves of each shape; one dict per fit.

    The full-matrix methods run on ``device`` (auto, cpu, cuda), with ``cpu_flop_budget`` ``budget``
    where given (else their default); ETS always on the CPU.  ``logits``: which synthetic halves
    (:func:`beyond_halves`).
    """
    from calibrepro.calibrators.dirichlet import CalibrationCostError
    from calibrepro.inference import select_device

    cuda = select_device(device).type == "cuda"
    rows = []
    for k, n in shapes:
        (zc, yc), (zt, yt) = beyond_halves(k, n, logits)
        for method in BEYOND:
            matrix = method != "ensemble_temperature_scaling"
            options, note = ({"threads": threads, "device": device} if matrix else {}), ""
            if matrix and budget is not None:
                options["cpu_flop_budget"] = budget
            try:
                if single and matrix:
                    raise CalibrationCostError("--single: one fit at (0.01, 0.01)")
                cal, secs, cpu, peak = measured(lambda: make_calibrator(method, **options).fit(zc, yc), k < 1000, cuda and matrix)
            except CalibrationCostError as exc:
                note = f"no CV grid: {str(exc).split('(')[0].strip()}"
                options.update(lambdas=[0.01], mus=[0.01])
                cal, secs, cpu, peak = measured(lambda: make_calibrator(method, **options).fit(zc, yc), k < 1000, cuda and matrix)
            d = getattr(cal, "diagnostics_", {})
            row = {"k": k, "n": n, "method": method, "device": "cuda" if cuda and matrix else "cpu", "seconds": secs, "cpu": cpu, "peak_mb": peak, "note": note,
                   "test_nll": nll(cal.predict_proba(zt), yt), "single": bool(note)}
            if not matrix:
                row["what"] = f"T={1 / cal.inverse_temperature_:.3f}, w={np.round(cal.weights_, 4).tolist()}"
            else:
                cv = d.get("cross_validation")
                fitted = [g for g in cv["grid"] + cv.get("extension", []) if g["cv_nll"] is not None] if cv else []
                row.update(
                    fits=1 + sum(len(g["newton_iterations"]) for g in fitted),
                    newton=d["n_iter"] + sum(sum(g["newton_iterations"]) for g in fitted),
                    products=d["n_hessp"] + sum(g["hessian_products"] for g in fitted),
                    refit_evaluations=d["n_eval"],
                    converged=bool(d["converged"]),
                    chosen=[cal.reg_lambda_, cal.reg_mu_],
                    calib_nll=d["final_nll"],
                )
            rows.append(row)
    return rows


def print_beyond(rows, label: str) -> None:
    where = "GPU allocator" if any(r.get("device") == "cuda" for r in rows) else "tracemalloc, K < 1000"
    print(f"\n--- {label} ---")
    print(
        f"{'K':>5s} {'method':30s} {'fit s':>8s} {'cpu s':>8s} {'peak MB':>9s} {'fits':>5s} {'Newton':>6s} {'H.v':>6s}"
        f" {'evals':>5s}  converged  chosen (lambda, mu)  test NLL  calib NLL  [{where}]"
    )
    for r in rows:
        head = f"{r['k']:5d} {r['method']:30s} {r['seconds']:8.2f} {r['cpu']:8.2f} {fmt(r['peak_mb'], 9)}"
        if "what" in r:
            print(f"{head} {1:5d}  {r['what']}; test NLL {r['test_nll']:.6f}")
            continue
        chosen = f"({r['chosen'][0]:g}, {r['chosen'][1]:g})"
        print(
            f"{head} {r['fits']:5d} {r['newton']:6d} {r['products']:6d} {r['refit_evaluations']:5d}"
            f"  {str(r['converged']):9s}  {chosen:18s}  {r['test_nll']:.6f}  {r['calib_nll']:.6f}"
            + (f"  [{r['note']}]" if r["note"] else "")
        )


def rows_before(revision: str, shapes, single: bool, threads: int, device: str, budget: float | None,
                logits: str = "realistic") -> list[dict]:
    """:func:`beyond_rows` of the library at git ``revision`` (its ``src/`` in a temporary folder), in a child."""
    import json
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", root, "archive", revision, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        out = os.path.join(folder, "rows.json")
        command = [sys.executable, os.path.abspath(__file__), "--beyond-only", "--threads", str(threads),
                   "--device", device, "--beyond-json", out, "--logits", logits, "--classes", *(str(k) for k, _ in shapes)]
        command += (["--single"] if single else []) + (["--cpu-flop-budget", repr(budget)] if budget is not None else [])
        subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": os.path.join(folder, "src")})
        with open(out) as handle:
            return json.load(handle)


def bench_beyond(shapes, single: bool = False, threads: int = 2, before: str | None = None,
                 dirichletcal_python: str | None = None, json_out: str | None = None, device: str = "auto",
                 budget: float | None = None, logits: str = "realistic") -> int:
    """Time, work and result of the methods beyond the thesis; optionally the same at git ``before``
    and the dirichletcal cross-check."""
    import json

    from calibrepro.calibrators.dirichlet import log_softmax64
    from calibrepro.inference import select_device

    rows = beyond_rows(shapes, single, threads, device, budget, logits)
    device = select_device(device).type
    if json_out:
        with open(json_out, "w") as handle:
            json.dump(rows, handle)
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"\n=== beyond the thesis (device: {device}, load {os.getloadavg()[0]:.2f}, threads {threads},"
        f" {cores} of {os.cpu_count()} cores usable, {logits} logits) ==="
    )
    old = rows_before(before, shapes, single, threads, device, budget, logits) if before else None
    print_beyond(rows, "this checkout" if not before else f"after (this checkout) vs before ({before})")
    if old:
        print_beyond(old, f"before: {before}")
        print(f"\n{'K':>5s} {'method':30s} {'cpu after/before':>16s} {'fit s after/before':>18s}  same choice")
        for new, was in zip(rows, old):
            same = new.get("chosen") == was.get("chosen")
            print(
                f"{new['k']:5d} {new['method']:30s} {new['cpu'] / was['cpu']:16.3f} {new['seconds'] / was['seconds']:18.3f}"
                f"  {same if 'chosen' in new else '-'}"
            )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\ncross-check with dirichletcal (same lambda, mu; reg_norm=True, ref_row=False; our objective):")
    if not dirichletcal_python:
        print("  skipped: give --dirichletcal-python (see benchmarks/MEASUREMENTS.md)")
        return 0
    for r in rows:
        if "chosen" not in r or r["k"] > 100:
            continue
        (zc, yc), _ = beyond_halves(r["k"], r["n"], logits)
        lam, mu = r["chosen"]
        method = r["method"]
        w, b, their_secs, version = dirichletcal_fit(dirichletcal_python, method, zc, yc, lam, mu)
        ours_one = make_calibrator(method, lambdas=[lam], mus=[mu], device=device).fit(zc, yc)
        feats = log_softmax64(zc) if method != "matrix_scaling_odir" else zc.astype(np.float64)
        oo, on = penalised_objective(method, feats, yc, ours_one.weights_, ours_one.bias_, lam, mu)
        to, tn = penalised_objective(method, feats, yc, w, b, lam, mu)
        verdict = "OK" if oo <= to + 1e-4 else "WORSE"
        print(
            f"  K={r['k']:4d} {method:20s} lambda={lam:g} mu={mu:g}: objective ours {oo:.8f} dirichletcal {version}"
            f" {to:.8f} (ours - theirs {oo - to:+.2e}) {verdict}; calib NLL ours {on:.8f} theirs {tn:.8f};"
            f" their fit {their_secs:.1f} s", flush=True
        )
    return 0


def fmt(x, width=8):
    if isinstance(x, Capped):
        return f"{'>' + format(float(x), '.1f'):>{width}}"
    return f"{x:{width}.3f}" if isinstance(x, float) else f"{'-':>{width}}"


def ratio(ours, theirs):
    if isinstance(theirs, Capped):
        return f"{'<' + format(ours / theirs, '.4f'):>7}"
    if not theirs:
        return f"{'-':>7}"
    r = ours / theirs
    return f"{r:7.3f}" if r >= 0.001 else f"{r:7.1e}"


# --------------------------------------------------------------------------------------------
# vector scaling: the plain (default, thesis) fit vs the rescaled option
# --------------------------------------------------------------------------------------------
def class_scaled(calib, test, seed: int = SEED):
    """The same halves with each class's logits multiplied by one factor, log-uniform in [1/3, 3].

    Real networks rank some classes high far more often than others; per-class scales make the
    vector-scaling optimum ill-conditioned like theirs (the plain synthetic one is symmetric).
    """
    k = calib[0].shape[1]
    scales = np.exp(np.random.default_rng([seed, k, 1]).uniform(-np.log(3), np.log(3), k)).astype(np.float32)
    return (calib[0] * scales, calib[1]), (test[0] * scales, test[1])


def run_vs_variants(repeat: int, k: int = 1000, n: int = 25000) -> None:
    """Time ``VectorScaling(optimizer="plain")`` against ``"rescaled"`` and compare their results."""
    print(f"=== vector scaling, plain vs rescaled: K={k}, {n:,} calibration + {n:,} test samples ===")
    print(f"fit times: best of {repeat} runs (other processes share the cores)")
    (wc, wy), _ = synthetic(4, 50, seed=1)  # one-time costs (torch._dynamo import) before timing
    for optimizer in ("plain", "rescaled"):
        make_calibrator("vector_scaling", optimizer=optimizer).fit(wc, wy)
    base = synthetic(k, n)
    for label, (calib, test) in (("synthetic", base), ("per-class scales", class_scaled(*base))):
        (zc, yc), (zt, yt) = calib, test
        fits = {}
        for optimizer in ("plain", "rescaled"):
            cal, secs = timed(lambda: make_calibrator("vector_scaling", optimizer=optimizer).fit(zc, yc), repeat)
            probs = cal.predict_proba(zt)
            fits[optimizer] = (cal, secs, probs)
            d = cal.diagnostics_
            printed = (
                f"acc {100 * accuracy(probs, yt):.3f} %, ECE {100 * ece(probs, yt):.2f} %,"
                f" MCE {100 * mce(probs, yt):.2f} %"
            )
            print(
                f"  {label:16s} {optimizer:8s} fit {secs:7.3f} s"
                f"  {d['n_iter']:4d} iterations {d['n_eval']:4d} evaluations"
                f" {'2 stages' if 'stages' in d else str(d['steps']) + ' calls':>9s}"
                f"  stop {d['stop_reason']:16s} calib NLL {d['final_loss']:.10f}  test {printed}"
            )
        (plain, t_plain, p_plain), (resc, t_resc, p_resc) = fits["plain"], fits["rescaled"]
        print(
            f"  {label:16s} plain / rescaled time {t_plain / t_resc:.2f};  max |w diff| "
            f"{np.abs(plain.weights_ - resc.weights_).max():.1e}, calib NLL diff "
            f"{plain.diagnostics_['final_loss'] - resc.diagnostics_['final_loss']:.1e}, max |p diff| (test) "
            f"{np.abs(p_plain - p_resc).max():.1e}"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only K=10 and K=100 (smoke run)")
    parser.add_argument("--no-compare", action="store_true", help="skip netcal / torch-uncertainty")
    parser.add_argument("--netcal-cap", type=float, default=300.0, help="seconds allowed to netcal's VS+bias")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs at K<=100 (K=1000: one run)")
    parser.add_argument(
        "--vs-variants", action="store_true", help="only: vector scaling plain vs rescaled at K=1000 (best of --repeat)"
    )
    parser.add_argument("--beyond", action="store_true", help="also Dir-L2, Dir-ODIR, MS-ODIR, ETS (+ dirichletcal)")
    parser.add_argument("--beyond-only", action="store_true", help="only the methods beyond the thesis")
    parser.add_argument("--classes", type=int, nargs="+", help="only these K (of 10, 100, 1000)")
    parser.add_argument(
        "--single", action="store_true", help="beyond: one fit at (0.01, 0.01) instead of the CV grid (time per fit)"
    )
    parser.add_argument("--threads", type=int, default=2, help="beyond: threads of the full-matrix fits' folds")
    parser.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto",
        help="beyond: where the full-matrix fits run (auto: a GPU when present; cpu: time the CPU path on any machine)",
    )
    parser.add_argument(
        "--cpu-flop-budget", type=float, metavar="FLOPS",
        help="beyond: the full-matrix methods' cpu_flop_budget (default: theirs); raise it to time a refused CV grid",
    )
    parser.add_argument(
        "--logits", choices=["realistic", "simple"], default="realistic",
        help="beyond: synthetic_logits.realistic (similar classes, real networks' miscalibration) or the simple synthetic()",
    )
    parser.add_argument("--before", metavar="REV", help="beyond: also run the library of git revision REV (e.g. a86c6a6)")
    parser.add_argument("--dirichletcal-python", metavar="PYTHON", help="beyond: a Python with dirichletcal (>= 3.12)")
    parser.add_argument("--beyond-json", metavar="PATH", help=argparse.SUPPRESS)  # --before's child: rows as JSON
    args = parser.parse_args(argv)
    if args.vs_variants:
        run_vs_variants(max(1, args.repeat))
        return 0
    chosen = [(k, n) for k, n in SHAPES if not args.classes or k in args.classes]
    if args.beyond_only:
        warnings.filterwarnings("ignore")
        return bench_beyond(chosen[:2] if args.quick else chosen, args.single, args.threads, args.before,
                            args.dirichletcal_python, args.beyond_json, args.device, args.cpu_flop_budget, args.logits)

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # torch-uncertainty logs "model is None" on every fit
    shapes = SHAPES[:2] if args.quick else SHAPES
    have = {
        "netcal": version("netcal") if not args.no_compare else None,
        "torch-uncertainty": version("torch-uncertainty") if not args.no_compare else None,
    }
    # one-time costs (first torch.optim.LBFGS imports torch._dynamo): not part of any method's time
    (wc, wy), _ = synthetic(4, 50, seed=1)
    _, warm = timed(lambda: [make_calibrator(m).fit(wc, wy).predict_proba(wc) for m in THESIS_METHODS])
    if have["torch-uncertainty"]:
        try:
            import torch_uncertainty.post_processing  # noqa: F401  (needs lightning[pytorch-extra])
        except Exception as exc:  # pragma: no cover - depends on the environment
            print(f"torch-uncertainty installed but not importable ({exc}); skipping it")
            have["torch-uncertainty"] = None
    print(
        f"calibrepro benchmark  python {platform.python_version()}  numpy {np.__version__}  torch {torch.__version__}"
        f"  threads {torch.get_num_threads()}  cpus {os.cpu_count()}"
    )
    for name, ver in have.items():
        print(f"  {name}: {ver or 'not installed/skipped (pip install netcal torch-uncertainty)'}")

    print(f"times in seconds: best of {args.repeat} runs at K<=100, one run at K=1000; ratio < 1: ours faster")
    print("load average at start (other processes slow every timing down): %.2f %.2f %.2f" % os.getloadavg())
    print(f"one-time warm-up (imports, first L-BFGS): {warm:.2f} s\n")

    grand = 0.0
    per_shape = {}
    for k, n in shapes:
        calib, test = synthetic(k, n)
        rep = max(1, args.repeat) if k < 1000 else 1
        print(f"=== K={k}: {n:,} calibration + {n:,} test samples ===")
        header = (
            f"{'method':22s} {'fit':>8s} {'predict':>8s} {'metrics':>8s} {'total':>8s}  {'netcal':>8s} {'ours/nc':>7s}"
            f"  {'t-unc':>8s} {'ours/tu':>7s}"
        )
        print(header)
        notes = []
        checks = []
        total = 0.0
        ours_all = {}
        for method in THESIS_METHODS:
            ours = run_ours(method, calib, test, rep)
            ours_all[method] = ours
            fp = ours["fit"] + ours["predict"]
            row_total = fp + ours["metric_time"]
            total += row_total
            nc = tu = None
            if have["netcal"]:
                nc = run_netcal(method, calib, test, ours, args.netcal_cap, rep)
            if have["torch-uncertainty"]:
                tu = run_tu(method, calib, test, ours, rep)
            print(
                f"{method:22s} {fmt(ours['fit'])} {fmt(ours['predict'])} {fmt(ours['metric_time'])} {fmt(row_total)}"
                f"  {fmt(nc[0] if nc else None)} {ratio(fp, nc[0] if nc else None)}"
                f"  {fmt(tu[0] if tu else None)} {ratio(fp, tu[0] if tu else None)}"
            )
            for lib, res in (("netcal", nc), ("torch-uncertainty", tu)):
                if res and res[2] and not res[2].startswith("n/a"):
                    same = {True: "same result", False: "DIFFERENT", None: ""}[res[1]]
                    notes.append(f"  {method} / {lib}: {res[2]}{'; ' + same if same else ''}")
            same_result = [(res[0], lib) for lib, res in (("netcal", nc), ("t-unc", tu)) if res and res[1]]
            if same_result:
                secs, lib = min(same_result)
                checks.append(f"{method} {fp / secs:.3f} ({lib})")
            diag = ours["cal"].diagnostics_
            if "n_eval" in diag:
                notes.append(
                    f"  {method} / ours: {diag['n_iter']} L-BFGS iterations, {diag['n_eval']} evaluations,"
                    f" stop: {diag['stop_reason']}, calib NLL {diag['final_loss']:.6f}"
                )
        # metrics alone, on the uncalibrated probabilities; like for like: ours computes the same subset
        probs = ours_all["uncalibrated"]["probs"]
        yt = test[1]
        _, ours_met = timed(lambda: (compute_metrics(probs, yt, list(METRICS)), reliability_bins(probs, yt)), rep)
        print(f"{'metrics: all 9 + bins':22s} {'':8s} {'':8s} {fmt(ours_met)}")
        if have["netcal"]:
            _, ours_sub = timed(lambda: compute_metrics(probs, yt, ["ece", "mce"]), rep)
            secs, same, what = run_netcal_metrics(probs, yt, rep)
            label = "metrics: ECE, MCE"
            print(f"{label:22s} {'':8s} {'':8s} {fmt(ours_sub)} {'':8s}  {fmt(secs)} {ratio(ours_sub, secs)}")
            notes.append(f"  metrics / netcal: {what}; {'same values' if same else 'DIFFERENT'}")
        if have["torch-uncertainty"]:
            subset = ["ece", "mce", "ece_equal_mass", "brier", "nll", "classwise_ece"]
            _, ours_sub = timed(lambda: compute_metrics(probs, yt, subset), rep)
            secs, same, what = run_tu_metrics(probs, yt, k, rep)
            print(
                f"{'metrics: 6 of t-unc':22s} {'':8s} {'':8s} {fmt(ours_sub)} {'':8s}  {fmt(None)} {ratio(0, None)}"
                f"  {fmt(secs)} {ratio(ours_sub, secs)}"
            )
            notes.append(f"  metrics / torch-uncertainty: {what}; {'same values' if same else 'DIFFERENT'}")
        print(f"{'TOTAL (ours, 6 methods)':22s} {'':8s} {'':8s} {'':8s} {fmt(total)}")
        if checks:
            print("ours / fastest competitor with the same result (fit + predict): " + ", ".join(checks))
        if notes:
            print("notes:")
            print("\n".join(notes))
        print()
        per_shape[k] = total
        grand += total

    print(f"grand total (ours, all shapes run): {grand:.2f} s")
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    if args.beyond:
        bench_beyond(shapes, threads=args.threads, before=args.before, dirichletcal_python=args.dirichletcal_python,
                     device=args.device, budget=args.cpu_flop_budget, logits=args.logits)
    if not args.quick:
        estimate = sum(THESIS_MODELS[k] * per_shape[k] for k in THESIS_MODELS)
        print(
            f"thesis appendix estimate (13 x K=10 + 15 x K=100 + 4 x K=1000, 6 columns, all metrics,"
            f" one process, serial): {estimate:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
