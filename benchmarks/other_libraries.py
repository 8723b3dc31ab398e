"""netcal and torch-uncertainty on the data bench_calibrators.py times ours on: their versions of each method
and metric, timed and compared with ours.

Each ``run_*`` returns ``(seconds or None, same result: bool or None, note)``; the tolerance of
"same" is stated per method. Known pitfalls handled here are listed in bench_calibrators.py's
docstring. :func:`timed` is the best-of-``repeat`` timer of every measurement of both files.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import warnings

import numpy as np
import torch

from calibrepro.calibrators import softmax
from calibrepro.metrics import compute_metrics
from calibrepro.metrics.binned import ece, mce
from calibrepro.metrics.scores import nll


def timed(fn, repeat: int = 1):
    """``(result, seconds)``: the best of ``repeat`` runs (the result of the last one)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


# --------------------------------------------------------------------------------------------
# netcal
# --------------------------------------------------------------------------------------------
def _netcal_vsb_child(xc, yc, xt, queue):
    """Child process: netcal LogisticCalibration (vector scaling + bias), timed."""
    warnings.filterwarnings("ignore")
    from netcal.scaling import LogisticCalibration

    start = time.perf_counter()
    model = LogisticCalibration(temperature_only=False, method="mle").fit(xc, yc)
    probs_c = model.transform(xc)
    probs_t = model.transform(xt)
    queue.put((time.perf_counter() - start, probs_c, probs_t))


def netcal_vsb(calib, test, cap: float):
    """netcal VS+bias on exp(z - C) in a child process; (seconds, probs_c, probs_t) or (None, ...)."""
    (zc, yc), (zt, _) = calib, test
    shift = float(max(zc.max(), zt.max())) + 1.0
    xc = np.exp(zc.astype(np.float64) - shift)
    xt = np.exp(zt.astype(np.float64) - shift)
    note = ""
    if min(xc.min(), xt.min()) <= np.finfo(np.float64).eps:
        note = " (logit range > 36: netcal clips, results inexact)"
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_netcal_vsb_child, args=(xc, yc, xt, queue))
    proc.start()
    try:
        out = queue.get(timeout=cap + 60)  # spawn + imports take a few seconds, not timed
    except Exception:
        out = None
    proc.join(5)
    if proc.is_alive():
        proc.terminate()
        proc.join()
    if out is None or out[0] > cap:
        return None, None, None, note
    return out[0], out[1], out[2], note


def run_netcal(method, calib, test, ours, cap, repeat):
    """(seconds or None, same_result: bool|None, note) for netcal's version of ``method``."""
    from netcal.binning import HistogramBinning, IsotonicRegression
    from netcal.scaling import TemperatureScaling

    (zc, yc), (zt, yt) = calib, test
    k = zc.shape[1]
    if method == "temperature_scaling":
        pc, pt = softmax(zc, "float64"), softmax(zt, "float64")  # float32 input -> T=1 silently

        def go():
            model = TemperatureScaling(method="mle").fit(pc, yc)
            return model, model.transform(pt)

        (model, probs), secs = timed(go, repeat)
        t_theirs = 1.0 / float(np.ravel(model.temperature)[0])  # netcal stores the weight 1/T
        t_ours = ours["cal"].temperature_
        d_nll = abs(nll(probs, yt) - ours["metrics"]["nll"])
        same = abs(t_theirs / t_ours - 1) < 1e-3 and d_nll < 1e-4
        return secs, same, f"T {t_theirs:.6f} vs {t_ours:.6f}, |dNLL| {d_nll:.1e}"
    if method == "vector_scaling_bias":
        if k >= 1000:
            return None, None, "not run: finite-difference gradient over 2K params needs hours"
        secs, probs_c, probs_t, note = netcal_vsb(calib, test, cap)
        if secs is None:
            return Capped(cap), None, f"stopped at the cap of {cap:.0f} s" + note
        cal_theirs = nll(probs_c, yc)
        cal_ours = ours["cal"].diagnostics_["final_loss"]
        same = cal_theirs - cal_ours < 1e-4
        return secs, same, f"calib NLL {cal_theirs:.6f} vs ours {cal_ours:.6f}" + note
    if method in ("histogram_binning", "isotonic"):
        pc, pt = softmax(zc), softmax(zt)
        model_cls = (lambda: HistogramBinning(bins=15)) if method == "histogram_binning" else IsotonicRegression

        def go():
            out = model_cls().fit(pc, yc).transform(pt)
            return out / out.sum(axis=1, keepdims=True)

        probs, secs = timed(go, repeat)
        diff = float(np.nanmax(np.abs(probs - ours["probs"])))
        why = (
            " (empty bins -> bin median)"
            if method == "histogram_binning"
            else " (netcal fits float64 inputs: other tie merging)"
        )
        return secs, diff < 1e-6, f"max|dp| {diff:.1e}" + ("" if diff < 1e-6 else why)
    return None, None, "n/a (no such method)"


def run_netcal_metrics(probs, labels, repeat):
    from netcal.metrics import ECE, MCE

    (values, secs) = timed(lambda: (ECE(bins=15).measure(probs, labels), MCE(bins=15).measure(probs, labels)), repeat)
    same = abs(values[0] - ece(probs, labels)) < 1e-12 and abs(values[1] - mce(probs, labels)) < 1e-12
    return secs, same, "ECE, MCE"


# --------------------------------------------------------------------------------------------
# torch-uncertainty
# --------------------------------------------------------------------------------------------
def run_tu(method, calib, test, ours, repeat):
    from torch.utils.data import DataLoader, TensorDataset
    from torch_uncertainty.post_processing import (
        HistogramBinningScaler,
        IsotonicRegressionScaler,
        TemperatureScaler,
        VectorScaler,
    )

    (zc, yc), (zt, _) = calib, test
    k = zc.shape[1]
    makers = {
        "temperature_scaling": TemperatureScaler,
        "vector_scaling": lambda: VectorScaler(num_classes=k),
        "histogram_binning": lambda: HistogramBinningScaler(num_bins=15),
        "isotonic": IsotonicRegressionScaler,
    }
    if method not in makers:
        return None, None, "n/a (no such method)"
    loader = DataLoader(TensorDataset(torch.from_numpy(zc), torch.from_numpy(yc)), batch_size=len(yc))

    def go():
        scaler = makers[method]()
        scaler.fit(loader, progress=False)
        with torch.no_grad():
            out = torch.softmax(scaler(torch.from_numpy(zt)).double(), dim=1).numpy()
        return scaler, out

    (scaler, probs), secs = timed(go, repeat)
    if method == "temperature_scaling":
        t_theirs, t_ours = float(scaler.temperature[0]), ours["cal"].temperature_
        same = abs(t_theirs / t_ours - 1) < 1e-3
        return secs, same, f"T {t_theirs:.6f} vs {t_ours:.6f} (float32)"
    if method == "vector_scaling":
        with torch.no_grad():
            pc = torch.softmax(scaler(torch.from_numpy(zc)).double(), dim=1).numpy()
        cal_theirs, cal_ours = nll(pc, yc), ours["cal"].diagnostics_["final_loss"]
        same = cal_theirs - cal_ours < 1e-4
        return secs, same, f"calib NLL {cal_theirs:.6f} vs ours {cal_ours:.6f}"
    # torch-uncertainty returns log(clamp(p, 1e-6, 1 - 1e-6)) as "logits": compare with ours seen the same way
    ours_seen = softmax(np.log(np.clip(ours["probs"], 1e-6, 1 - 1e-6)), "float64")
    diff = float(np.abs(probs - ours_seen).max())
    why = " (empty bins -> bin centre)" if method == "histogram_binning" else ""
    return secs, diff < 1e-6, f"max|dp| {diff:.1e} after their 1e-6 output clamp" + ("" if diff < 1e-6 else why)


def run_tu_metrics(probs, labels, k, repeat):
    from torch_uncertainty.metrics import AdaptiveCalibrationError, BrierScore, CalibrationError, CategoricalNLL
    from torch_uncertainty.metrics.classification.calibration import ClasswiseCalibrationError

    p, y = torch.from_numpy(probs), torch.from_numpy(labels)
    makers = {
        "ece": lambda: CalibrationError(task="multiclass", num_classes=k, num_bins=15),
        "mce": lambda: CalibrationError(task="multiclass", num_classes=k, num_bins=15, norm="max"),
        "ece_equal_mass": lambda: AdaptiveCalibrationError(task="multiclass", num_classes=k, num_bins=15),
        "brier": lambda: BrierScore(num_classes=k),
        "nll": CategoricalNLL,
        "classwise_ece": lambda: ClasswiseCalibrationError(num_classes=k, num_bins=15),
    }

    def go():
        out = {}
        for name, make in makers.items():
            metric = make()
            metric.update(p, y)
            out[name] = float(metric.compute())
        return out

    values, secs = timed(go, repeat)
    ours = compute_metrics(probs, labels, list(values))
    worst = max(abs(values[n] - ours[n]) / max(1.0, abs(ours[n])) for n in values)
    return secs, worst < 1e-4, f"{len(values)} metrics, max rel. diff {worst:.1e} (float32)"


class Capped(float):
    """A competitor's time that is only a lower bound: its run was stopped at this many seconds."""
