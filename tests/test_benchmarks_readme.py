"""benchmarks/README.md, the current figures: its interval choice tables are what ``uncertainty.interval:
auto`` uses, and it names every benchmark script with a command."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrepro.metrics import METRICS
from calibrepro.regression.metrics import REGRESSION_METRICS

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: the one metric whose interval is not the table's choice, on purpose (the README says why)
KEPT_AGAINST_THE_TABLE = {"ece_l2_debiased"}


def choice_table(title: str) -> dict[str, tuple[str, str]]:
    """The rows under the bold ``title`` of benchmarks/README.md: metric -> (choice, now)."""
    text = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in text[text.index(f"**{title}"):].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] not in ("metric", "---"):
            rows[cells[0]] = (cells[-2], cells[-1])
    return rows


@pytest.mark.parametrize("title, registry", [
    ("Choice per metric", METRICS), ("Regression: choice per metric", REGRESSION_METRICS)])
def test_the_coverage_study_s_table_is_what_auto_uses(title, registry):
    rows = choice_table(title)
    assert set(rows) == set(registry), title
    for name, (choice, now) in rows.items():
        assert now == registry[name].interval, name
        assert choice == now or name in KEPT_AGAINST_THE_TABLE, name


def test_every_benchmark_script_has_a_command_in_the_readme():
    text = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))
    assert scripts and [s for s in scripts if f"benchmarks/{s}" not in text] == []
    assert (BENCHMARKS / "MEASUREMENTS.md").is_file() and "MEASUREMENTS.md" in text
