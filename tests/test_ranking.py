"""Mean ranks, Friedman test, Nemenyi critical difference and the critical-difference diagrams."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from calibrepro.ranking import critical_difference, nemenyi_q, rank_test


def test_friedman_statistic_hand_computed():
    # 4 models (rows) x 3 methods, lower is better; no ties within a row
    values = np.array([[0.1, 0.2, 0.3], [0.1, 0.3, 0.2], [0.2, 0.1, 0.3], [0.1, 0.2, 0.3]])
    test = rank_test(values, ["a", "b", "c"], higher_is_better=False)
    # ranks: a 1,1,2,1 -> 1.25; b 2,3,1,2 -> 2.0; c 3,2,3,3 -> 2.75
    assert test.mean_ranks == [1.25, 2.0, 2.75]
    # chi2_F = 12 N / (k (k+1)) * (sum R_j^2 - k (k+1)^2 / 4) = 12*4/12 * (1.5625 + 4 + 7.5625 - 12) = 4.5
    assert test.statistic == pytest.approx(4.5, abs=1e-12)
    assert test.p_value == pytest.approx(math.exp(-4.5 / 2), abs=1e-12)  # chi2 with 2 dof: exp(-x/2)
    assert test.n_models == 4


def test_higher_is_better_reverses_the_ranks_not_the_statistic():
    values = np.array([[0.9, 0.8, 0.7], [0.9, 0.7, 0.8], [0.8, 0.9, 0.7], [0.9, 0.8, 0.7]])
    test = rank_test(values, ["a", "b", "c"], higher_is_better=True)
    assert test.mean_ranks == [1.25, 2.0, 2.75]
    assert test.statistic == pytest.approx(4.5, abs=1e-12)


def test_ties_share_the_average_rank():
    test = rank_test(np.array([[1.0, 1.0, 2.0], [1.0, 2.0, 3.0]]), ["a", "b", "c"], higher_is_better=False)
    # row 1: a, b share ranks 1 and 2 -> 1.5 each, c 3; row 2: 1, 2, 3
    assert test.mean_ranks == [1.25, 1.75, 3.0]


def test_nemenyi_q_matches_demsar_table_5():
    # Demšar (2006), table 5(a), alpha = 0.05, k = 2..7; table 5(b) alpha = 0.10, k = 2..4
    for k, q in zip(range(2, 8), (1.960, 2.343, 2.569, 2.728, 2.850, 2.949)):
        assert nemenyi_q(k, 0.05) == pytest.approx(q, abs=1e-3)  # the table has 3 decimals
    for k, q in zip(range(2, 5), (1.645, 2.052, 2.291)):
        assert nemenyi_q(k, 0.10) == pytest.approx(q, abs=1e-3)
    assert critical_difference(6, 14, 0.05) == pytest.approx(2.850 * math.sqrt(6 * 7 / (6 * 14)), abs=1e-3)


def test_cliques_join_methods_closer_than_the_cd():
    test = rank_test(np.tile([1.0, 2.0, 3.0, 4.0], (30, 1)), list("abcd"), higher_is_better=False)
    # every model ranks a < b < c < d: mean ranks 1, 2, 3, 4; CD(4, 30) = 2.569 * sqrt(20 / 180) = 0.856
    assert test.critical_difference < 1
    assert test.cliques() == []
    few = rank_test(np.tile([1.0, 2.0, 3.0, 4.0], (3, 1)), list("abcd"), higher_is_better=False)
    assert 2 < few.critical_difference < 3  # CD(4, 3) = 2.708: a-c, b-d within, a-d not
    assert few.cliques() == [(0, 2), (1, 3)]


def test_too_few_methods_or_models_give_no_statistic():
    test = rank_test(np.array([[1.0, 2.0]]), ["a", "b"], higher_is_better=False)
    assert math.isnan(test.statistic) and math.isnan(test.p_value)


def _metrics_csv(tmp_path):
    rows = ["dataset,model,method,seed,metric,value"]
    rng = np.random.default_rng(0)
    for model in ("m1", "m2", "m3", "m4"):
        for j, method in enumerate(("uncalibrated", "isotonic", "temperature_scaling")):
            rows.append(f"cifar10,{model},{method},0,ece,{0.01 * (3 - j) + rng.uniform(0, 0.001)!r}")
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_rank_report_table_and_byte_stable_diagram(tmp_path):
    from calibrepro.report.cd_diagram import write_rank_report

    metrics = _metrics_csv(tmp_path)
    outputs = []
    for name in ("a", "b"):
        png, pdf, md = tmp_path / f"{name}.png", tmp_path / f"{name}.pdf", tmp_path / f"{name}.md"
        write_rank_report(metrics, "ece", md, {"cifar10": (png, pdf)}, language="en")
        outputs.append((png.read_bytes(), pdf.read_bytes(), md.read_text()))
    assert outputs[0] == outputs[1]
    png, pdf, md = outputs[0]
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and pdf[:5] == b"%PDF-" and b"CreationDate" not in pdf
    # every model ranks temperature scaling 1st, isotonic 2nd, uncalibrated 3rd: chi2 = 8, p = exp(-4)
    row = [line for line in md.splitlines() if line.startswith("| cifar10")][0]
    assert row.split(" | ")[1:] == ["4", "3.00", "2.00", "1.00", "8.00", f"{math.exp(-4):.3f}",
                                    f"{critical_difference(3, 4, 0.05):.2f} |"]
    # 4 models and 3 methods: the caveat, with its rule and source
    assert "*cifar10: 4 model(s) and 3 methods are too few for this test to mean much" in md
    assert "more than 10 models and more than 5 methods (Demšar 2006, sec. 3.2.2)" in md


def test_enough_models_and_methods_carry_no_caveat():
    rng = np.random.default_rng(1)
    methods = ["a", "b", "c", "d", "e", "f"]
    assert not rank_test(rng.uniform(size=(11, 6)), methods, higher_is_better=False).too_few
    assert rank_test(rng.uniform(size=(10, 6)), methods, higher_is_better=False).too_few
    assert rank_test(rng.uniform(size=(11, 5)), methods[:5], higher_is_better=False).too_few


def test_cd_diagram_does_not_import_pyplot(tmp_path):
    metrics = _metrics_csv(tmp_path)
    code = (
        "import sys\n"
        "from calibrepro.report.cd_diagram import write_rank_report\n"
        f"write_rank_report({str(metrics)!r}, 'ece', {str(tmp_path / 'r.md')!r}, "
        f"{{'cifar10': ({str(tmp_path / 'x.png')!r}, {str(tmp_path / 'x.pdf')!r})}})\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
