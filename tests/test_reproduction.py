"""The reproduction report on a crafted published file and on the bundled thesis values."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from calibrepro.report.metrics_file import read_metrics
from calibrepro.report.published import load_published
from calibrepro.report.comparison import compare
from calibrepro.report.reproduction import write_reproduction_report

PUBLISHED = """table,dataset,model,method,metric,value,bold
1,d1,m1,uncalibrated,accuracy,93.960,true
1,d1,m1,temperature_scaling,accuracy,93.960,true
3,d1,m1,uncalibrated,ece,1.90,false
3,d1,m1,temperature_scaling,ece,1.03,true
3,d1,m2,uncalibrated,ece,2.00,true
"""

# (method, metric) -> value per seed 0, 1, 2 (fractions)
OURS = {
    ("uncalibrated", "accuracy"): [0.9396, 0.9390, 0.9402],  # identical
    ("temperature_scaling", "accuracy"): [0.9394, 0.9398, 0.9396],  # 93.940: miss by -0.020, within noise
    ("uncalibrated", "ece"): [0.01904, 0.0185, 0.0195],  # 1.90: identical
    ("temperature_scaling", "ece"): [0.0110, 0.0111, 0.0109],  # 1.10: miss by +0.07, outside the noise
    ("isotonic", "ece"): [0.0150, 0.0150, 0.0150],  # not published
}


def write_files(tmp_path: Path, seeds=(0, 1, 2)) -> tuple[Path, Path]:
    published = tmp_path / "published.csv"
    published.write_text(PUBLISHED)
    metrics = tmp_path / "metrics.csv"
    with open(metrics, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["dataset", "model", "method", "seed", "metric", "value"])
        for (method, metric), values in OURS.items():
            for seed in seeds:
                writer.writerow(["d1", "m1", method, seed, metric, repr(values[seed])])
    return metrics, published


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def table_rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("|:")
    ]


def test_comparison_cells(tmp_path):
    metrics, published = write_files(tmp_path)
    cells, unmatched, extra = compare(read_metrics(metrics), load_published(published))
    by_key = {(c.method, c.metric): c for c in cells}
    assert by_key["uncalibrated", "accuracy"].identical is True
    miss = by_key["temperature_scaling", "accuracy"]
    assert (miss.ours, miss.difference, miss.identical, miss.within_noise) == ("93.940", "-0.020", False, True)
    assert miss.noise_n == 3 and miss.noise_mean == pytest.approx(93.96) and miss.noise_std == pytest.approx(0.02)
    far = by_key["temperature_scaling", "ece"]
    assert (far.ours, far.difference, far.within_noise) == ("1.10", "+0.07", False)
    assert by_key["uncalibrated", "ece"].difference == "0.00"
    assert list(unmatched["model"]) == ["m2"]
    assert extra == [("d1", "m1", "isotonic", "ece")]


def test_report_with_split_noise(tmp_path):
    metrics, published = write_files(tmp_path)
    out = tmp_path / "reports" / "reproduction.md"
    write_reproduction_report(metrics, out, published_csv=published)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Reproduction of the published values\n")
    assert f"Published values: `{published}`." in text
    assert "split noise from seeds 0, 1, 2" in text
    assert "**Identical at the printed precision: 2 of 4 compared cells (50.00 %).** Within the split noise: 3 of 4." in text
    assert "Per table: 1: Accuracy, % – 1/2 identical; 3: ECE, % – 1/2 identical." in text

    # misses first: before every summary, and only the two misses
    assert text.index("## Misses (2)") < text.index("## Summary per table") < text.index("## All compared cells")
    misses = table_rows(section(text, "Misses"))
    assert misses[0] == ["Table", "Data", "Model", "Method", "Published", "Ours (seed 0)", "Difference",
                         "Seeds mean ± std", "Within noise"]
    assert misses[1] == ["1: Accuracy, %", "d1", "m1", "T-scaling", "**93.960**", "93.940", "-0.020",
                         "93.9600 ± 0.0200", "yes"]
    assert misses[2][:7] == ["3: ECE, %", "d1", "m1", "T-scaling", "**1.03**", "**1.10**", "+0.07"]
    assert misses[2][8] == "no"

    per_table = table_rows(section(text, "Summary per table"))
    assert per_table[0] == ["Table", "Cells", "Identical", "Within noise", "Max abs difference", "Bold agrees (rows)"]
    # table 1: published bolds both (tie); ours bolds only the uncalibrated 93.960 -> 0/1 rows agree
    assert per_table[1] == ["1: Accuracy, %", "2", "1/2", "2/2", "0.020", "0/1"]
    assert per_table[2] == ["3: ECE, %", "2", "1/2", "1/2", "0.07", "1/1"]
    matrix = [r for r in per_table if r[0].startswith(("1:", "3:")) and len(r) == 3]
    assert matrix == [["1: Accuracy, %", "1/1", "0/1"], ["3: ECE, %", "1/1", "0/1"]]
    per_method = table_rows(section(text, "Summary per method"))
    assert per_method[1] == ["Uncalibrated", "2", "2/2", "2/2"]
    assert per_method[2] == ["T-scaling", "2", "0/2", "1/2"]
    per_model = table_rows(section(text, "Summary per model"))
    assert per_model[1] == ["d1", "m1", "4", "2/4", "3/4"]
    not_compared = section(text, "Not compared")
    # d1/m2 is published but not a model of this run: not listed
    assert "- Every published cell of this run's models has a regenerated value." in not_compared
    assert "m2" not in not_compared
    assert "- 1 regenerated cell(s) of the published metrics have no published value: d1/m1." in not_compared
    assert len(table_rows(section(text, "All compared cells"))) == 1 + 4


def test_report_single_seed_has_no_noise_columns(tmp_path):
    metrics, published = write_files(tmp_path, seeds=(0,))
    out = tmp_path / "reproduction.md"
    write_reproduction_report(metrics, out, published_csv=published)
    text = out.read_text(encoding="utf-8")
    assert "**Identical at the printed precision: 2 of 4 compared cells (50.00 %).**\n" in text
    assert "Within noise" not in text and "split noise from" not in text
    assert table_rows(section(text, "Misses"))[1] == ["1: Accuracy, %", "d1", "m1", "T-scaling", "**93.960**",
                                                       "93.940", "-0.020"]


def test_report_in_russian_and_byte_stable(tmp_path):
    metrics, published = write_files(tmp_path)
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    write_reproduction_report(metrics, first, published_csv=published, language="ru")
    write_reproduction_report(metrics, second, published_csv=published, language="ru")
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text(encoding="utf-8")
    assert text.startswith("# Воспроизведение опубликованных значений\n")
    assert "**Совпадают с точностью печати: 2 из 4 сравненных ячеек (50.00 %).**" in text
    assert "## Несовпадения (2)" in text
    assert table_rows(section(text, "Итоги по методам"))[2][0] == "T-scaling"


def test_bundled_thesis_values_reproduce_exactly(tmp_path):
    """Metrics equal to the published numbers (as fractions) compare 960/960 identical, bold included."""
    thesis = load_published()
    percent = {"accuracy", "ece", "mce"}
    metrics = tmp_path / "metrics.csv"
    with open(metrics, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["dataset", "model", "method", "seed", "metric", "value"])
        for row in thesis.itertuples():
            value = float(row.value) / (100 if row.metric in percent else 1)
            # break the printed ties that the thesis did not bold, so that the bold cells agree too
            if not row.bold:
                value += 1e-9 if row.metric != "accuracy" else -1e-9
            writer.writerow([row.dataset, row.model, row.method, 0, row.metric, repr(value)])
    out = tmp_path / "reproduction.md"
    write_reproduction_report(metrics, out)
    text = out.read_text(encoding="utf-8")
    assert "the thesis's appendix (tables 1-5), bundled as `calibrepro/data/thesis_appendix.csv`" in text
    assert "**Identical at the printed precision: 960 of 960 compared cells (100.00 %).**" in text
    assert "## Misses (0)" in text
    assert "- Every published cell of this run's models has a regenerated value." in text
    per_table = table_rows(section(text, "Summary per table"))
    assert [r[-1] for r in per_table[1:6]] == ["32/32"] * 5
    matrix = [r for r in per_table if len(r) == 7 and r[0] != "Table"]
    assert [r[0] for r in matrix] == ["1: Accuracy, %", "2: Brier", "3: ECE, %", "4: MCE, %", "5: NLL"]
    assert all(cell == "32/32" for r in matrix for cell in r[1:])


def test_no_overlap_says_so(tmp_path):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("dataset,model,method,seed,metric,value\ndigits,mlp,uncalibrated,0,ece,0.05\n")
    out = tmp_path / "reproduction.md"
    write_reproduction_report(metrics, out)
    text = out.read_text(encoding="utf-8")
    assert "**No published cell has a regenerated value to compare with.**" in text
    assert "This run's models (digits/mlp) have no published values in this file, so this report compares nothing." in text
    assert "demo" not in text and "published cell(s)" not in text and "densenet121" not in text
    assert "## Misses" not in text


def test_published_value_inside_our_bootstrap_interval(tmp_path):
    from calibrepro.report.uncertainty_files import read_intervals

    metrics, published = write_files(tmp_path, seeds=(0,))
    intervals = tmp_path / "intervals.csv"
    intervals.write_text(
        "dataset,model,method,seed,metric,estimate,centre,low,high,interval,level,B\n"
        # published 93.960 %: inside [93.70, 94.20]
        "d1,m1,uncalibrated,0,accuracy,0.9396,0.9396,0.9370,0.9420,percentile,0.95,1000\n"
        # published 93.960 %: above 93.955 + half a unit (0.0005) = 93.9555 -> outside
        "d1,m1,temperature_scaling,0,accuracy,0.9394,0.9394,0.9380,0.93955,percentile,0.95,1000\n"
        # published 1.90 %: the upper bound 1.895 % + half a unit (0.005) reaches it -> inside
        "d1,m1,uncalibrated,0,ece,0.01904,0.0170,0.0150,0.01895,basic,0.95,1000\n"
    )
    cells, _, _ = compare(read_metrics(metrics), load_published(published), intervals=read_intervals(intervals))
    by_key = {(c.method, c.metric): c for c in cells}
    assert by_key["uncalibrated", "accuracy"].inside_interval is True
    assert by_key["uncalibrated", "accuracy"].interval == pytest.approx((93.70, 94.20))
    assert by_key["temperature_scaling", "accuracy"].inside_interval is False
    assert by_key["uncalibrated", "ece"].inside_interval is True
    assert by_key["temperature_scaling", "ece"].inside_interval is None  # no interval for that cell
    report = tmp_path / "reproduction.md"
    write_reproduction_report(metrics, report, published_csv=published, intervals_csv=intervals)
    text = report.read_text()
    assert "Inside our 95% bootstrap interval: 2 of 3." in text
    # the rule names the interval each metric's cells use
    assert "bootstrap interval (basic: ECE, %; percentile: Accuracy, %) of the seed-0 cell" in text
    rows = table_rows(section(text, "All compared cells"))
    header = rows[0]
    assert header[-2:] == ["Our 95% interval", "Inside interval"]
    by_method = {(r[3], r[0]): r for r in rows[1:]}
    assert by_method["Uncalibrated", "1: Accuracy, %"][-2:] == ["[93.7000, 94.2000]", "yes"]
    assert by_method["T-scaling", "1: Accuracy, %"][-1] == "no"
    assert by_method["T-scaling", "3: ECE, %"][-2:] == ["—", "n/a"]
    # without intervals the columns are absent
    write_reproduction_report(metrics, report, published_csv=published)
    assert "Inside interval" not in report.read_text()
