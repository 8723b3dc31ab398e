"""The blog's classification findings as verdicts (calibrepro.report.blog_claims), on made-up numbers."""

from __future__ import annotations

import pytest

from calibrepro.report.blog_claims import (
    BAYES, ENSEMBLE, LENET, MC_DROPOUT, Numbers, check_claims, claims_lines, small_sets,
)

# the blog's own numbers (ECE, accuracy in fractions), with the signs of over/underconfidence it describes
BLOG = {
    LENET: {"accuracy": 0.77, "overconfidence": 0.03, "ece": {"uncalibrated": 0.0347, "isotonic": 0.0159,
                                                              "temperature_scaling": 0.0081}},
    BAYES: {"accuracy": 0.7887, "overconfidence": 0.04, "ece": {"uncalibrated": 0.0491, "isotonic": 0.0179,
                                                                "temperature_scaling": 0.0133}},
    ENSEMBLE: {"accuracy": 0.8177, "overconfidence": -0.09, "ece": {"uncalibrated": 0.0955, "isotonic": 0.0109,
                                                                    "temperature_scaling": 0.0101}},
    MC_DROPOUT: {"accuracy": 0.78, "overconfidence": 0.01, "ece": {"uncalibrated": 0.04, "isotonic": 0.02,
                                                                   "temperature_scaling": 0.01}},
}
# the blog's size table (ECE) at 100, 200, 500, 1000: isotonic above uncalibrated at 100 only
SIZES = {"uncalibrated": {n: 0.0347 for n in (100, 200, 500, 1000)},
         "isotonic": {100: 0.0586, 200: 0.0351, 500: 0.0319, 1000: 0.0200},
         "temperature_scaling": {100: 0.0291, 200: 0.0197, 500: 0.0087, 1000: 0.0086}}


def metrics(blog=BLOG, mnist=None) -> dict:
    values = {}
    for model, numbers in blog.items():
        for method, ece in numbers["ece"].items():
            values[("cifar10", model, method, "ece")] = {0: ece}
        values[("cifar10", model, "uncalibrated", "accuracy")] = {0: numbers["accuracy"]}
        values[("cifar10", model, "uncalibrated", "overconfidence")] = {0: numbers["overconfidence"]}
    if mnist:
        values[("mnist", "lenet5", "uncalibrated", "accuracy")] = {0: mnist[0]}
        values[("mnist", "lenet5", "uncalibrated", "ece")] = {0: mnist[1]}
    return values


def sizes(table=SIZES, seeds=(0, 1)) -> dict:
    # two subset seeds, 0.001 apart around each value
    return {("cifar10", "lenet5"): {m: {n: {s: v + 0.001 * (s - 0.5) for s in seeds} for n, v in by.items()}
                                    for m, by in table.items()}}


def verdicts(numbers: Numbers) -> list[str]:
    return [claim.verdict for claim in check_claims(numbers)]


def test_the_blog_s_own_numbers_make_every_finding_hold():
    got = verdicts(Numbers(metrics(mnist=(0.9901, 0.004)), None, sizes()))
    assert got == ["holds"] * 7
    assert len(check_claims(Numbers(metrics()))) >= 5


def test_each_finding_fails_naming_by_how_much():
    flipped = {model: {**numbers, "ece": dict(numbers["ece"])} for model, numbers in BLOG.items()}
    flipped[LENET]["overconfidence"] = -0.012                 # 1: underconfident
    flipped[LENET]["ece"]["temperature_scaling"] = 0.0200     # 2: TS worse than isotonic by 0.41
    flipped[BAYES]["accuracy"] = 0.7600                       # 4: less accurate than LeNet-5 by 1
    flipped[ENSEMBLE]["overconfidence"] = 0.02                # 5: the ensemble overconfident
    flipped[MC_DROPOUT]["ece"]["uncalibrated"] = 0.0300       # 6: better calibrated by 0.47
    claims = check_claims(Numbers(metrics(flipped, mnist=(0.985, 0.02)), None, sizes()))
    got = {i: c.verdict for i, c in enumerate(claims, start=1)}
    assert got[1] == "does not hold (underconfident by 1.20 points)"
    assert got[2] == "does not hold (TS than isotonic higher by 0.41 points)"
    assert got[3] == "holds"  # the size study is its own
    assert got[4] == "does not hold (Bayesian LeNet-5 less accurate by 1.00 points)"
    assert got[5] == "does not hold (the ensemble is overconfident by 2.00 points)"
    assert got[6] == "does not hold (better by 0.47 points)"
    assert got[7] == "does not hold (accuracy below 99 % by 0.50 points; ECE above 1 % by 1.00 points)"


def test_small_sets_needs_isotonic_worse_somewhere_and_ts_better_everywhere():
    never_worse = {**SIZES, "isotonic": {n: 0.03 for n in (100, 200, 500, 1000)}}
    claim = small_sets(Numbers(metrics(), None, sizes(never_worse)))
    assert claim.verdict == "does not hold (isotonic is below uncalibrated at every small size (at n = 100 by 0.47 points))"
    ts_worse = {**SIZES, "temperature_scaling": {**SIZES["temperature_scaling"], 200: 0.04}}
    claim = small_sets(Numbers(metrics(), None, sizes(ts_worse)))
    assert claim.verdict == "does not hold (TS not below uncalibrated at n = 200 (by 0.53 points))"
    assert "n = 1000" not in claim.ours  # only sizes up to 500 are "small"
    assert "isotonic 5.86 (5.81–5.91)" in claim.ours  # mean and range over the subset seeds


def test_missing_networks_and_studies_are_not_checked_with_why():
    only_lenet = {LENET: BLOG[LENET]}
    got = verdicts(Numbers(metrics(only_lenet)))
    assert got[0] == "holds"
    assert got[2] == "not checked: no size study of LeNet-5 with isotonic and TS"
    assert got[3] == "not checked: no Bayesian LeNet-5, ensemble in this run"
    assert got[6] == "not checked: no MNIST LeNet-5 in this run (MNIST's training files come by download only)"
    assert check_claims(Numbers({("digits", "mlp", "uncalibrated", "ece"): {0: 0.1}})) == []


def test_intervals_are_printed_and_overlaps_named():
    values = metrics()
    intervals = {key: {0: (v[0], v[0] - 0.01, v[0] + 0.01, v[0])} for key, v in values.items()}
    claims = check_claims(Numbers(values, intervals, sizes()))
    assert "ECE 3.47 [2.47, 4.47] → isotonic 1.59 [0.59, 2.59]" in claims[0].ours
    assert claims[0].verdict == "holds (intervals overlap: isotonic)"  # 3.47 - 1.59 < 2 x 1.00
    lines = claims_lines(claims, 0.95)
    assert "95 % bootstrap intervals" in lines[2] and lines[-2] == "6 of 6 checked findings hold."


@pytest.mark.parametrize("level, text", [(None, "no intervals (bootstrap off)"), (float("nan"), "no intervals")])
def test_the_section_says_when_there_are_no_intervals(level, text):
    assert text in claims_lines(check_claims(Numbers(metrics())), level)[2]


def test_the_reproduction_report_of_a_blog_run_ends_with_the_verdicts(tmp_path):
    from calibrepro.report.metrics_file import format_metrics
    from calibrepro.report.reproduction import write_reproduction_report
    from calibrepro.size_study import write_size_study
    from servers import REPO_ROOT

    rows = [(d, m, method, seed, metric, v) for (d, m, method, metric), by in metrics().items() for seed, v in by.items()]
    (tmp_path / "metrics.csv").write_text(format_metrics(rows))
    study = [("cifar10", "lenet5", method, n, seed, "ece", v)
             for (_, _), by_method in sizes().items() for method, by_n in by_method.items()
             for n, by_seed in by_n.items() for seed, v in by_seed.items()]
    write_size_study(tmp_path / "size_study.csv", study)
    write_reproduction_report(tmp_path / "metrics.csv", tmp_path / "reproduction.md",
                              published_csv=REPO_ROOT / "src/calibrepro/data/blog_classification.csv",
                              size_study_csv=tmp_path / "size_study.csv")
    text = (tmp_path / "reproduction.md").read_text()
    assert "## The blog's classification findings, checked" in text
    assert text.rstrip().endswith("6 of 6 checked findings hold.")
