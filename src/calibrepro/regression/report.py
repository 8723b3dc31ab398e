"""Tables and the reproduction report of the regression half, from ``results/<name>/regression/metrics.csv``.

Tables (Markdown and LaTeX, through :mod:`calibrepro.report.tables`' templates and escaping), in
the seed's layout, each cell the mean ± sample standard deviation over the splits:

- ``msce_one_sided``: MC-Dropout's MSCE before and after isotonic recalibration, one-sided
  intervals, beside Kuleshov et al. (2018) as the seed quotes them and the seed's own values;
- ``msce_two_sided``: the same with central intervals and the two-sided isotonic recalibration;
- ``aleatoric``: MSCE before/after of MC-Dropout without and with the aleatoric output;
- ``aleatoric_rmse``: their RMSE (the seed's table of accuracy with/without the aleatoric output);
- ``metric_<name>``: every metric of :data:`calibrepro.regression.metrics.REGRESSION_METRICS`,
  one row per data set and model, one column per recalibrator.

Published values are kept in ``calibrepro/data/regression_published.csv`` (source, model, method,
metric, value, reference) and matched by the data set's ``source`` (``uci_wine``, ``uci_crime``),
so a data set of any name reading those files is compared with them. The reproduction report
lists each published cell with our mean over the splits, its bootstrap interval over the test samples
(:mod:`calibrepro.regression.uncertainty`, at ``uncertainty.level``) and whether the published value
lies inside, and beside them the 95 % t-interval of the mean over the splits (mean ±
t_{0.975, n-1} s / sqrt(n); none with one split), which also covers retraining.  Without the
bootstrap (``uncertainty.enabled: false``) the t-interval decides "inside".  After the table, the
seed's qualitative findings with their verdicts (:mod:`.claims`).
Equal inputs give byte-identical files.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from calibrepro.io import read_tidy_csv, write_text

PUBLISHED = Path(__file__).resolve().parent.parent / "data" / "regression_published.csv"
#: the columns of ``results/<name>/regression/metrics.csv`` and of each model's part of it (:mod:`.task` writes them)
COLUMNS = ("dataset", "model", "method", "split", "metric", "value")
#: the seed-layout tables, then one table per metric (``metric_<name>``)
SEED_TABLES = ("msce_one_sided", "msce_two_sided", "aleatoric", "aleatoric_rmse")
REFERENCES = {
    "kuleshov2018": "Kuleshov et al. 2018 (as quoted by the seed)",
    "seed": "seed 002",
}
_TEXT = {
    "en": {
        "dataset": "Data set", "model": "Model", "before": "before", "after": "after", "ours": "ours",
        "kuleshov2018": "Kuleshov et al.", "seed": "seed", "without": "without aleatoric", "with": "with aleatoric",
        "spread": "Mean ± standard deviation over {n} split(s).",
        "msce_one_sided": "MSCE of MC-Dropout, one-sided intervals, before and after isotonic recalibration "
                          "(Kuleshov et al. 2018, Algorithm 1).",
        "msce_two_sided": "MSCE of MC-Dropout, two-sided (central) intervals, before and after two-sided isotonic "
                          "recalibration.",
        "aleatoric": "MSCE (one-sided) without and with the aleatoric output, before and after isotonic recalibration.",
        "aleatoric_rmse": "RMSE of the predictive mean without and with the aleatoric output (target units; the seed's "
                          "may be on another scale).",
        "metric": "{metric} of every regressor and recalibrator on the test part.",
    },
    "ru": {
        "dataset": "Данные", "model": "Модель", "before": "до", "after": "после", "ours": "наш",
        "kuleshov2018": "Kuleshov и др.", "seed": "seed", "without": "без алеаторной", "with": "с алеаторной",
        "spread": "Среднее ± стандартное отклонение по {n} разбиениям.",
        "msce_one_sided": "MSCE MC-Dropout, односторонние интервалы, до и после изотонической рекалибровки "
                          "(Kuleshov и др. 2018, алгоритм 1).",
        "msce_two_sided": "MSCE MC-Dropout, двусторонние интервалы, до и после двусторонней изотонической рекалибровки.",
        "aleatoric": "MSCE (одностороннее) без и с алеаторной неопределённостью, до и после изотонической рекалибровки.",
        "aleatoric_rmse": "RMSE предсказанного среднего без и с алеаторной неопределённостью (в единицах цели).",
        "metric": "{metric} каждой модели и каждого метода рекалибровки на тестовой части.",
    },
}
#: what each seed-layout table shows: models, metric, the "before" and "after" methods
_LAYOUT = {
    "msce_one_sided": (("mc_dropout",), "msce", "uncalibrated", "isotonic"),
    "msce_two_sided": (("mc_dropout",), "msce_two_sided", "uncalibrated", "isotonic_two_sided"),
    "aleatoric": (("mc_dropout", "aleatoric"), "msce", "uncalibrated", "isotonic"),
}


class RegressionReportError(ValueError):
    """metrics.csv or the published values are unreadable; the message names the file and line."""


def table_names(metrics) -> list[str]:
    """Every table's name: the seed's layout, then one per metric."""
    return [*SEED_TABLES, *(f"metric_{name}" for name in metrics)]


def read_metrics(path) -> dict[tuple[str, str, str, str], dict[int, float]]:
    """``(dataset, model, method, metric) -> {split: value}``, in file order."""
    values: dict = {}
    for line, row in read_tidy_csv(path, COLUMNS, RegressionReportError):
        try:
            split, value = int(row["split"]), float(row["value"])
        except ValueError:
            raise RegressionReportError(f"{path}, line {line}: split or value is not a number") from None
        values.setdefault((row["dataset"], row["model"], row["method"], row["metric"]), {})[split] = value
    return values


def mean_estimates(path) -> dict[tuple[str, str, str, str], float]:
    """``(dataset, model, method, metric) -> mean over the splits`` of ``metrics.csv`` (:func:`mean_sd`)."""
    return {key: mean_sd(values)[0] for key, values in read_metrics(path).items()}


def read_published(path=PUBLISHED) -> dict[tuple[str, str, str, str, str], float]:
    """``(source, model, method, metric, reference) -> value``."""
    with open(path, newline="", encoding="utf-8") as handle:
        return {(r["source"], r["model"], r["method"], r["metric"], r["reference"]): float(r["value"])
                for r in csv.DictReader(handle)}


def mean_sd(values) -> tuple[float, float, int]:
    """Mean, sample standard deviation (0 for one value) and count, with ``math.fsum`` (order-stable)."""
    values = [values[key] for key in sorted(values)]
    n = len(values)
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd, n


def t_interval(values, level: float = 0.95) -> tuple[float, float] | None:
    """The t-interval of the mean over the splits (Student 1908): mean ± t_{(1+level)/2, n-1} s / sqrt(n)."""
    from scipy import stats

    mean, sd, n = mean_sd(values)
    if n < 2:
        return None
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def clipped(bounds: tuple[float, float] | None, metric: str) -> tuple[float, float] | None:
    """``bounds`` intersected with the metric's range (``RegressionMetric.bounds``; an MSCE cannot be
    negative), as every bootstrap interval is (:func:`calibrepro.bootstrap.clip`)."""
    from calibrepro.bootstrap import Interval, clip
    from calibrepro.regression.metrics import REGRESSION_METRICS

    if bounds is None or metric not in REGRESSION_METRICS:
        return bounds
    result = clip(Interval(bounds[0], bounds[1], bounds[0]), *REGRESSION_METRICS[metric].bounds)
    return result.low, result.high


def number(value: float) -> str:
    """Four significant digits, no exponent (0.003912, 0.6213, 60.87, 3386)."""
    if value == 0 or not math.isfinite(value):
        return format(value, "g")
    return format(value, f".{max(0, 3 - math.floor(math.log10(abs(value))))}f")


def _cell(values) -> str | None:
    if not values:
        return None
    mean, sd, n = mean_sd(values)
    return number(mean) if n == 1 else f"{number(mean)} ± {number(sd)}"


def _rows(metrics, sources, language):
    """Table name -> (caption, header, rows of cells: str or None)."""
    text = _TEXT[language]
    published = read_published()
    datasets = list(dict.fromkeys(key[0] for key in metrics))
    models = {d: list(dict.fromkeys(key[1] for key in metrics if key[0] == d)) for d in datasets}
    methods = list(dict.fromkeys(key[2] for key in metrics))
    splits = max((len(v) for v in metrics.values()), default=0)
    tables = {}
    for name, (table_models, metric, before, after) in _LAYOUT.items():
        refs = [r for r in REFERENCES if any(k[3] == metric and k[4] == r and k[1] in table_models for k in published)]
        header = [text["dataset"], text["model"]]
        for when in ("before", "after"):
            header += [f"{text[r]} ({text[when]})" for r in refs] + [f"{text['ours']} ({text[when]})"]
        rows = []
        for dataset in datasets:
            for model in (m for m in table_models if m in models[dataset]):
                row = [dataset, model]
                for method in (before, after):
                    for ref in refs:
                        value = published.get((sources.get(dataset), model, method, metric, ref))
                        row.append(None if value is None else format(value, ".3f"))
                    row.append(_cell(metrics.get((dataset, model, method, metric))))
                rows.append(row)
        tables[name] = (text[name], header, rows)
    header = [text["dataset"], f"{text['seed']} ({text['without']})", f"{text['ours']} ({text['without']})",
              f"{text['seed']} ({text['with']})", f"{text['ours']} ({text['with']})"]
    rows = []
    for dataset in (d for d in datasets if {"mc_dropout", "aleatoric"} & set(models[d])):
        row = [dataset]
        for model in ("mc_dropout", "aleatoric"):
            value = published.get((sources.get(dataset), model, "uncalibrated", "rmse", "seed"))
            row += [None if value is None else format(value, ".3f"),
                    _cell(metrics.get((dataset, model, "uncalibrated", "rmse")))]
        rows.append(row)
    tables["aleatoric_rmse"] = (text["aleatoric_rmse"], header, rows)
    for metric in dict.fromkeys(key[3] for key in metrics):
        rows = [[dataset, model, *(_cell(metrics.get((dataset, model, method, metric))) for method in methods)]
                for dataset in datasets for model in models[dataset]]
        tables[f"metric_{metric}"] = (text["metric"].format(metric=metric), [text["dataset"], text["model"], *methods],
                                      rows)
    note = text["spread"].format(n=splits)
    return {name: (f"{caption} {note}", header, rows) for name, (caption, header, rows) in tables.items()}


def write_regression_tables(metrics_csv, outputs: dict[str, tuple[str, str]], *, sources: dict[str, str],
                            language: str = "en") -> None:
    """Write every table named in ``outputs`` (name -> (md path, tex path))."""
    from calibrepro.report.tables import environment, md_escape, tex_escape

    tables = _rows(read_metrics(metrics_csv), sources, language)
    for name, (md_path, tex_path) in outputs.items():
        caption, header, rows = tables.get(name, (f"{name}: no data", ["—"], []))
        md_rows = [[md_escape(c) if c is not None else "—" for c in row] for row in rows]
        write_text(md_path, environment("md").get_template("table.md.j2").render(
            caption=f"**{caption}**", header=[md_escape(h) for h in header],
            rule=["---"] * min(2, len(header)) + ["---:"] * (len(header) - 2),
            rows=md_rows))
        tex_rows = [[tex_escape(c) if c is not None else "--" for c in row] for row in rows]
        write_text(tex_path, environment("tex").get_template("regression_table.tex.j2").render(
            caption=tex_escape(caption), label=name.replace("_", "-"), header=[tex_escape(h) for h in header],
            rows=tex_rows, columns="ll" + "r" * (len(header) - 2)))


def write_regression_reproduction(metrics_csv, output, *, sources: dict[str, str], language: str = "en",
                                  intervals: dict | None = None, level: float = 0.95, curves_files=()) -> None:
    """Each published value beside ours: mean over the splits, its bootstrap interval (``intervals``:
    ``(dataset, model, method, metric) -> Interval``; where absent, the t-interval decides), inside or not,
    and the t-interval over the splits; then the seed's findings checked on ``metrics_csv`` and the curves
    files (:func:`.claims.check_claims`)."""
    from calibrepro.regression.claims import check_claims, claims_lines

    metrics = read_metrics(metrics_csv)
    published = read_published()
    intervals = intervals or {}
    percent = f"{100 * level:g} %"
    lines = ["# Regression: reproduction of the published values", "",
             "Published: Kuleshov, Fenner & Ermon 2018 (as quoted by the seed) and the seed's own (seed 002). "
             "Ours: the mean over the splits of `results/<name>/regression/metrics.csv` (model mc_dropout: the "
             "seed's MC-Dropout, without a noise term); our interval: its "
             f"{percent} bootstrap interval over the test samples (splits fixed; `uncertainty.*`); t-interval: "
             "the 95 % t-interval of that mean over the splits (covers retraining too; it decides \"inside\" "
             "where there is no bootstrap). The plug-in MSCE is biased upwards (a resample's more so): the "
             "interval of a calibration error is basic or debiased (`uncertainty.interval: auto`, the coverage "
             "study in benchmarks/README.md), corrected for that bias; for a (nearly) calibrated model no interval "
             "reaches 95 % coverage, and the t-interval or paired differences compare better. "
             "MSCE: one-sided or two-sided, levels 0, 0.01, ..., 1 "
             "(`calibrepro.regression.metrics.LEVELS`).", "",
             f"| data set | model | method | metric | reference | published | ours | our {percent} interval | inside "
             "| t-interval |",
             "|---|---|---|---|---|---:|---:|---|---|---|"]
    inside_count = compared = 0
    marked = False
    for dataset, source in sources.items():
        for (src, model, method, metric, ref), value in published.items():
            if src != source:
                continue
            ours = metrics.get((dataset, model, method, metric))
            if not ours:
                continue
            t = clipped(t_interval(ours), metric)
            boot = intervals.get((dataset, model, method, metric))
            bounds = (boot.low, boot.high) if boot is not None else t
            inside = bounds is not None and bounds[0] <= value <= bounds[1]
            compared += 1
            inside_count += inside
            shown = "—" if boot is None else f"[{number(boot.low)}, {number(boot.high)}]"
            if boot is not None and boot.centre != mean_sd(ours)[0] and not boot.low <= mean_sd(ours)[0] <= boot.high:
                shown += f" † {number(boot.centre)}"  # the bias-corrected estimate the interval belongs to
                marked = True
            t_shown = "—" if t is None else f"[{number(t[0])}, {number(t[1])}]"
            lines.append(f"| {dataset} | {model} | {method} | {metric} | {REFERENCES[ref]} | {value:.3f} | "
                         f"{number(mean_sd(ours)[0])} | {shown} | {'yes' if inside else 'no'} | {t_shown} |")
    lines += ["", f"{inside_count} of {compared} published values lie inside our interval." if compared else
              "No configured data set has published values (sources uci_wine and uci_crime have).", ""]
    if marked:
        lines[-1:-1] = ["†: ours lies outside its interval; after † the bias-corrected estimate the interval is "
                        "centred on (basic and debiased intervals: 2 x ours - the resamples' median)."]
    crime = next((d for d, source in sources.items() if source == "uci_crime"), None)
    figure = f"figures/reliability/{crime}/mc_dropout.png" if crime and (crime, "mc_dropout") in {
        key[:2] for key in metrics} else None
    lines += claims_lines(check_claims(metrics, curves_files, sources), figure)
    write_text(output, "\n".join(lines))


def sources_of(regression_config: dict) -> dict[str, str]:
    """Data set -> its ``source`` (what the published values are matched by)."""
    return {name: entry["source"] for name, entry in regression_config.items()}

