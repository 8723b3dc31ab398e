"""The findings of calibration over training (seed 004; Guo et al. 2017; Mukhoti et al. 2020; Müller et al. 2019).

Each finding is checked on the training curves of ``training_curves.csv`` (:mod:`calibrepro.report.curves_file`:
test half of the first split seed; ECE and MCE: Guo et al. 2017, eqs. 3 and 4; NLL: thesis eq. 10) and says
"holds", "does not hold" or "not checked", with the numbers, in percent (the temperature as is).
Where a number is an estimate on the test half and the last epoch's network is the tables' network, its
bootstrap interval is printed (:class:`LastEpoch`: the paired bootstrap of :mod:`calibrepro.bootstrap` on
the last epoch's logits); the curves' other epochs have point estimates only.

(a) While the training loss falls, the test ECE and MCE rise: at the last epoch the training loss is
    below, and the ECE and MCE above, their values at the epoch of lowest ECE (seed 004's figure).
(b) NLL overfitting (Guo et al. 2017, fig. 3): the test NLL has its minimum before the last epoch and is
    higher at the last, while the test error is not higher there than at the NLL minimum.
(c) Label smoothing ends with a lower uncalibrated ECE than the same recipe without (Müller et al. 2019).
(d) Temperature scaling lowers the ECE at every evaluated epoch past the NLL minimum.
(e) The fitted temperature rises across the epochs (Guo et al. 2017, fig. S1): T at the last epoch above T
    at the first, and Spearman's rank correlation of T with the epoch at least :data:`RISING`.
(f) After temperature scaling, label smoothing is no better than plain cross-entropy (Mukhoti et al. 2020,
    table of ECE after TS): the paired difference of the TS ECEs (smoothed minus plain) is not below 0
    with its interval, i.e. its upper bound is at least 0.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

from calibrepro.report.curves_file import TRAINING

UNCAL, TS = "uncalibrated", "temperature_scaling"
#: Spearman's rho of the temperature with the epoch from which "rises across the epochs" holds
RISING = 0.8

#: the published anchors printed beside each finding (issue 45)
ANCHORS = {
    "a": "seed 004: on CIFAR-100 the ECE and MCE rise while the loss falls (figure, no numbers)",
    "b": "Guo et al. 2017 fig. 3 (ResNet-110 SD, CIFAR-100): after epoch 250 test NLL rises while test error "
         "falls from 29 % to 27 %; Mukhoti et al. 2020 (ResNet-50, CIFAR-10): NLL overfitting after epoch 150",
    "c": "Mukhoti et al. 2020, CIFAR-10 ECE: ResNet-50 4.35 (CE) vs 2.96 (LS 0.05), ResNet-110 4.41 vs 2.09; "
         "Müller et al. 2019, ResNet-56 CIFAR-100: 0.150 vs 0.024 with LS",
    "d": "Guo et al. 2017 (15 bins): LeNet-5 CIFAR-10 3.02 -> 0.93 %, CIFAR-100 4.85 -> 2.02 %; "
         "ResNet-110 CIFAR-100 16.53 -> 1.26 %",
    "e": "Guo et al. 2017 fig. S1: the optimal temperature \"rises throughout optimization\"",
    "f": "Mukhoti et al. 2020, CIFAR-10 ECE after TS: ResNet-50 1.35 (CE) vs 1.67 (LS), ResNet-110 1.09 vs 2.09; "
         "Müller et al. 2019: TS 0.021 vs LS 0.024",
}
FINDINGS = {
    "a": "while the training loss falls, test ECE and MCE rise (last epoch against the epoch of lowest ECE)",
    "b": "test NLL passes a minimum and rises while test error does not",
    "c": "label smoothing ends with a lower ECE than the same recipe without",
    "d": "temperature scaling lowers the ECE at every epoch past the NLL minimum",
    "e": "the fitted temperature rises across the epochs",
    "f": "after temperature scaling, label smoothing is no better than plain cross-entropy",
}


class Claim(NamedTuple):
    letter: str
    dataset: str
    models: str
    ours: str
    verdict: str


class LastEpoch(NamedTuple):
    """Bootstrap intervals at the last epoch: ``(model, method, metric) -> (low, high)`` of one model's metric,
    ``(smoothed, plain, method) -> (difference, low, high)`` of the paired ECE differences; ``level``."""

    intervals: Mapping
    differences: Mapping
    level: float


def _pct(value: float) -> str:
    return f"{100 * value:.2f}"


def _series(curve: Mapping, method: str, metric: str) -> dict[int, float]:
    return curve.get((method, metric), {})


def _argmin(series: Mapping[int, float]) -> int:
    """The first epoch of the smallest value."""
    return min(series, key=lambda epoch: (series[epoch], epoch))


def _interval(last: LastEpoch | None, model: str, method: str, metric: str) -> str:
    bounds = None if last is None else last.intervals.get((model, method, metric))
    return "" if bounds is None else f" [{_pct(bounds[0])}, {_pct(bounds[1])}]"


def rise_while_loss_falls(dataset: str, model: str, curve: Mapping, last: LastEpoch | None) -> Claim:
    """(a): at the last epoch against the epoch of lowest ECE."""
    ece, mce, loss = _series(curve, UNCAL, "ece"), _series(curve, UNCAL, "mce"), _series(curve, TRAINING, "loss")
    best, end = _argmin(ece), max(ece)
    ours = (f"epoch {best} (lowest ECE) -> {end}: training loss {loss[best]:.4f} -> {loss[end]:.4f}, ECE "
            f"{_pct(ece[best])} -> {_pct(ece[end])}{_interval(last, model, UNCAL, 'ece')}, MCE {_pct(mce[best])} -> "
            f"{_pct(mce[end])}{_interval(last, model, UNCAL, 'mce')}")
    failures = [what for what, ok in (("the lowest ECE is at the last epoch", best < end),
                                      ("the training loss did not fall", loss[end] < loss[best]),
                                      ("the ECE did not rise", ece[end] > ece[best]),
                                      ("the MCE did not rise", mce[end] > mce[best])) if not ok]
    bounds = None if last is None else last.intervals.get((model, UNCAL, "ece"))
    note = "" if failures or bounds is None else (
        "; the lowest ECE lies below the last epoch's interval" if ece[best] < bounds[0]
        else "; the lowest ECE lies inside the last epoch's interval")
    verdict = f"does not hold ({'; '.join(failures[:2])})" if failures else f"holds{note}"
    return Claim("a", dataset, model, ours, verdict)


def nll_overfitting(dataset: str, model: str, curve: Mapping, last: LastEpoch | None) -> Claim:
    """(b): the NLL minimum before the last epoch, a higher NLL at the last, the error not higher there."""
    nll, error = _series(curve, UNCAL, "nll"), _series(curve, UNCAL, "error")
    best, end = _argmin(nll), max(nll)
    ours = (f"NLL minimum at epoch {best}: NLL {nll[best]:.4f} -> {nll[end]:.4f} at epoch {end}, error "
            f"{_pct(error[best])} -> {_pct(error[end])}{_interval(last, model, UNCAL, 'error')}")
    if best == end:
        return Claim("b", dataset, model, ours, "does not hold (the NLL is lowest at the last epoch)")
    if error[end] > error[best]:
        return Claim("b", dataset, model, ours, f"does not hold (the error rose by {_pct(error[end] - error[best])} points)")
    return Claim("b", dataset, model, ours, "holds")


def scaling_helps_past_minimum(dataset: str, model: str, curve: Mapping, last: LastEpoch | None) -> Claim:
    """(d): TS's ECE below the uncalibrated ECE at every evaluated epoch after the NLL minimum."""
    nll, ece, scaled = _series(curve, UNCAL, "nll"), _series(curve, UNCAL, "ece"), _series(curve, TS, "ece")
    best = _argmin(nll)
    epochs = [epoch for epoch in sorted(ece) if epoch > best]
    if not epochs:
        return Claim("d", dataset, model, f"NLL minimum at the last epoch ({best})",
                     "not checked: no epoch past the NLL minimum")
    worse = [epoch for epoch in epochs if scaled[epoch] >= ece[epoch]]
    end = epochs[-1]
    ours = (f"{len(epochs)} epochs after the NLL minimum (epoch {best}); at epoch {end}: {_pct(ece[end])}"
            f"{_interval(last, model, UNCAL, 'ece')} -> {_pct(scaled[end])}{_interval(last, model, TS, 'ece')}")
    if worse:
        return Claim("d", dataset, model, ours, f"does not hold (not lower at epochs {', '.join(map(str, worse[:5]))})")
    return Claim("d", dataset, model, ours, "holds")


def temperature_rises(dataset: str, model: str, curve: Mapping, last: LastEpoch | None) -> Claim:
    """(e): T at the last epoch above the first, Spearman's rho of T with the epoch >= :data:`RISING`."""
    from scipy.stats import spearmanr

    temperature = _series(curve, TS, "temperature")
    epochs = sorted(temperature)
    first, end = epochs[0], epochs[-1]
    rho = float(spearmanr(epochs, [temperature[e] for e in epochs]).statistic) if len(epochs) > 2 else float("nan")
    ours = f"T {temperature[first]:.3f} (epoch {first}) -> {temperature[end]:.3f} (epoch {end}), Spearman rho {rho:.2f}"
    if len(epochs) < 3:
        return Claim("e", dataset, model, ours, "not checked: fewer than 3 evaluated epochs")
    ok = temperature[end] > temperature[first] and rho >= RISING
    return Claim("e", dataset, model, ours, "holds" if ok else f"does not hold (needs T to rise and rho >= {RISING})")


def _difference(last: LastEpoch | None, smoothed: str, plain: str, method: str) -> tuple | None:
    return None if last is None else last.differences.get((smoothed, plain, method))


def smoothing_lowers_ece(dataset: str, smoothed: str, plain: str, curves: Mapping, last: LastEpoch | None) -> Claim:
    """(c): the last epoch's uncalibrated ECE of the smoothed network below the plain one's."""
    ls, ce = (_series(curves[m], UNCAL, "ece") for m in (smoothed, plain))
    diff = _difference(last, smoothed, plain, UNCAL)
    shown = "" if diff is None else f"; difference {100 * diff[0]:+.2f} [{100 * diff[1]:+.2f}, {100 * diff[2]:+.2f}]"
    ours = f"ECE {_pct(ls[max(ls)])} (smoothed) vs {_pct(ce[max(ce)])} (plain){shown}"
    if ls[max(ls)] >= ce[max(ce)]:
        return Claim("c", dataset, f"{smoothed} vs {plain}", ours, "does not hold")
    overlap = diff is not None and diff[2] >= 0
    return Claim("c", dataset, f"{smoothed} vs {plain}", ours,
                 "holds" + (" (the interval of the difference reaches 0)" if overlap else ""))


def smoothing_no_better_after_scaling(dataset: str, smoothed: str, plain: str, curves: Mapping,
                                      last: LastEpoch | None) -> Claim:
    """(f): the smoothed network's TS ECE not below the plain one's (the upper bound of the difference >= 0)."""
    ls, ce = (_series(curves[m], TS, "ece") for m in (smoothed, plain))
    diff = _difference(last, smoothed, plain, TS)
    shown = "" if diff is None else f"; difference {100 * diff[0]:+.2f} [{100 * diff[1]:+.2f}, {100 * diff[2]:+.2f}]"
    ours = f"ECE after TS {_pct(ls[max(ls)])} (smoothed) vs {_pct(ce[max(ce)])} (plain){shown}"
    upper = diff[2] if diff is not None else ls[max(ls)] - ce[max(ce)]
    return Claim("f", dataset, f"{smoothed} vs {plain}", ours,
                 "holds" if upper >= 0 else "does not hold (smoothing is lower after TS, beyond the interval)")


def check_findings(dataset: str, curves: Mapping[str, Mapping], pairs: list[tuple[str, str]],
                 last: LastEpoch | None) -> list[Claim]:
    """Every finding on one data set: (a), (b), (d), (e) per network, (c), (f) per ``(smoothed, plain)`` pair."""
    claims = []
    for check in (rise_while_loss_falls, nll_overfitting):
        claims += [check(dataset, model, curve, last) for model, curve in curves.items()]
    for smoothed, plain in pairs:
        claims.append(smoothing_lowers_ece(dataset, smoothed, plain, curves, last))
    for check in (scaling_helps_past_minimum, temperature_rises):
        claims += [check(dataset, model, curve, last) for model, curve in curves.items()]
    for smoothed, plain in pairs:
        claims.append(smoothing_no_better_after_scaling(dataset, smoothed, plain, curves, last))
    if not pairs:
        claims += [Claim(letter, dataset, "—", "—", "not checked: no network with label smoothing beside the same "
                                                   "recipe without") for letter in ("c", "f")]
    return sorted(claims, key=lambda claim: claim.letter)


def smoothing_pairs(entries: Mapping[str, Mapping]) -> list[tuple[str, str]]:
    """``(smoothed, plain)``: each entry with ``label_smoothing`` > 0 and the first entry with the same options
    but none."""
    def recipe(spec):
        return {key: value for key, value in spec.items() if key != "label_smoothing"}

    pairs = []
    for name, spec in entries.items():
        if spec.get("label_smoothing", 0) > 0:
            plain = next((other for other, o in entries.items()
                          if o.get("label_smoothing", 0) == 0 and recipe(o) == recipe(spec)), None)
            if plain is not None:
                pairs.append((name, plain))
    return pairs


def claims_section(claims: list[Claim], level: float | None) -> str:
    """The reproduction report's section: one row per finding, the anchor beside it."""
    interval = f"{100 * level:.0f} % bootstrap intervals at the last epoch" if level else "no intervals"
    lines = ["## Calibration over training, checked", "",
             f"The findings of seed 004 and of the papers it rests on, checked on our training curves (in %, "
             f"test half of the first split seed, {interval}; rules in `calibrepro.report.curve_claims`).", "",
             "| | data set | network | finding | ours | verdict | published |", "|---|---|---|---|---|---|---|"]
    lines += [f"| ({c.letter}) | {c.dataset} | {c.models} | {FINDINGS[c.letter]} | {c.ours} | {c.verdict} | "
              f"{ANCHORS[c.letter]} |" for c in claims]
    held = sum(c.verdict.startswith("holds") for c in claims)
    checked = sum(not c.verdict.startswith("not checked") for c in claims)
    return "\n".join(lines + ["", f"{held} of {checked} checked findings hold.", ""])
