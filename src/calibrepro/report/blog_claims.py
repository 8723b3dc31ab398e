"""The blog's (seed 002) classification findings, checked on our numbers, for the reproduction report.

Each finding becomes a :class:`Claim`: the data set, what the blog says, our numbers with their
bootstrap intervals (test half, split seed 0; ``intervals.csv``) or, for the size study, the mean and
range over its subset seeds, and a verdict: "holds", "does not hold" with by how much, or "not
checked" with why (a model not in the run, no size study). The models are ``config/blog.yaml``'s:
``cifar10`` ``lenet5``, ``bayes_lenet5``, ``ensemble_lenet5``, ``mc_dropout_lenet5`` and ``mnist``
``lenet5``. ECE: Guo et al. 2017, eq. (3) (:func:`calibrepro.metrics.binned.ece`); over- and
underconfidence: the sign of mean confidence minus accuracy (:func:`calibrepro.metrics.scores.overconfidence`).
A verdict compares point estimates; where the two compared values' intervals overlap it says so.

1. The uncalibrated LeNet-5 is overconfident, and isotonic regression and temperature scaling both
   lower its ECE (the blog's CIFAR-10 table and reliability diagrams).
2. Temperature scaling beats isotonic regression (lower ECE; summary 2), on LeNet-5.
3. With small calibration sets isotonic regression can be worse than no calibration while temperature
   scaling still helps (summary 3): at some size up to ``SMALL_SET`` the mean isotonic ECE is above
   the uncalibrated ECE, and at every such size the mean temperature-scaling ECE is below it.
4. The Bayesian LeNet-5 and the ensemble are more accurate than LeNet-5 but not better calibrated
   before calibration (summaries 4 and 5).
5. The Bayesian LeNet-5 stays overconfident, the ensemble is underconfident, and after calibration
   (both methods) the ensemble has the lower ECE.
6. The MC-Dropout LeNet-5 is not better calibrated than LeNet-5 before calibration (summary 4 names
   MC-Dropout with the BNN; the blog prints no number for it).
7. On MNIST LeNet-5 is at least ``MNIST_ACCURACY`` accurate and already well calibrated (uncalibrated
   ECE below ``WELL_CALIBRATED``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

#: "small calibration sets": the study's sizes up to this many samples (the blog's 100, 200, 500)
SMALL_SET = 500
#: "at least 99 % accurate" on MNIST (the blog: 99.01 %)
MNIST_ACCURACY = 0.99
#: "already well calibrated": an uncalibrated ECE below 1 %
WELL_CALIBRATED = 0.01
#: the blog's model names (config/blog.yaml)
LENET, BAYES, ENSEMBLE, MC_DROPOUT = "lenet5", "bayes_lenet5", "ensemble_lenet5", "mc_dropout_lenet5"
NAMES = {LENET: "LeNet-5", BAYES: "Bayesian LeNet-5", ENSEMBLE: "ensemble", MC_DROPOUT: "MC-Dropout LeNet-5"}
CIFAR, MNIST = "cifar10", "mnist"
UNCAL, ISO, TS = "uncalibrated", "isotonic", "temperature_scaling"


class Claim(NamedTuple):
    dataset: str
    finding: str
    ours: str
    verdict: str


class Value(NamedTuple):
    """A number of ours (a fraction) and its interval (None when the run has none)."""

    value: float
    low: float | None = None
    high: float | None = None

    def text(self, signed: bool = False) -> str:
        """In percent, with the interval in brackets."""
        number = f"{100 * self.value:+.2f}" if signed else f"{100 * self.value:.2f}"
        if self.low is None or self.high is None:
            return number
        return f"{number} [{100 * self.low:.2f}, {100 * self.high:.2f}]"

    def overlaps(self, other: "Value") -> bool:
        """Whether the two intervals overlap (False when either has none)."""
        if None in (self.low, self.high, other.low, other.high):
            return False
        return self.low <= other.high and other.low <= self.high


class Numbers:
    """Our values at one split seed: ``metrics`` ((dataset, model, method, metric) -> {seed: value}), ``intervals``
    (the same key -> {seed: (estimate, low, high, centre)}, or None) and the size study's ECE
    ({(dataset, model): {method: {size: {seed: value}}}}, or None)."""

    def __init__(self, metrics: dict, intervals: dict | None = None, sizes: dict | None = None, seed: int = 0):
        self.metrics, self.intervals, self.sizes, self.seed = metrics, intervals or {}, sizes, seed

    def get(self, dataset: str, model: str, method: str, metric: str) -> Value | None:
        value = self.metrics.get((dataset, model, method, metric), {}).get(self.seed)
        if value is None or math.isnan(value):
            return None
        cell = self.intervals.get((dataset, model, method, metric), {}).get(self.seed)
        return Value(value, cell[1], cell[2]) if cell else Value(value)

    def has(self, dataset: str, model: str) -> bool:
        return self.get(dataset, model, UNCAL, "ece") is not None


def _points(difference: float) -> str:
    return f"{100 * abs(difference):.2f} points"


def _verdict(failures: list[str], overlaps: list[str]) -> str:
    """"holds" (with the comparisons whose intervals overlap) or "does not hold (what failed, by how much)"."""
    if failures:
        return f"does not hold ({'; '.join(failures)})"
    return "holds" + (f" (intervals overlap: {', '.join(overlaps)})" if overlaps else "")


def _missing(numbers: Numbers, models: tuple[str, ...], dataset: str = CIFAR) -> str | None:
    absent = [NAMES.get(m, m) for m in models if not numbers.has(dataset, m)]
    return f"not checked: no {', '.join(absent)} in this run" if absent else None


def _lower(before: Value, after: Value, what: str, failures: list, overlaps: list) -> None:
    """Record that ``after`` is not below ``before`` (a failure) or that their intervals overlap."""
    if after.value >= before.value:
        failures.append(f"{what} higher by {_points(after.value - before.value)}")
    elif after.overlaps(before):
        overlaps.append(what)


def overconfident_and_both_help(numbers: Numbers) -> Claim:
    finding = "the uncalibrated LeNet-5 is overconfident; isotonic regression and temperature scaling both lower its ECE"
    why = _missing(numbers, (LENET,))
    gap = numbers.get(CIFAR, LENET, UNCAL, "overconfidence")
    if why or gap is None:
        return Claim(CIFAR, finding, "—", why or "not checked: no overconfidence metric in this run")
    ece = {m: numbers.get(CIFAR, LENET, m, "ece") for m in (UNCAL, ISO, TS)}
    if None in ece.values():
        return Claim(CIFAR, finding, "—", "not checked: LeNet-5 lacks isotonic or temperature scaling")
    ours = (f"confidence − accuracy {gap.text(signed=True)}; ECE {ece[UNCAL].text()} → isotonic {ece[ISO].text()}, "
            f"TS {ece[TS].text()}")
    failures, overlaps = [], []
    if gap.value <= 0:
        failures.append(f"underconfident by {_points(gap.value)}")
    _lower(ece[UNCAL], ece[ISO], "isotonic", failures, overlaps)
    _lower(ece[UNCAL], ece[TS], "TS", failures, overlaps)
    return Claim(CIFAR, finding, ours, _verdict(failures, overlaps))


def ts_beats_isotonic(numbers: Numbers) -> Claim:
    finding = "temperature scaling calibrates LeNet-5 better than isotonic regression (lower ECE)"
    why = _missing(numbers, (LENET,))
    if why:
        return Claim(CIFAR, finding, "—", why)
    rows = []
    for model in (LENET, BAYES, ENSEMBLE, MC_DROPOUT):
        iso, ts = numbers.get(CIFAR, model, ISO, "ece"), numbers.get(CIFAR, model, TS, "ece")
        if iso is not None and ts is not None:
            rows.append((model, iso, ts))
    if not rows or rows[0][0] != LENET:
        return Claim(CIFAR, finding, "—", "not checked: LeNet-5 lacks isotonic or temperature scaling")
    ours = "; ".join(f"{NAMES[m]}: TS {ts.text()}, isotonic {iso.text()}" for m, iso, ts in rows)
    others = sum(ts.value < iso.value for _, iso, ts in rows[1:])
    if rows[1:]:
        ours += f" (TS lower for {others} of the {len(rows) - 1} other networks)"
    failures, overlaps = [], []
    _lower(rows[0][1], rows[0][2], "TS than isotonic", failures, overlaps)
    return Claim(CIFAR, finding, ours, _verdict(failures, overlaps))


def _spread(by_seed: dict[int, float]) -> tuple[float, str]:
    values = list(by_seed.values())
    mean = math.fsum(values) / len(values)
    text = f"{100 * mean:.2f}" + (f" ({100 * min(values):.2f}–{100 * max(values):.2f})" if len(values) > 1 else "")
    return mean, text


def small_sets(numbers: Numbers) -> Claim:
    finding = (f"with small calibration sets (≤ {SMALL_SET}) isotonic regression can be worse than no calibration "
               "while temperature scaling still helps (LeNet-5, ECE, mean (range) over the subset seeds)")
    study = (numbers.sizes or {}).get((CIFAR, LENET))
    if not study or not all(m in study for m in (UNCAL, ISO, TS)):
        return Claim(CIFAR, finding, "—", "not checked: no size study of LeNet-5 with isotonic and TS")
    small = sorted(size for size in study[ISO] if size <= SMALL_SET and size in study[TS] and size in study[UNCAL])
    if not small:
        return Claim(CIFAR, finding, "—", f"not checked: the size study has no size up to {SMALL_SET}")
    parts, worse, failures = [], [], []
    for size in small:
        (base, _), (iso, iso_text), (ts, ts_text) = (_spread(study[m][size]) for m in (UNCAL, ISO, TS))
        parts.append(f"n = {size}: uncalibrated {100 * base:.2f}, isotonic {iso_text}, TS {ts_text}")
        if iso > base:
            worse.append(size)
        if ts >= base:
            failures.append(f"TS not below uncalibrated at n = {size} (by {_points(ts - base)})")
    if not worse:
        (base, _), (iso, _) = (_spread(study[m][small[0]]) for m in (UNCAL, ISO))
        failures.append(f"isotonic is below uncalibrated at every small size (at n = {small[0]} by {_points(base - iso)})")
    return Claim(CIFAR, finding, "; ".join(parts), _verdict(failures, []))


def more_accurate_not_better_calibrated(numbers: Numbers) -> Claim:
    finding = "the Bayesian LeNet-5 and the ensemble are more accurate than LeNet-5 but not better calibrated before calibration"
    why = _missing(numbers, (LENET, BAYES, ENSEMBLE))
    if why:
        return Claim(CIFAR, finding, "—", why)
    accuracy = {m: numbers.get(CIFAR, m, UNCAL, "accuracy") for m in (LENET, BAYES, ENSEMBLE)}
    ece = {m: numbers.get(CIFAR, m, UNCAL, "ece") for m in (LENET, BAYES, ENSEMBLE)}
    ours = "; ".join(f"{NAMES[m]}: accuracy {accuracy[m].text()}, ECE {ece[m].text()}" for m in accuracy)
    failures, overlaps = [], []
    for model in (BAYES, ENSEMBLE):
        if accuracy[model].value <= accuracy[LENET].value:
            failures.append(f"{NAMES[model]} less accurate by {_points(accuracy[LENET].value - accuracy[model].value)}")
        elif accuracy[model].overlaps(accuracy[LENET]):
            overlaps.append(f"{NAMES[model]}'s accuracy")
        if ece[model].value < ece[LENET].value:
            failures.append(f"{NAMES[model]} better calibrated by {_points(ece[LENET].value - ece[model].value)}")
    return Claim(CIFAR, finding, ours, _verdict(failures, overlaps))


def bayes_over_ensemble_under(numbers: Numbers) -> Claim:
    finding = ("the Bayesian LeNet-5 stays overconfident, the ensemble is underconfident, and after calibration the "
               "ensemble has the lower ECE (isotonic and TS)")
    why = _missing(numbers, (BAYES, ENSEMBLE))
    gaps = {m: numbers.get(CIFAR, m, UNCAL, "overconfidence") for m in (BAYES, ENSEMBLE)}
    if why or None in gaps.values():
        return Claim(CIFAR, finding, "—", why or "not checked: no overconfidence metric in this run")
    after = {(m, c): numbers.get(CIFAR, m, c, "ece") for m in (BAYES, ENSEMBLE) for c in (ISO, TS)}
    if None in after.values():
        return Claim(CIFAR, finding, "—", "not checked: a network lacks isotonic or temperature scaling")
    ours = "; ".join(f"{NAMES[m]}: confidence − accuracy {gaps[m].text(signed=True)}, ECE isotonic "
                     f"{after[m, ISO].text()}, TS {after[m, TS].text()}" for m in (BAYES, ENSEMBLE))
    failures, overlaps = [], []
    if gaps[BAYES].value <= 0:
        failures.append(f"the Bayesian LeNet-5 is underconfident by {_points(gaps[BAYES].value)}")
    if gaps[ENSEMBLE].value >= 0:
        failures.append(f"the ensemble is overconfident by {_points(gaps[ENSEMBLE].value)}")
    for method, name in ((ISO, "isotonic"), (TS, "TS")):
        _lower(after[BAYES, method], after[ENSEMBLE, method], f"the ensemble's {name} ECE", failures, overlaps)
    return Claim(CIFAR, finding, ours, _verdict(failures, overlaps))


def mc_dropout_not_better(numbers: Numbers) -> Claim:
    finding = "the MC-Dropout LeNet-5 is not better calibrated than LeNet-5 before calibration"
    why = _missing(numbers, (LENET, MC_DROPOUT))
    if why:
        return Claim(CIFAR, finding, "—", why)
    ece = {m: numbers.get(CIFAR, m, UNCAL, "ece") for m in (LENET, MC_DROPOUT)}
    accuracy = numbers.get(CIFAR, MC_DROPOUT, UNCAL, "accuracy")
    ours = f"ECE LeNet-5 {ece[LENET].text()}, MC-Dropout {ece[MC_DROPOUT].text()} (accuracy {accuracy.text()})"
    lower = ece[LENET].value - ece[MC_DROPOUT].value
    return Claim(CIFAR, finding, ours, _verdict([f"better by {_points(lower)}"] if lower > 0 else [], []))


def mnist_well_calibrated(numbers: Numbers) -> Claim:
    finding = (f"on MNIST LeNet-5 is at least {100 * MNIST_ACCURACY:.0f} % accurate and already well calibrated "
               f"(uncalibrated ECE < {100 * WELL_CALIBRATED:.0f} %)")
    if not numbers.has(MNIST, LENET):
        return Claim(MNIST, finding, "—", "not checked: no MNIST LeNet-5 in this run (MNIST's training files come "
                                          "by download only)")
    accuracy, ece = numbers.get(MNIST, LENET, UNCAL, "accuracy"), numbers.get(MNIST, LENET, UNCAL, "ece")
    failures = []
    if accuracy.value < MNIST_ACCURACY:
        failures.append(f"accuracy below {100 * MNIST_ACCURACY:.0f} % by {_points(MNIST_ACCURACY - accuracy.value)}")
    if ece.value >= WELL_CALIBRATED:
        failures.append(f"ECE above {100 * WELL_CALIBRATED:.0f} % by {_points(ece.value - WELL_CALIBRATED)}")
    return Claim(MNIST, finding, f"accuracy {accuracy.text()}, ECE {ece.text()}", _verdict(failures, []))


def check_claims(numbers: Numbers) -> list[Claim]:
    """Every finding, in the blog's order; none when the run has none of the blog's networks."""
    if not (numbers.has(CIFAR, LENET) or numbers.has(MNIST, LENET)):
        return []
    return [overconfident_and_both_help(numbers), ts_beats_isotonic(numbers), small_sets(numbers),
            more_accurate_not_better_calibrated(numbers), bayes_over_ensemble_under(numbers),
            mc_dropout_not_better(numbers), mnist_well_calibrated(numbers)]


def claims_lines(claims: list[Claim], level: float | None) -> list[str]:
    """The report's section: one row per finding."""
    if not claims:
        return []
    interval = f"{100 * level:.0f} % bootstrap intervals" if level and not math.isnan(level) else "no intervals (bootstrap off)"
    lines = ["## The blog's classification findings, checked", "",
             f"Seed 002's findings, checked on our numbers (in %, test half of split seed 0, {interval}; thresholds "
             "and rules in `calibrepro.report.blog_claims`).", "",
             "| data set | finding (seed 002) | ours | verdict |", "|---|---|---|---|"]
    lines += [f"| {c.dataset} | {c.finding} | {c.ours} | {c.verdict} |" for c in claims]
    held = sum(c.verdict.startswith("holds") for c in claims)
    checked = sum(not c.verdict.startswith("not checked") for c in claims)
    return lines + ["", f"{held} of {checked} checked findings hold.", ""]
