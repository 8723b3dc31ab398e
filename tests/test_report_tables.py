"""Thesis-style tables: formats, bold rule, mean ± std, languages, LaTeX (compiled when pdflatex exists)."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from calibrepro.report.convergence_file import format_convergence, read_convergence, record_row
from calibrepro.report.labels import METHOD_ORDER
from calibrepro.report.metrics_file import MetricsFileError, read_metrics, summarise
from calibrepro.report.tables import md_escape, render_table, tex_escape, write_table

HEADER = ["dataset", "model", "method", "seed", "metric", "value"]
METHODS = list(METHOD_ORDER)[:6]  # the thesis's six columns (the registry lists more after them)

# one row per (dataset, model): values per metric for the six methods, seed 0
SINGLE = {
    # cifar100 first on purpose: rows keep first-appearance order, not alphabetical order
    ("cifar100", "mobilenetv2_x0_5"): {
        # exact tie of the best accuracy (uncalibrated == temperature_scaling): both bold
        "accuracy": [0.7172, 0.6852, 0.714, 0.7172, 0.7122, 0.7142],
        # near tie: 0.39304 / 0.39296 / 0.39301 all print 0.393, only the unrounded minimum is bold
        "brier": [0.4151, 0.4502, 0.3981, 0.39304, 0.39296, 0.39301],
        "ece": [0.1147, 0.0886, 0.0429, 0.0252, 0.0303, 0.0322],
        # 0.1235 prints "0.123" with format(x, ".3f") (numpy.round would give 0.124)
        "nll": [1.163, 3.666, 1.505, 1.0331, 1.0331, 0.1235],
        "classwise_ece": [0.004, 0.003, 0.002, 0.001, 0.0011, 0.0012],
        "ece_l2": [0.05, 0.04, 0.03, 0.02, 0.021, 0.022],
    },
    ("cifar10", "densenet121"): {
        "accuracy": [0.9396, 0.9368, 0.938, 0.9396, 0.939, 0.9386],
        "brier": [0.101, 0.106, 0.098, 0.102, 0.102, 0.102],
        "ece": [0.0190, 0.0103, 0.0189, 0.0174, 0.0176, 0.0164],
        "nll": [0.253, 0.453, 0.305, 0.253, 0.254, 0.254],
        "classwise_ece": [0.004, 0.003, 0.002, 0.001, 0.0011, 0.0012],
        "ece_l2": [0.05, 0.04, 0.03, 0.02, 0.021, 0.022],
    },
}


def write_metrics(path: Path, data=SINGLE, seeds=(0,), methods=METHODS, jitter=None) -> Path:
    """Write a metrics.csv in the pipeline's order (datasets, models, methods, seeds, metrics)."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for (dataset, model), by_metric in data.items():
            for m, method in enumerate(methods):
                for seed in seeds:
                    for metric, values in by_metric.items():
                        value = values[METHODS.index(method)]
                        if jitter is not None:
                            value = jitter(dataset, model, method, seed, metric, value)
                        if value is None:
                            continue
                        writer.writerow([dataset, model, method, seed, metric, repr(value)])
    return path


def md_rows(text: str) -> list[list[str]]:
    """Cells of the Markdown table (header first, alignment row dropped)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if not line.startswith("|:")]


@pytest.fixture
def metrics_csv(tmp_path):
    return write_metrics(tmp_path / "metrics.csv")


def test_markdown_table_russian_content(metrics_csv):
    text = render_table(metrics_csv, "accuracy", "md", language="ru")
    assert text.splitlines()[0] == (
        "Таблица 1: Accuracy, % – доля правильных ответов (больше – лучше). "
        "Значения метрики приводятся для тестовой выборки до и после калибровки."
    )
    rows = md_rows(text)
    assert rows[0] == ["Данные", "Модель", "До калибровки", "Hist-binning", "Isotonic", "T-scaling", "V-scaling",
                       "V-scaling + bias"]
    assert rows[1] == ["cifar100", "mobilenetv2_x0_5", "**71.720**", "68.520", "71.400", "**71.720**", "71.220",
                       "71.420"]
    assert rows[2] == ["cifar10", "densenet121", "**93.960**", "93.680", "93.800", "**93.960**", "93.900", "93.860"]
    # GFM alignment row: text columns left, numbers right
    rule = next(line for line in text.splitlines() if line.startswith("|:"))
    assert rule.count(":|") == 6 and rule.startswith("|:---")
    assert text.endswith("|\n")


def test_markdown_table_english_headers_and_caption(metrics_csv):
    text = render_table(metrics_csv, "ece", "md", language="en")
    assert text.startswith("Table 3: ECE, % – Expected Calibration Error, 15 bins (lower is better).")
    rows = md_rows(text)
    assert rows[0] == ["Data", "Model", "Uncalibrated", "Hist. binning", "Isotonic", "T-scaling", "V-scaling",
                       "V-scaling + bias"]
    # x100 and two decimals; the minimum is bold
    assert rows[1] == ["cifar100", "mobilenetv2_x0_5", "11.47", "8.86", "4.29", "**2.52**", "3.03", "3.22"]
    assert rows[2] == ["cifar10", "densenet121", "1.90", "**1.03**", "1.89", "1.74", "1.76", "1.64"]


def test_bold_near_tie_is_not_bold_and_rounding_convention(metrics_csv):
    rows = md_rows(render_table(metrics_csv, "brier", "md"))
    # three values print 0.393; only the unrounded minimum (0.39296, V-scaling) is bold
    assert rows[1][2:] == ["0.415", "0.450", "0.398", "0.393", "**0.393**", "0.393"]
    # table 2 of the thesis: exact ties of the row's best are all bold
    assert rows[2][2:] == ["0.101", "0.106", "**0.098**", "0.102", "0.102", "0.102"]
    rows = md_rows(render_table(metrics_csv, "nll", "md"))
    # format(0.1235, ".3f") == "0.123"; 1.0331 twice: exact tie but not the best, so not bold
    assert rows[1][2:] == ["1.163", "3.666", "1.505", "1.033", "1.033", "**0.123**"]
    # exact tie of the best (0.253 == 0.253): both bold
    assert rows[2][2:] == ["**0.253**", "0.453", "0.305", "**0.253**", "0.254", "0.254"]


def test_extra_metric_captions_in_both_languages(metrics_csv):
    ru = render_table(metrics_csv, "classwise_ece", "md", language="ru")
    en = render_table(metrics_csv, "classwise_ece", "md", language="en")
    assert ru.startswith("Classwise-ECE, % – поклассовая ошибка калибровки")
    assert en.startswith("Classwise-ECE, % – classwise expected calibration error")
    assert md_rows(ru)[1][2:] == ["0.40", "0.30", "0.20", "**0.10**", "0.11", "0.12"]
    # the extra metrics have no thesis table number
    assert not ru.startswith("Таблица")


def test_method_and_row_order_follow_the_file(tmp_path):
    order = ["temperature_scaling", "uncalibrated", "isotonic"]
    path = write_metrics(tmp_path / "m.csv", methods=order)
    rows = md_rows(render_table(path, "accuracy", "md", language="en"))
    assert rows[0][2:] == ["T-scaling", "Uncalibrated", "Isotonic"]
    assert [r[:2] for r in rows[1:]] == [["cifar100", "mobilenetv2_x0_5"], ["cifar10", "densenet121"]]


def test_missing_cell_prints_a_dash(tmp_path):
    def drop(dataset, model, method, seed, metric, value):
        return None if (model == "densenet121" and method == "isotonic" and metric == "ece") else value

    path = write_metrics(tmp_path / "m.csv", jitter=drop)
    assert md_rows(render_table(path, "ece", "md"))[2][4] == "—"
    assert "& -- &" in render_table(path, "ece", "tex")


def multi_seed_csv(tmp_path) -> Path:
    """Seeds 0, 1, 2: value + (0, +0.001, -0.002); accuracy of uncalibrated and T-scaling + (0, +0.0005,
    -0.001), identical per seed (mean 71.703 %, sample std 0.076 %); densenet121's isotonic Brier + (0, .01, .02)."""
    offsets = {0: 0.0, 1: 0.001, 2: -0.002}

    def jitter(dataset, model, method, seed, metric, value):
        if metric == "accuracy" and method in ("uncalibrated", "temperature_scaling"):
            return value + offsets[seed] / 2  # identical per seed: an exact tie of the means
        if metric == "brier" and method == "isotonic" and model == "densenet121":
            return value + [0.0, 0.01, 0.02][seed]
        return value + offsets[seed]

    return write_metrics(tmp_path / "multi.csv", seeds=(0, 1, 2), jitter=jitter)


def test_mean_and_std_over_seeds(tmp_path):
    path = multi_seed_csv(tmp_path)
    text = render_table(path, "brier", "md", language="en")
    assert "Mean ± standard deviation over splits of the data (seeds 0, 1, 2); bold: best mean." in text
    rows = md_rows(text)
    # densenet121/isotonic: 0.098, 0.108, 0.118 -> mean 0.108, sample std (ddof=1) 0.010
    assert rows[2][4] == "0.108 ± 0.010"
    # others: v, v+0.001, v-0.002 -> mean v-0.000333, std 0.001528 -> "0.002"
    assert rows[2][2] == "**0.101 ± 0.002**"
    assert rows[2][3] == "0.106 ± 0.002"
    # bold goes by the mean: isotonic's mean (0.108) is no longer the best of the row
    assert "**" not in rows[2][4]


def test_multi_seed_exact_tie_of_means_is_all_bold(tmp_path):
    path = multi_seed_csv(tmp_path)
    rows = md_rows(render_table(path, "accuracy", "md", language="ru"))
    assert rows[1][2] == rows[1][5] == "**71.703 ± 0.076**"
    assert "Среднее ± стандартное отклонение по разбиениям выборки (seed: 0, 1, 2)" in render_table(
        path, "accuracy", "md", language="ru"
    )
    tex = render_table(path, "accuracy", "tex", language="ru")
    assert r"\textbf{71.703 $\pm$ 0.076}" in tex
    # restricting to one seed gives the plain thesis table
    rows = md_rows(render_table(path, "accuracy", "md", seeds=[0]))
    assert rows[1][2] == "**71.720**"


def test_summarise_is_sample_std():
    mean, std, n = summarise({2: 3.0, 0: 1.0, 1: 2.0})
    assert (mean, std, n) == (2.0, 1.0, 3)
    mean, std, n = summarise({0: 0.5})
    assert mean == 0.5 and n == 1 and std != std  # NaN


def test_latex_fragment(metrics_csv):
    tex = render_table(metrics_csv, "accuracy", "tex", language="ru")
    assert tex.count(r"\begin{table}") == 1 and r"\end{table}" in tex
    for rule in (r"\toprule", r"\midrule", r"\bottomrule"):
        assert rule in tex
    assert r"\caption{Accuracy, \% -- доля правильных ответов (больше -- лучше)." in tex
    assert r"\label{tab:calibrepro-accuracy}" in tex
    assert r"\begin{tabular}{llrrrrrr}" in tex
    assert r"cifar100 & mobilenetv2\_x0\_5 & \textbf{71.720} & 68.520 & 71.400 & \textbf{71.720} & 71.220 & 71.420 \\" in tex
    # a rule between datasets
    body = tex.split(r"\midrule", 1)[1]
    assert r"\midrule" in body
    nll = render_table(metrics_csv, "nll", "tex", language="en")
    assert r"\caption{\emph{Negative log-likelihood} (lower is better)." in nll
    l2 = render_table(metrics_csv, "ece_l2", "tex", language="en")
    assert r"\caption{ECE-$l_2$, \% -- Expected Calibration Error in the $l_2$ norm" in l2
    assert render_table(metrics_csv, "ece_l2", "md", language="ru").startswith("ECE-l2, % – Expected")


def test_escaping():
    assert tex_escape("a_b & 50% #1 {x} ~ ^") == r"a\_b \& 50\% \#1 \{x\} \textasciitilde{} \textasciicircum{}"
    assert md_escape("vgg11_bn") == "vgg11_bn"
    assert md_escape("a|b*c") == r"a\|b\*c"
    assert md_escape("_private_") == r"\_private\_"


def test_write_table_is_atomic_and_byte_stable(metrics_csv, tmp_path):
    first = (tmp_path / "a.md", tmp_path / "a.tex")
    second = (tmp_path / "b.md", tmp_path / "sub" / "b.tex")
    write_table(metrics_csv, "ece", *first, language="en")
    write_table(metrics_csv, "ece", *second, language="en")
    assert first[0].read_bytes() == second[0].read_bytes()
    assert first[1].read_bytes() == second[1].read_bytes()
    assert not list(tmp_path.glob("**/*.part"))


def test_bad_metrics_files(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("dataset,model,method,metric,value\nd,m,x,ece,0.1\n")
    with pytest.raises(MetricsFileError, match="seed"):
        read_metrics(bad)
    bad.write_text("dataset,model,method,seed,metric,value\nd,m,x,0,ece,0.1\nd,m,x,0,ece,0.2\n")
    with pytest.raises(MetricsFileError, match="second value"):
        read_metrics(bad)
    bad.write_text("dataset,model,method,seed,metric,value\nd,m,x,0,ece,abc\n")
    with pytest.raises(MetricsFileError, match="not a number"):
        read_metrics(bad)
    with pytest.raises(MetricsFileError, match="'mce' is not in the metrics file"):
        render_table(write_metrics(tmp_path / "ok.csv"), "mce", "md")
    with pytest.raises(ValueError, match="language"):
        render_table(write_metrics(tmp_path / "ok.csv"), "ece", "md", language="de")


# --------------------------------------------------------------------------- pdflatex

PREAMBLE = {
    "ru": "\\usepackage[T2A]{fontenc}\n\\usepackage[utf8]{inputenc}\n\\usepackage[russian,english]{babel}\n",
    "en": "\\usepackage[T1]{fontenc}\n\\usepackage[utf8]{inputenc}\n",
}


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
@pytest.mark.parametrize("language", ["ru", "en"])
def test_latex_compiles_with_pdflatex(tmp_path, language):
    single = write_metrics(tmp_path / "single.csv")
    multi = multi_seed_csv(tmp_path)
    marks = tmp_path / "convergence.csv"  # both fit marks, in cells and caption notes
    marks.write_text(format_convergence([
        record_row("cifar10", "densenet121", "isotonic", 0, {"converged": False}),
        record_row("cifar10", "densenet121", "temperature_scaling", 0, {"converged": False, "search_capped": True}),
    ]))
    inputs = []
    for name, path in (("single", single), ("multi", multi)):
        for metric in ("accuracy", "brier", "ece", "nll", "classwise_ece", "ece_l2"):
            md, tex = tmp_path / f"{name}-{metric}.md", tmp_path / f"{name}-{metric}.tex"
            write_table(path, metric, md, tex, language=language, convergence_csv=marks if name == "single" else None)
            inputs.append(tex.name)
    assert "$^\\ddagger$$^\\S$" in (tmp_path / "single-ece.tex").read_text()
    document = (
        "\\documentclass{article}\n" + PREAMBLE[language] + "\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
        "\\begin{document}\n" + "".join(f"\\input{{{name}}}\n" for name in inputs) + "\\end{document}\n"
    )
    (tmp_path / "doc.tex").write_text(document, encoding="utf-8")
    result = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    log = (tmp_path / "doc.log").read_text(encoding="utf-8", errors="replace")
    assert result.returncode == 0, log[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0
    assert "Overfull \\hbox" not in log


def write_comparisons(path: Path, tied: dict, seeds=(0,)) -> Path:
    """comparisons.csv with ``tied[(dataset, model, method)]`` (default: not tied) for metric ece."""
    lines = [",".join(("dataset", "model", "seed", "metric", "method", "best", "difference", "low", "high",
                       "interval", "level", "B", "tied"))]
    for (dataset, model) in SINGLE:
        for method in METHODS:
            for seed in seeds:
                flag = tied.get((dataset, model, method), 0)
                lines.append(f"{dataset},{model},{seed},ece,{method},temperature_scaling,0.01,-0.01,0.02,percentile,0.95,1000,{flag}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_mark_ties_bolds_statistically_tied_cells_with_a_note(metrics_csv, tmp_path):
    from calibrepro.report.uncertainty_files import read_comparisons

    comparisons = read_comparisons(write_comparisons(tmp_path / "cmp.csv", {
        ("cifar100", "mobilenetv2_x0_5", "vector_scaling"): 1,  # 3.03 tied with the best 2.52
        ("cifar10", "densenet121", "uncalibrated"): 1,
    }))
    text = render_table(metrics_csv, "ece", "md", language="en", comparisons=comparisons)
    rows = md_rows(text)
    assert rows[1][2:] == ["11.47", "8.86", "4.29", "**2.52**", "**3.03**", "3.22"]
    assert rows[2][2:] == ["**1.90**", "**1.03**", "1.89", "1.74", "1.76", "1.64"]
    assert "Bold also marks every method statistically tied with the best: the paired bootstrap 95% interval" in text
    assert "(B = 1000) contains 0." in text
    # the thesis's rule without comparisons: only the exact best
    plain = md_rows(render_table(metrics_csv, "ece", "md", language="en"))
    assert plain[1][2:] == ["11.47", "8.86", "4.29", "**2.52**", "3.03", "3.22"]
    tex = render_table(metrics_csv, "ece", "tex", language="ru", comparisons=comparisons)
    assert "\\textbf{3.03}" in tex and "бутстреп-интервал" in tex


def test_ties_with_several_seeds_need_a_tie_at_every_seed(tmp_path):
    metrics = write_metrics(tmp_path / "metrics.csv", seeds=(0, 1))
    from calibrepro.report.uncertainty_files import read_comparisons

    path = write_comparisons(tmp_path / "cmp.csv", {("cifar10", "densenet121", "uncalibrated"): 1}, seeds=(0, 1))
    text = path.read_text().replace("cifar10,densenet121,1,ece,uncalibrated,temperature_scaling,0.01,-0.01,0.02,percentile,0.95,1000,1",
                                    "cifar10,densenet121,1,ece,uncalibrated,temperature_scaling,0.01,0.001,0.02,percentile,0.95,1000,0")
    path.write_text(text)
    rows = md_rows(render_table(metrics, "ece", "md", language="en", comparisons=read_comparisons(path)))
    assert not rows[2][2].startswith("**")  # tied at seed 0 only


def test_interval_cells(metrics_csv, tmp_path):
    from calibrepro.report.uncertainty_files import read_intervals

    path = tmp_path / "intervals.csv"
    lines = ["dataset,model,method,seed,metric,estimate,centre,low,high,interval,level,B"]
    for (dataset, model), by_metric in SINGLE.items():
        for method, value in zip(METHODS, by_metric["ece"]):
            lines.append(f"{dataset},{model},{method},0,ece,{value!r},{value!r},{value - 0.005!r},{value + 0.01!r},"
                         "percentile,0.9,500")
    path.write_text("\n".join(lines) + "\n")
    text = render_table(metrics_csv, "ece", "md", language="en", intervals=read_intervals(path))
    rows = md_rows(text)
    assert rows[1][2] == "11.47 [10.97, 12.47]"
    assert rows[1][5] == "**2.52 [2.02, 3.52]**"
    assert "In brackets: the 90% bootstrap interval (percentile) over the test half (B = 500)." in text
    assert "†" not in text
    tex = render_table(metrics_csv, "ece", "tex", language="en", intervals=read_intervals(path))
    assert "\\textbf{2.52 [2.02, 3.52]}" in tex


def test_an_interval_beside_its_estimate_shows_the_bias_corrected_centre(metrics_csv, tmp_path):
    from calibrepro.report.uncertainty_files import read_intervals

    path = tmp_path / "intervals.csv"
    lines = ["dataset,model,method,seed,metric,estimate,centre,low,high,interval,level,B"]
    for (dataset, model), by_metric in SINGLE.items():
        for method, value in zip(METHODS, by_metric["ece"]):  # the basic interval of an upward-biased ECE
            lines.append(f"{dataset},{model},{method},0,ece,{value!r},{value - 0.004!r},{value - 0.006!r},"
                         f"{value - 0.001!r},basic,0.95,1000")
    path.write_text("\n".join(lines) + "\n")
    text = render_table(metrics_csv, "ece", "md", language="en", intervals=read_intervals(path))
    assert md_rows(text)[1][2] == "11.07† [10.87, 11.37]"  # 11.47 lies outside: its centre is shown
    assert "bootstrap interval (basic)" in text and "†: the estimate lies outside its interval" in text
    tex = render_table(metrics_csv, "ece", "tex", language="ru", intervals=read_intervals(path))
    assert "11.07$^\\dagger$ [10.87, 11.37]" in tex and "базовый" in tex


def test_write_table_reads_the_uncertainty_files(metrics_csv, tmp_path):
    cmp = write_comparisons(tmp_path / "cmp.csv", {("cifar10", "densenet121", "uncalibrated"): 1})
    write_table(metrics_csv, "ece", tmp_path / "t.md", tmp_path / "t.tex", language="en", comparisons_csv=cmp)
    assert md_rows((tmp_path / "t.md").read_text())[2][2] == "**1.90**"


def test_cells_of_fits_that_did_not_converge_or_hit_the_search_cap_are_marked_with_a_legend(tmp_path):
    """The convergence records (issue 18, issue 35) mark a method's cells; metrics.csv holds metrics only."""
    path = write_metrics(tmp_path / "m.csv")
    records = tmp_path / "convergence.csv"
    records.write_text(format_convergence([
        record_row("cifar10", "densenet121", "isotonic", 0, {"converged": False, "iterations": 100}),
        record_row("cifar10", "densenet121", "temperature_scaling", 0, {"converged": True, "search_capped": True}),
        record_row("cifar10", "densenet121", "vector_scaling", 0, {"converged": True, "search_capped": False}),
        record_row("cifar10", "densenet121", "uncalibrated", 1, {"converged": False}),  # a seed the table does not use
    ]))
    convergence = read_convergence(records)
    assert convergence.not_converged == {
        ("cifar10", "densenet121", "isotonic", 0), ("cifar10", "densenet121", "uncalibrated", 1),
    }
    assert convergence.search_capped == {("cifar10", "densenet121", "temperature_scaling", 0)}
    legends = {"en": ("‡: the calibrator's fit did not converge", "§: the search for the regularisation strength"),
               "ru": ("‡ – подгонка", "§ – поиск силы регуляризации")}
    for language, (not_converged, capped) in legends.items():
        md = render_table(path, "ece", "md", language=language, convergence=convergence)
        rows = md_rows(md)
        isotonic, ts = 2 + METHODS.index("isotonic"), 2 + METHODS.index("temperature_scaling")
        assert rows[2][isotonic].endswith("‡") and not rows[1][isotonic].endswith("‡")
        assert rows[2][ts].endswith("§") and not rows[2][ts].endswith("‡§")
        assert sum(cell.count("‡") for row in rows for cell in row) == 1
        assert sum(cell.count("§") for row in rows for cell in row) == 1
        caption = md.splitlines()[0]
        assert not_converged in caption and capped in caption and caption.index(not_converged) < caption.index(capped)
    tex = render_table(path, "ece", "tex", language="en", convergence=convergence)
    assert tex.count("$^\\ddagger$") == 2 and tex.count("$^\\S$") == 2  # each cell and its legend in the caption
    write_table(path, "ece", tmp_path / "t.md", tmp_path / "t.tex", language="en", convergence_csv=records)
    assert (tmp_path / "t.md").read_text() == render_table(path, "ece", "md", language="en", convergence=convergence)
    for clean in (None, read_convergence(write_convergence_rows(tmp_path / "clean.csv"))):
        md, tex = (render_table(path, "ece", kind, convergence=clean) for kind in ("md", "tex"))
        assert "‡" not in md and "§" not in md and "ddagger" not in tex and "\\S" not in tex


def write_convergence_rows(path):
    """Records of fits that all converged, none capped."""
    path.write_text(format_convergence([record_row("cifar10", "densenet121", "isotonic", 0, {"converged": True})]))
    return path
