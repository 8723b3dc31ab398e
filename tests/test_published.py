"""The bundled thesis values (5 tables x 32 rows x 6 methods) and user files in the same long format."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from calibrepro.report.labels import METHOD_ORDER, THESIS_FIGURES
from calibrepro.report.published import PublishedFileError, bundled_path, decimals_of, load_published

ROOT = Path(__file__).resolve().parents[1]
METRICS = {"1": "accuracy", "2": "brier", "3": "ece", "4": "mce", "5": "nll"}
DECIMALS = {"accuracy": 3, "brier": 3, "ece": 2, "mce": 2, "nll": 3}


@pytest.fixture(scope="module")
def thesis():
    return load_published()


def test_bundled_file_is_package_data():
    assert bundled_path().is_file()
    assert bundled_path().name == "thesis_appendix.csv"


def test_count_is_5_tables_x_32_rows_x_6_methods(thesis):
    assert len(thesis) == 5 * 32 * 6 == 960
    assert list(thesis.columns) == ["table", "dataset", "model", "method", "metric", "value", "bold", "size"]
    assert (thesis["size"] == "").all()
    assert dict(thesis.groupby("table", sort=False)["metric"].first()) == METRICS
    for table, cells in thesis.groupby("table", sort=False):
        assert len(cells) == 192
        assert cells.groupby(["dataset", "model"], sort=False).ngroups == 32
        assert list(cells["method"].unique()) == list(METHOD_ORDER[:6])  # the thesis's six, in its order
    rows = thesis.groupby(["dataset", "model"], sort=False).ngroups
    assert rows == 32
    counts = thesis.drop_duplicates(["dataset", "model"]).groupby("dataset", sort=False).size().to_dict()
    assert counts == {"cifar10": 13, "cifar100": 15, "imagenet": 4}
    for dataset, model in THESIS_FIGURES.values():
        assert ((thesis["dataset"] == dataset) & (thesis["model"] == model)).any()


def test_values_as_printed(thesis):
    def cell(metric, dataset, model, method):
        row = thesis[(thesis.metric == metric) & (thesis.dataset == dataset) & (thesis.model == model)
                     & (thesis.method == method)]
        assert len(row) == 1
        return row.iloc[0]["value"], bool(row.iloc[0]["bold"])

    assert cell("accuracy", "cifar10", "densenet121", "uncalibrated") == ("93.960", True)
    assert cell("accuracy", "cifar10", "densenet121", "temperature_scaling") == ("93.960", True)
    assert cell("accuracy", "imagenet", "tf_efficientnet_b8", "vector_scaling_bias") == ("85.440", True)
    # table 2: three methods print 0.393, only V-scaling is bold (bold is decided on unrounded values)
    assert cell("brier", "cifar100", "mobilenetv2_x0_5", "temperature_scaling") == ("0.393", False)
    assert cell("brier", "cifar100", "mobilenetv2_x0_5", "vector_scaling") == ("0.393", True)
    assert cell("ece", "cifar10", "densenet121", "uncalibrated") == ("1.90", False)
    assert cell("mce", "cifar100", "mobilenetv2_x0_5", "temperature_scaling") == ("93.50", False)
    assert cell("nll", "imagenet", "vgg19_bn", "vector_scaling") == ("1.016", True)
    for metric, decimals in DECIMALS.items():
        assert {decimals_of(v) for v in thesis[thesis.metric == metric]["value"]} == {decimals}


def test_bold_cells_have_the_best_printed_value(thesis):
    """A consistency check of the parse: bold = best unrounded value, so it is also best when printed."""
    for (metric, _, _), row in thesis.groupby(["metric", "dataset", "model"], sort=False):
        values = row["value"].astype(float)
        best = values.max() if metric == "accuracy" else values.min()
        assert row["bold"].any()
        assert (values[row["bold"]] == best).all()
    assert thesis["bold"].sum() == 186


def test_user_file_minimal_columns(tmp_path):
    path = tmp_path / "published.csv"
    path.write_text("dataset,model,method,metric,value\n d , m ,uncalibrated,ece, 1.50 \n")
    frame = load_published(path)
    assert frame.to_dict("records") == [
        {"table": "ece", "dataset": "d", "model": "m", "method": "uncalibrated", "metric": "ece",
         "value": "1.50", "bold": False, "size": ""}
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("dataset,model,method,value\nd,m,x,1.0\n", "missing column"),
        ("dataset,model,method,metric,value\nd,m,x,ece,1.0a\n", "not a plain number"),
        ("dataset,model,method,metric,value\nd,m,x,ece,1.0\nd,m,x,ece,2.0\n", "second value"),
        ("dataset,model,method,metric,value,bold\nd,m,x,ece,1.0,maybe\n", "bold"),
        ("dataset,model,method,metric,value\nd,,x,ece,1.0\n", "empty 'model'"),
        ("dataset,model,method,metric,value,size\nd,m,x,ece,1.0,0\n", "size '0' is not a calibration-set size"),
        ("dataset,model,method,metric,value,size\nd,m,x,ece,1.0,1e3\n", "size '1e3'"),
        ("dataset,model,method,metric,value,size\nd,m,x,ece,1.0,10\nd,m,x,ece,2.0,10\n", "d/m/x/ece at size 10"),
    ],
)
def test_user_file_errors(tmp_path, text, message):
    path = tmp_path / "published.csv"
    path.write_text(text)
    with pytest.raises(PublishedFileError, match=message):
        load_published(path)
    with pytest.raises(PublishedFileError, match="no such file"):
        load_published(tmp_path / "absent.csv")


def _parser():
    spec = importlib.util.spec_from_file_location("parse_thesis_appendix", ROOT / "tools" / "parse_thesis_appendix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parser_round_trip(thesis):
    """Print the bundled values back as the thesis's appendix and parse them: the same CSV comes out."""
    parser = _parser()
    headers = {v: k for k, v in parser.METHODS.items()}
    captions = {
        "1": "Ассигасу, % – доля правильных ответов (больше – лучше).",
        "2": "Brier Score (меньше – лучше).",
        "3": "ECE, % – Expected Calibration Error, 15 бинов (меньше – лучше).",
        "4": "MCE, % – Maximum Calibration Error, 15 бинов (меньше – лучше).",
        "5": "*Negative Log-Likelihood* (меньше – лучше).",
    }
    lines = ["# Thesis", "text", "## 9 Приложения", ""]
    for table, cells in thesis.groupby("table", sort=False):
        lines += [f"Таблица {table}: {captions[table]}", "", "\t".join(["Данные", "Модель"]
                  + [headers[m] for m in cells["method"].unique()])]
        for (dataset, model), row in cells.groupby(["dataset", "model"], sort=False):
            printed = [f"<b>{v}</b>" if b else v for v, b in zip(row["value"], row["bold"])]
            lines.append("\t".join([dataset, model] + printed))
        lines.append("")
    text = parser.to_csv(parser.parse("\n".join(lines).rstrip("\n")))
    assert text == bundled_path().read_text(encoding="utf-8")


def test_parser_rejects_a_short_table():
    parser = _parser()
    text = "## 9 Приложения\nТаблица 1: Accuracy, %\nДанные\tМодель\tДо калибровки\ncifar10\tresnet18\t<b>93.000</b>\n"
    with pytest.raises(parser.AppendixError):
        parser.parse(text)


def test_the_blog_file_holds_one_cell_in_two_tables_marked_by_where_published():
    """config/blog.yaml's published values: the blog's own and the Guo et al. values it quotes, for one cell."""
    blog = load_published(ROOT / "src/calibrepro/data/blog_classification.csv")
    cell = blog.query("dataset == 'cifar10' and model == 'lenet5' and method == 'uncalibrated' and metric == 'ece'")
    assert sorted(zip(cell["table"], cell["value"])) == [
        ("Guo et al. 2017 (as the blog quotes it), CIFAR-10", "3.02"),
        ("Seed 002 (blog), CIFAR-10", "3.47"),
    ]


def test_the_blog_sweep_cells_are_kept_apart_from_the_main_tables():
    """The blog's ECE-against-calibration-set-size cells go to the size study, not to metrics.csv's comparison."""
    from calibrepro.report.published import main_table_cells, size_sweep_cells

    blog = load_published(ROOT / "src/calibrepro/data/blog_classification.csv")
    sweep = size_sweep_cells(blog)
    assert set(sweep["method"]) == {"isotonic", "temperature_scaling"} and set(sweep["metric"]) == {"ece"}
    assert sorted(set(sweep["size"].astype(int))) == [100, 200, 500, 1000, 2000, 5000, 10000]
    assert len(main_table_cells(blog)) + len(sweep) == len(blog) and (main_table_cells(blog)["size"] == "").all()
