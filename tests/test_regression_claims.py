"""The seed's findings as checks (calibrepro.regression.claims): verdicts from metrics and curves files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrepro.regression.claims import check_claims, claims_lines
from calibrepro.regression.metrics import LEVELS


def curves_file(path, dataset, model, split, methods):
    """A curves file as the evaluation writes it (levels, outputs, methods with curves and per-hour values)."""
    path.write_text(json.dumps({"dataset": dataset, "model": model, "split": split, "levels": LEVELS.tolist(),
                                "outputs": list(range(1, 11)), "order": list(methods), "methods": methods}))
    return path


def method(two_sided=None, rmse=None, std=None, knots_y=None):
    return {"one_sided": LEVELS.tolist(), "two_sided": (LEVELS if two_sided is None else two_sided).tolist(),
            "rmse": rmse or [1.0] * 10, "std": std or [1.0] * 10,
            "recalibrator": {"params": {"knots_y": knots_y or [0.0, 0.5, 1.0]}}}


def uci_metrics(dataset, splits=3, coverage=0.3, before=0.05, after=0.02, two_before=0.2, two_after=0.06,
                aleatoric=0.01):
    values = {("mc_dropout", "uncalibrated", "coverage_90"): coverage, ("mc_dropout", "uncalibrated", "msce"): before,
              ("mc_dropout", "isotonic", "msce"): after, ("mc_dropout", "uncalibrated", "msce_two_sided"): two_before,
              ("mc_dropout", "isotonic_two_sided", "msce_two_sided"): two_after,
              ("aleatoric", "uncalibrated", "msce"): aleatoric}
    return {(dataset, *key): {s: value * (1 + 0.01 * s) for s in range(splits)} for key, value in values.items()}


def repaired_up_to(reach):
    """Two-sided curve after recalibration: on the diagonal up to `reach`, flat at `reach` above it."""
    return np.minimum(LEVELS, reach)


def test_the_uci_findings_hold_on_an_overconfident_model_and_say_by_how_much_where_not(tmp_path):
    reach = 0.35
    files = [curves_file(tmp_path / f"c{s}.json", "crime", "mc_dropout", s,
                         {"isotonic_two_sided": method(repaired_up_to(reach), knots_y=[0.0, 0.4, 0.5 + reach / 2, 1.0])})
             for s in range(3)]
    claims = check_claims(uci_metrics("crime"), files, {"crime": "uci_crime"})
    assert [c.verdict for c in claims] == ["holds"] * 6
    assert claims[0].ours == "coverage of the 90 % interval 0.303"
    assert claims[1].ours == "0.0505 → 0.0202 (-60 %), lower in 3 of 3 splits"
    assert "r = 0.35; after: accuracy(0.99) = 0.35" in claims[5].ours
    # a model nearly calibrated already: coverage near 0.9, recalibration making it worse, no aleatoric gain
    bad = uci_metrics("wine", coverage=0.86, after=0.06, two_before=0.04, aleatoric=0.07)
    claims = check_claims(bad, [], {"wine": "uci_wine"})
    verdicts = [c.verdict for c in claims]
    assert verdicts[0] == "does not hold (0.0314 below 0.9)"
    assert verdicts[1].startswith("does not hold (higher by 0.0101")
    assert verdicts[3].startswith("does not hold (smaller by")
    assert verdicts[4] == "does not hold (higher by 0.0202)"
    assert verdicts[5] == "not checked: no two-sided recalibration of mc_dropout"


def energy_files(tmp_path, evidential_std):
    hours = np.arange(1, 11)
    rmse = (60.0 + 3 * hours).tolist()
    models = {"mc_dropout": (None, (20.0 + hours).tolist()), "ensemble": (None, (50.0 + 2 * hours).tolist()),
              "evidential": (np.minimum(1.0, LEVELS + 0.1), evidential_std)}
    return [curves_file(tmp_path / f"{m}.json", "energy", m, 0,
                        {"uncalibrated": method(two, rmse=rmse, std=std), "isotonic": method(rmse=rmse, std=std)})
            for m, (two, std) in models.items()]


def test_the_energy_findings_and_the_std_rmse_correlation(tmp_path):
    metrics = {("energy", m, method, "msce"): {0: value} for m, method, value in [
        ("mc_dropout", "uncalibrated", 0.05), ("ensemble", "uncalibrated", 0.004), ("evidential", "uncalibrated", 0.02),
        ("mc_dropout", "isotonic", 0.003), ("ensemble", "isotonic", 0.002), ("evidential", "isotonic", 0.004)]}
    metrics[("energy", "evidential", "uncalibrated", "coverage_90")] = {0: 0.97}
    flat = [80, 81, 79, 80, 82, 78, 80, 81, 79, 80]  # the evidential std does not follow the RMSE
    claims = check_claims(metrics, energy_files(tmp_path, flat), {"energy": "energy"})
    assert [c.verdict for c in claims[:3]] == ["holds"] * 3
    assert claims[1].ours.startswith("mean accuracy - confidence +0.0")
    assert claims[3].verdict == "does not hold (evidential std: hour 10 = 1.00 × hour 1)"  # the flat std
    assert "ensemble: RMSE 63 → 90 (ρ 1.00), std 52 → 70 (ρ 1.00)" in claims[3].ours
    assert claims[4].verdict == "holds" and "evidential r = -0.13" in claims[4].ours
    extra = curves_file(tmp_path / "fitted.json", "energy", "mc_dropout_fitted", 0,
                        {"uncalibrated": method(rmse=[1.0, 2.0] * 5, std=[2.0, 1.0] * 5)})
    files = [*energy_files(tmp_path, (np.arange(1, 11) * 5.0).tolist()), extra]
    tracking = check_claims(metrics, files, {"energy": "energy"})
    assert tracking[4].ours.endswith("evidential r = 1.00, mc_dropout_fitted r = -1.00")  # other models beside
    assert tracking[4].verdict == "does not hold (evidential r = 1.00)" and tracking[3].verdict == "holds"
    lines = claims_lines(claims, "figures/reliability/crime/mc_dropout.png")
    assert "| energy | before recalibration the ensemble is the best calibrated (one-sided MSCE) |" in "\n".join(lines)
    assert "4 of 5 checked findings hold." in lines and lines[-2].startswith("![reliability curves](figures/")


@pytest.mark.parametrize("sources", [{"wine": "uci_wine"}, {"energy": "energy"}])
def test_missing_models_are_not_checked_rather_than_failing(sources):
    claims = check_claims({}, [], sources)
    assert claims and all(c.verdict.startswith("not checked") for c in claims)
