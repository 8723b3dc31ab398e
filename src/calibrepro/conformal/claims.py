"""The papers' findings on calibration and conformal sets, checked on ``conformal.csv``, for every calibrator.

Dabah & Tirer (ICML 2025, arXiv 2402.05806, sec. 4 and Fig. 1) and Xi et al. (TMLR 2025, arXiv
2402.04344, sec. 3 and Table 1) found, for temperature scaling against the uncalibrated model:

1. TS **enlarges** the sets of the adaptive scores (APS, RAPS): a larger mean set size;
2. TS **lowers** their class-conditional coverage gap (CovGap);
3. LAC's mean set size **changes little** under TS: within :data:`LITTLE` (relative) of the uncalibrated.

Each question is asked for every configured calibrator (temperature scaling is the papers'; the others
are not published) on each data set over its models: "before" is the mean over the data set's models of
the uncalibrated row's value (``size`` or ``covgap``, each the mean over the repeats), "after" the same
for the calibrator. The finding **holds** when it holds for every configured score (of the question)
and alpha; otherwise it **does not hold**, with the combination that fails and by how much (the
relative change), or it is **not checked**, with why (no uncalibrated rows, a score not configured).
"Ours" lists each combination: before -> after (relative change), and in how many models the change has
the finding's direction.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple

#: "changes little": the calibrator's mean LAC set size within this fraction of the uncalibrated one
LITTLE = 0.10
#: the reference calibrator of the comparisons
REFERENCE = "uncalibrated"
#: the calibrator the papers studied
PUBLISHED = "temperature_scaling"
#: the findings: key -> (metric, scores, direction: +1 larger, -1 smaller, 0 within LITTLE)
FINDINGS = {
    "enlarges": ("size", ("aps", "raps"), +1),
    "covgap": ("covgap", ("aps", "raps"), -1),
    "lac_size": ("size", ("lac",), 0),
}
SCORE_NAMES = {"lac": "LAC", "aps": "APS", "raps": "RAPS"}


class ConformalClaim(NamedTuple):
    dataset: str
    method: str
    finding: str
    ours: str
    verdict: str


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _change(before: float, after: float) -> str:
    return f"{100 * (after - before) / before:+.1f} %" if before > 0 else f"{after - before:+.3g}"


def _fmt(value: float) -> str:
    return format(value, ".3g")


def check_finding(cells: Mapping, dataset: str, models: list[str], method: str, finding: str,
                  alphas: list[float]) -> tuple[str, str]:
    """``(ours, verdict)`` of one finding for ``method`` on ``dataset`` (module docstring)."""
    metric, scores, direction = FINDINGS[finding]
    parts, failures, checked = [], [], 0
    for score in scores:
        for alpha in alphas:
            pairs = [(cells[(dataset, m, REFERENCE, score, alpha)][metric], cells[(dataset, m, method, score, alpha)][metric])
                     for m in models if (dataset, m, REFERENCE, score, alpha) in cells
                     and (dataset, m, method, score, alpha) in cells]
            if not pairs:
                continue
            checked += 1
            before, after = _mean([b for b, _ in pairs]), _mean([a for _, a in pairs])
            if direction > 0:
                agree, ok = sum(a > b for b, a in pairs), after > before
            elif direction < 0:
                agree, ok = sum(a < b for b, a in pairs), after < before
            else:
                agree = sum(abs(a - b) <= LITTLE * b for b, a in pairs)
                ok = abs(after - before) <= LITTLE * before
            label = f"{SCORE_NAMES[score]} α={alpha:g}"
            parts.append(f"{label}: {_fmt(before)} → {_fmt(after)} ({_change(before, after)}), {agree}/{len(pairs)} models")
            if not ok:
                failures.append(f"{label}: {_change(before, after)}")
    if not checked:
        return "—", f"not checked: no {'/'.join(SCORE_NAMES[s] for s in scores)} rows of {REFERENCE} and {method}"
    verdict = "holds" if not failures else f"does not hold ({'; '.join(failures)})"
    return "; ".join(parts), verdict


def coverage_check(cells: Mapping) -> tuple[int, list[tuple]]:
    """The guarantee checked on every cell: the mean coverage's 95 % interval over the repeats (``coverage_low``,
    ``coverage_high``) overlaps the finite-sample range ``[bound_low, bound_high]`` (Vovk et al. 2005; for scores
    without ties). Returns the number of cells and the keys of those that miss it (ties and the deterministic
    scores over-cover: histogram binning's steps, saturated probabilities)."""
    misses = [key for key, values in cells.items()
              if values["coverage_high"] < values["bound_low"] or values["coverage_low"] > values["bound_high"]]
    return len(cells), misses


def conformal_claims(cells: Mapping) -> list[ConformalClaim]:
    """Every finding for every calibrator on every data set of ``cells`` (:func:`calibrepro.conformal.results.
    read_conformal`), the papers' calibrator first."""
    claims = []
    datasets = list(dict.fromkeys(key[0] for key in cells))
    for dataset in datasets:
        keys = [key for key in cells if key[0] == dataset]
        models = list(dict.fromkeys(key[1] for key in keys))
        methods = [m for m in dict.fromkeys(key[2] for key in keys) if m != REFERENCE]
        methods.sort(key=lambda m: m != PUBLISHED)  # stable: the papers' first, then the configuration's order
        alphas = sorted({key[4] for key in keys}, reverse=True)
        for method in methods:
            for finding in FINDINGS:
                ours, verdict = check_finding(cells, dataset, models, method, finding, alphas)
                claims.append(ConformalClaim(dataset, method, finding, ours, verdict))
    return claims
