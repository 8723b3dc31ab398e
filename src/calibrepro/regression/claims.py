"""The seed's qualitative findings (seed 002, regression half), checked on our numbers.

Each finding becomes a :class:`Claim`: the data set, what the seed says, our numbers, and a verdict,
"holds" or "does not hold" with by how much, or "not checked" with why (a model or data set not
configured).  The numbers are means over the splits of ``metrics.csv`` (``read_metrics``) and of the
evaluation's curves files (one per data set, model and split: the reliability curves, the per-hour
RMSE and std, the recalibrators' fitted maps).  The thresholds that turn "well below", "tracks" and
"good" into verdicts are module constants, printed beside the verdicts.

UCI wine and crime (the seed's MC-Dropout ``mc_dropout``, no noise term, and ``aleatoric``):

1. MC-Dropout is overconfident before recalibration: the central 90 % interval holds well below 90 %
   of the test targets (below ``0.9 - WELL_BELOW``).
2. Isotonic recalibration lowers the one-sided MSCE; 3. the two-sided isotonic map lowers the
   two-sided MSCE; 4. the two-sided MSCE is larger than the one-sided, before and after.
5. The aleatoric output lowers the uncalibrated MSCE.
6. Recalibration repairs an overconfident model only up to the confidence its calibration PIT values
   reach (the seed: about 0.35 on crime): with ``r`` the two-sided map's value at its last inner knot
   (the share of calibration targets inside the central interval of any level below 1), after
   two-sided recalibration the test curve is near the diagonal below r and stays near r above it: the
   mean gap |accuracy(p) - p| above r is more than ``REPAIR_RATIO`` times the gap below, and
   accuracy(0.99) < r + ``REPAIR_SLACK``.

Energy series (``mc_dropout``, ``ensemble``, ``evidential``):

7. The ensemble is the best calibrated before recalibration (lowest one-sided MSCE).
8. The evidential network is underconfident: its two-sided curve lies above the diagonal on average.
9. After isotonic recalibration all three are well calibrated: one-sided MSCE below ``GOOD_MSCE``.
10. RMSE and the predicted std grow with the forecast hour: the last hour's at least ``GROWS`` times the
    first hour's (a ratio, not a rank correlation: the seed's curves rise over the first hours and
    level off, and the per-hour values of one chronological split wobble; Spearman's rho is printed).
11. The std tracks the RMSE over the hours for MC-Dropout and the ensemble, not for the evidential
    network: Pearson's correlation of the per-hour std and RMSE at least ``TRACKS`` (a strong
    correlation by the usual convention) for the first two, below it for the third.  Other models of
    the data set (e.g. ``mc_dropout_fitted``) are shown beside them.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
from scipy import stats

from calibrepro.io import read_json

#: "well below 0.9": the coverage of the central 90 % interval at least this far below it
WELL_BELOW = 0.1
#: "repaired only up to r": the gap above r more than this many times the gap below it ...
REPAIR_RATIO = 2.0
#: ... and the 99 % central interval holding less than r + this share of the test targets
REPAIR_SLACK = 0.1
#: "well calibrated": one-sided MSCE below this (an RMS gap of 0.1 between accuracy and confidence)
GOOD_MSCE = 0.01
#: "grows with the horizon": the last forecast hour's value at least this times the first hour's
GROWS = 1.1
#: "the std tracks the RMSE": Pearson correlation over the forecast hours at least this
TRACKS = 0.7


class Claim(NamedTuple):
    dataset: str
    finding: str
    ours: str
    verdict: str


def _mean(metrics, dataset, model, method, metric) -> float | None:
    values = _splits(metrics, dataset, model, method, metric)
    return _mean_of(values) if values else None


def _mean_of(splits: dict[int, float]) -> float:
    """The mean over the splits, as the report's ``mean_sd`` takes it (``math.fsum``: order-stable)."""
    return math.fsum(splits.values()) / len(splits)


def _splits(metrics, dataset, model, method, metric) -> dict[int, float]:
    return metrics.get((dataset, model, method, metric)) or {}


def _fmt(value: float) -> str:
    return format(value, ".3g") if abs(value) < 1000 else format(value, ".0f")


def _holds(ok: bool, short: str) -> str:
    return "holds" if ok else f"does not hold ({short})"


def _lower(metrics, dataset, model, before, after, metric, what) -> Claim:
    """``after`` gives a lower mean ``metric`` than ``before`` (and in how many splits)."""
    b, a = (_splits(metrics, dataset, model, m, metric) for m in (before, after))
    if not b or not a:
        return Claim(dataset, what, "—", f"not checked: no {metric} of {model} ({before}, {after})")
    mb, ma = _mean_of(b), _mean_of(a)
    fewer = sum(a[s] < b[s] for s in a if s in b)
    change = f" ({100 * (ma - mb) / mb:+.0f} %)" if mb > 0 else ""
    ours = f"{_fmt(mb)} → {_fmt(ma)}{change}, lower in {fewer} of {len(a)} splits"
    return Claim(dataset, what, ours, _holds(ma < mb, f"higher by {_fmt(ma - mb)}"))


def mean_over_splits(curves: list[dict], method: str, key: str) -> np.ndarray:
    """The element-wise mean over the splits' curves files of one method's curve ``key`` (e.g. "two_sided")."""
    return np.mean([np.asarray(c["methods"][method][key], dtype=np.float64) for c in curves], axis=0)


def _curves(curves: Sequence[dict], dataset, model) -> list[dict]:
    return [c for c in curves if c.get("dataset") == dataset and c.get("model") == model]


def uci_claims(metrics, curves, dataset: str) -> list[Claim]:
    """Claims 1-6 on one UCI data set (wine or crime)."""
    claims = []
    coverage = _mean(metrics, dataset, "mc_dropout", "uncalibrated", "coverage_90")
    finding = "MC-Dropout is overconfident before recalibration: its central 90 % interval holds well below 90 %"
    if coverage is None:
        claims.append(Claim(dataset, finding, "—", "not checked: no mc_dropout model"))
    else:
        ours = f"coverage of the 90 % interval {_fmt(coverage)}"
        claims.append(Claim(dataset, finding, ours, _holds(coverage < 0.9 - WELL_BELOW,
                                                           f"{_fmt(0.9 - coverage)} below 0.9")))
    claims.append(_lower(metrics, dataset, "mc_dropout", "uncalibrated", "isotonic", "msce",
                         "isotonic recalibration lowers MC-Dropout's one-sided MSCE"))
    claims.append(_lower(metrics, dataset, "mc_dropout", "uncalibrated", "isotonic_two_sided", "msce_two_sided",
                         "two-sided isotonic recalibration lowers its two-sided MSCE"))
    pairs = [(_mean(metrics, dataset, "mc_dropout", before, "msce"),
              _mean(metrics, dataset, "mc_dropout", after, "msce_two_sided"))
             for before, after in (("uncalibrated", "uncalibrated"), ("isotonic", "isotonic_two_sided"))]
    finding = "the two-sided MSCE is larger than the one-sided (before and after recalibration)"
    if any(value is None for pair in pairs for value in pair):
        claims.append(Claim(dataset, finding, "—", "not checked: no mc_dropout MSCE"))
    else:
        ours = "; ".join(f"{when}: {_fmt(one)} one-sided, {_fmt(two)} two-sided"
                         for when, (one, two) in zip(("before", "after"), pairs))
        worst = min(two - one for one, two in pairs)
        claims.append(Claim(dataset, finding, ours, _holds(worst > 0, f"smaller by {_fmt(-worst)}")))
    without = _mean(metrics, dataset, "mc_dropout", "uncalibrated", "msce")
    with_ = _mean(metrics, dataset, "aleatoric", "uncalibrated", "msce")
    finding = "the aleatoric output lowers the uncalibrated MSCE"
    if without is None or with_ is None:
        claims.append(Claim(dataset, finding, "—", "not checked: needs mc_dropout and aleatoric"))
    else:
        claims.append(Claim(dataset, finding, f"{_fmt(without)} without, {_fmt(with_)} with",
                            _holds(with_ < without, f"higher by {_fmt(with_ - without)}")))
    claims.append(_repair_claim(_curves(curves, dataset, "mc_dropout"), dataset))
    return claims


def _repair_claim(curves: list[dict], dataset: str) -> Claim:
    """Claim 6 from the two-sided map's knots and the test curve after two-sided recalibration."""
    finding = ("recalibration repairs the overconfident MC-Dropout only up to the confidence r its calibration "
               "PIT values reach (two-sided; the seed: r ≈ 0.35 on crime)")
    if not curves or "isotonic_two_sided" not in curves[0]["methods"]:
        return Claim(dataset, finding, "—", "not checked: no two-sided recalibration of mc_dropout")
    reach = float(np.mean([2 * c["methods"]["isotonic_two_sided"]["recalibrator"]["params"]["knots_y"][-2] - 1
                           for c in curves]))
    levels = np.asarray(curves[0]["levels"])
    after = mean_over_splits(curves, "isotonic_two_sided", "two_sided")
    gap = np.abs(after - levels)
    below, above = levels <= reach, (levels > reach) & (levels < 1)
    at_99 = float(np.interp(0.99, levels, after))
    ours = f"r = {_fmt(reach)}; after: accuracy(0.99) = {_fmt(at_99)}"
    if not above.any() or not below.any():
        return Claim(dataset, finding, ours, "not checked: r is 0 or 1")
    gap_below, gap_above = float(gap[below].mean()), float(gap[above].mean())
    ours += f", mean gap {_fmt(gap_below)} below r, {_fmt(gap_above)} above"
    ok = gap_above > REPAIR_RATIO * gap_below and at_99 < reach + REPAIR_SLACK
    return Claim(dataset, finding, ours, _holds(ok, f"accuracy(0.99) - r = {_fmt(at_99 - reach)}"))


def energy_claims(metrics, curves, dataset: str) -> list[Claim]:
    """Claims 7-11 on the energy series."""
    models = ("mc_dropout", "ensemble", "evidential")
    before = {m: _mean(metrics, dataset, m, "uncalibrated", "msce") for m in models}
    missing = [m for m in models if before[m] is None or not _curves(curves, dataset, m)]
    if missing:
        return [Claim(dataset, "the seed's energy findings", "—", f"not checked: no {', '.join(missing)}")]
    claims = []
    best = min(before, key=before.get)
    others = min(v for m, v in before.items() if m != "ensemble")
    ours = ", ".join(f"{m} {_fmt(v)}" for m, v in before.items())
    claims.append(Claim(dataset, "before recalibration the ensemble is the best calibrated (one-sided MSCE)", ours,
                        _holds(best == "ensemble", f"{best} is, the ensemble's is {_fmt(before['ensemble'] / others)}"
                                                   " times the best other")))
    evidential = _curves(curves, dataset, "evidential")
    levels = np.asarray(evidential[0]["levels"])
    excess = float(np.mean(mean_over_splits(evidential, "uncalibrated", "two_sided") - levels))
    coverage = _mean(metrics, dataset, "evidential", "uncalibrated", "coverage_90")
    claims.append(Claim(dataset, "the evidential network is underconfident (two-sided accuracy above confidence)",
                        f"mean accuracy - confidence {excess:+.3f}; coverage of the 90 % interval {_fmt(coverage)}",
                        _holds(excess > 0, f"overconfident by {_fmt(-excess)} on average")))
    after = {m: _mean(metrics, dataset, m, "isotonic", "msce") for m in models}
    worst = max(after, key=lambda m: after[m] if after[m] is not None else math.inf)
    ours = ", ".join(f"{m} {_fmt(v)}" if v is not None else f"{m} —" for m, v in after.items())
    short = f"{worst} at {_fmt(after[worst])}" if after[worst] is not None else f"no isotonic MSCE of {worst}"
    claims.append(Claim(dataset, f"after isotonic recalibration all three are well calibrated (MSCE < {GOOD_MSCE})",
                        ours, _holds(all(v is not None and v < GOOD_MSCE for v in after.values()), short)))
    shown = [*models, *sorted({c["model"] for c in curves if c.get("dataset") == dataset} - set(models))]
    per_hour = {}
    for m in shown:
        mine = _curves(curves, dataset, m)
        per_hour[m] = mean_over_splits(mine, "uncalibrated", "rmse"), mean_over_splits(mine, "uncalibrated", "std")
    hours = np.arange(1, len(per_hour["ensemble"][0]) + 1)
    ours = "; ".join(
        f"{m}: RMSE {_fmt(r[0])} → {_fmt(r[-1])} (ρ {stats.spearmanr(hours, r).statistic:.2f}), "
        f"std {_fmt(s[0])} → {_fmt(s[-1])} (ρ {stats.spearmanr(hours, s).statistic:.2f})"
        for m, (r, s) in per_hour.items() if m in models)
    growth = sorted((series[-1] / series[0], f"{m} {what}") for m in models
                    for series, what in zip(per_hour[m], ("RMSE", "std")))
    claims.append(Claim(dataset, f"RMSE and std grow with the forecast hour (hour 10 ≥ {GROWS} × hour 1)", ours,
                        _holds(growth[0][0] >= GROWS, f"{growth[0][1]}: hour 10 = {growth[0][0]:.2f} × hour 1")))
    r = {m: float(np.corrcoef(rmse, std)[0, 1]) for m, (rmse, std) in per_hour.items()}
    expected = {"mc_dropout": True, "ensemble": True, "evidential": False}
    wrong = [m for m in models if (r[m] >= TRACKS) != expected[m]]
    claims.append(Claim(dataset, f"the std tracks the RMSE over the hours (Pearson r ≥ {TRACKS}) for MC-Dropout and "
                                 "the ensemble, not for the evidential network",
                        ", ".join(f"{m} r = {r[m]:.2f}" for m in shown),
                        _holds(not wrong, "; ".join(f"{m} r = {r[m]:.2f}" for m in wrong))))
    return claims


def check_claims(metrics, curves_files: Sequence, sources: dict[str, str]) -> list[Claim]:
    """Every claim for the configured data sets of sources ``uci_wine``, ``uci_crime`` and ``energy``."""
    curves = [read_json(path) for path in curves_files]
    claims = []
    for dataset, source in sources.items():
        if source in ("uci_wine", "uci_crime"):
            claims += uci_claims(metrics, curves, dataset)
        elif source == "energy":
            claims += energy_claims(metrics, curves, dataset)
    return claims


def claims_lines(claims: list[Claim], figure: str | None) -> list[str]:
    """The report's section: a table of the claims, and the seed's reliability figure on crime."""
    if not claims:
        return []
    lines = ["## The seed's findings, checked", "",
             "What the seed concludes from its figures and tables, checked on our numbers (means over the splits; "
             "thresholds in `calibrepro.regression.claims`).", "",
             "| data set | finding (seed 002) | ours | verdict |", "|---|---|---|---|"]
    lines += [f"| {c.dataset} | {c.finding} | {c.ours} | {c.verdict} |" for c in claims]
    held = sum(c.verdict == "holds" for c in claims)
    checked = sum(not c.verdict.startswith("not checked") for c in claims)
    lines += ["", f"{held} of {checked} checked findings hold.", ""]
    if figure:
        lines += ["One-sided and two-sided reliability curves of MC-Dropout on crime, before and after recalibration "
                  "(the seed's figures):", "", f"![reliability curves]({figure})", ""]
    return lines
