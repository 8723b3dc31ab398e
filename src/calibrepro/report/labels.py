"""Display names, captions and number formats of the report, in Russian (the thesis) and English.

Everything a table or figure prints that is not a number lives here, so that the two languages
stay side by side and a new metric or method needs one entry, not edits in every writer.

Number format (decided once, used by tables and the reproduction report alike): a metric value is
a fraction in ``metrics.csv``; percent metrics are multiplied by 100 (one float64 multiplication)
and the result is printed with Python's ``format(x, ".3f")`` / ``format(x, ".2f")``, i.e. the
binary double is rounded correctly to the nearest printed decimal (exact halves, which only occur
for values such as 0.125 that are exact in binary, go to the even digit). That is what
``"%.3f" % x``, ``"{:.3f}".format(x)`` and pandas' ``float_format`` do, which is how the thesis's
tables were most likely printed; ``numpy.round`` (scale-and-round) can differ in the last digit
and is not used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from calibrepro.calibrators import CALIBRATORS
from calibrepro.metrics import higher_is_better

LANGUAGES = ("ru", "en")

#: method keys in column order: the registry's order (the thesis's six first)
METHOD_ORDER = tuple(CALIBRATORS)

#: where a long header may break onto a second line in LaTeX (keeps the 8-column table narrow)
_HEADER_BREAKS = {
    "До калибровки": ("До", "калибровки"),
    "V-scaling + bias": ("V-scaling", "+ bias"),
    "Hist. binning": ("Hist.", "binning"),
}

ROW_HEADERS = {"ru": ("Данные", "Модель"), "en": ("Data", "Model")}

#: data set names in figure titles (thesis figures 2-4: "CIFAR-10, googlenet"); tables print the key
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "cifar10_1": "CIFAR-10.1", "imagenet": "ImageNet", "digits": "Digits"}

#: the thesis's figures 2-4 (named figure targets of the thesis configuration)
THESIS_FIGURES = {
    "figure2": ("cifar10", "googlenet"),
    "figure3": ("cifar100", "shufflenetv2_x0_5"),
    "figure4": ("imagenet", "tf_efficientnet_b8"),
}

#: the fitted-parameters tables (:mod:`calibrepro.report.parameter_tables`): the column of each number of the
#: calibrators' and recalibrators' ``parameters()`` and of the convergence record (defined in
#: :mod:`calibrepro.report.parameters_file`); a name not listed prints as it is
PARAMETER_NAMES = {
    **{name: {"en": en, "ru": ru} for name, en, ru in [
        ("temperature", "T", "T"), ("inverse_temperature", "1/T", "1/T"),
        ("weight_temperature_scaled", "w (T-scaled)", "w (T-scaling)"),
        ("weight_uncalibrated", "w (uncalibrated)", "w (до калибровки)"), ("weight_uniform", "w (uniform)", "w (равномерное)"),
        ("bins", "bins (K·M)", "бинов (K·M)"), ("empty_bins", "empty bins", "пустых бинов"),
        ("lambda", "λ", "λ"), ("mu", "μ", "μ"), ("search_capped", "search capped", "поиск на пределе"),
        ("converged", "converged", "сошлась"), ("iterations", "iterations", "итераций"),
        ("knots", "knots", "узлов"), ("scale", "s", "s"),
    ]},
    **{f"{part}_{stat}": {"en": f"{en} {stat}", "ru": f"{ru} {ru_stat}"}  # a vector's spread
       for part, en, ru in (("weight", "w", "w"), ("bias", "b", "b"), ("thresholds", "thresholds", "порогов"))
       for stat, ru_stat in (("mean", "средн."), ("min", "мин."), ("max", "макс."))},
}
#: how the yes/no numbers (1, 0) of the parameters print
YES_NO = {"en": ("yes", "no"), "ru": ("да", "нет")}
#: the header of the seed (classification) or split (regression) column, shown with several
SEED_HEADERS = {"classification": {"en": "Seed", "ru": "Seed"}, "regression": {"en": "Split", "ru": "Разбиение"}}
#: the word before a method's name in the caption of its LaTeX table of fitted parameters
PARAMETERS_TITLE = {"en": "Fitted parameters", "ru": "Подобранные параметры"}
PARAMETER_CAPTIONS = {
    "classification": {
        "en": "Fitted parameters of every calibrator, fitted on the calibration half: what it learned (K values, one "
        "per class, as their mean, smallest and largest), the regularisation its cross-validation chose and how "
        "its fit ended. Exact values: parameters.csv of the run's results; definitions: "
        'docs/library.md, "Fitted parameters".',
        "ru": "Параметры калибраторов, подобранные на калибровочной выборке: найденные значения (K значений, по "
        "одному на класс, – их среднее, минимум и максимум), выбранная кросс-валидацией сила регуляризации и "
        "завершение подгонки. Точные значения – в parameters.csv результатов запуска; определения: "
        'docs/library.md, "Fitted parameters".',
    },
    "regression": {
        "en": "Fitted state of every recalibrator, fitted on the calibration part of each split: the knots of the "
        "isotonic maps and the factor s of std scaling. Exact values: regression/parameters.csv of the run's "
        'results; definitions: docs/library.md, "Fitted parameters".',
        "ru": "Подобранные параметры методов рекалибровки на калибровочной части каждого разбиения: число узлов "
        "изотонических отображений и множитель s стандартного отклонения. Точные значения – в "
        'regression/parameters.csv результатов запуска; определения: docs/library.md, "Fitted parameters".',
    },
}

_VALUES_RU = "Значения метрики приводятся для тестовой выборки до и после калибровки."
_VALUES_EN = "Values on the test half of the data, before and after calibration."


@dataclass(frozen=True)
class MetricSpec:
    """How one metric is printed: scale, decimals, captions (its direction: :class:`calibrepro.metrics.Metric`)."""

    key: str
    percent: bool
    decimals: int
    #: the thesis's table number (1-5) or None for the extra metrics
    thesis_table: int | None
    #: captions with ``{bins}`` for the number of bins; ``*...*`` marks emphasis, ``{l2}`` the l2 norm
    caption: dict

    @property
    def higher_is_better(self) -> bool:
        """The metric's direction, read from its spec in :data:`calibrepro.metrics.METRICS`."""
        return higher_is_better(self.key)

    def display(self, value: float) -> float:
        """The value in printed units (x100 for percent metrics)."""
        return value * 100.0 if self.percent else value

    def format(self, value: float) -> str:
        """The value in printed units, formatted as the thesis prints it ("" for NaN)."""
        return format_number(self.display(value), self.decimals)


METRICS: dict[str, MetricSpec] = {
    spec.key: spec
    for spec in [
        MetricSpec(
            "accuracy", True, 3, 1,
            {
                "ru": f"Accuracy, % – доля правильных ответов (больше – лучше). {_VALUES_RU}",
                "en": f"Accuracy, % – share of correct predictions (higher is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "brier", False, 3, 2,
            {
                "ru": f"Brier Score (меньше – лучше). {_VALUES_RU}",
                "en": f"Brier score (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "ece", True, 2, 3,
            {
                "ru": f"ECE, % – Expected Calibration Error, {{bins}} бинов (меньше – лучше). {_VALUES_RU}",
                "en": f"ECE, % – Expected Calibration Error, {{bins}} bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "mce", True, 2, 4,
            {
                "ru": f"MCE, % – Maximum Calibration Error, {{bins}} бинов (меньше – лучше). {_VALUES_RU}",
                "en": f"MCE, % – Maximum Calibration Error, {{bins}} bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "nll", False, 3, 5,
            {
                "ru": f"*Negative Log-Likelihood* (меньше – лучше). {_VALUES_RU}",
                "en": f"*Negative log-likelihood* (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "classwise_ece", True, 2, None,
            {
                "ru": "Classwise-ECE, % – поклассовая ошибка калибровки (среднее по классам), "
                f"{{bins}} бинов (меньше – лучше). {_VALUES_RU}",
                "en": "Classwise-ECE, % – classwise expected calibration error (mean over classes), "
                f"{{bins}} bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "ece_equal_mass", True, 2, None,
            {
                "ru": f"ECE, % – Expected Calibration Error, {{bins}} равномощных бинов (меньше – лучше). {_VALUES_RU}",
                "en": f"ECE, % – Expected Calibration Error, {{bins}} equal-mass bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "mce_equal_mass", True, 2, None,
            {
                "ru": f"MCE, % – Maximum Calibration Error, {{bins}} равномощных бинов (меньше – лучше). {_VALUES_RU}",
                "en": f"MCE, % – Maximum Calibration Error, {{bins}} equal-mass bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "ece_l2", True, 2, None,
            {
                "ru": "ECE-{l2}, % – Expected Calibration Error в {l2}-норме (корень из взвешенного среднего "
                f"квадратов разрывов), {{bins}} бинов (меньше – лучше). {_VALUES_RU}",
                "en": "ECE-{l2}, % – Expected Calibration Error in the {l2} norm (root of the weighted mean "
                f"squared gap), {{bins}} bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "ece_l2_debiased", True, 2, None,
            {
                "ru": "Debiased ECE-{l2}, % – несмещённая оценка ошибки калибровки в {l2}-норме (Kumar et al. "
                f"2019), {{bins}} равномощных бинов (меньше – лучше). {_VALUES_RU}",
                "en": "Debiased ECE-{l2}, % – debiased estimate of the {l2} calibration error (Kumar et al. "
                f"2019), {{bins}} equal-mass bins (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "smooth_ece", True, 2, None,
            {
                "ru": "Smooth ECE, % – сглаженная ошибка калибровки без бинов (Błasiok, Nakkiran 2023) "
                f"(меньше – лучше). {_VALUES_RU}",
                "en": "Smooth ECE, % – kernel-smoothed calibration error without bins (Błasiok & Nakkiran "
                f"2023) (lower is better). {_VALUES_EN}",
            },
        ),
        MetricSpec(
            "overconfidence", True, 2, None,
            {
                "ru": "Уверенность − точность, % – средняя уверенность минус доля правильных ответов (Guo et al. "
                f"2017): > 0 – сверхуверенность, < 0 – недоуверенность; жирным – наименьшее значение. {_VALUES_RU}",
                "en": "Confidence − accuracy, % – mean top-label confidence minus accuracy (Guo et al. 2017): "
                f"> 0 overconfident, < 0 underconfident; bold marks the lowest value, not the best. {_VALUES_EN}",
            },
        ),
    ]
}


#: names of the interval methods of :data:`calibrepro.bootstrap.INTERVAL_METHODS` in captions and reports
INTERVAL_NAMES = {
    "ru": {"percentile": "перцентильный", "basic": "базовый", "bca": "BCa",
           "debiased": "перцентильный с поправкой на смещение"},
    "en": {"percentile": "percentile", "basic": "basic", "bca": "BCa",
           "debiased": "bias-corrected percentile"},
}


def check_language(language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    return language


def metric_spec(metric: str) -> MetricSpec:
    """The spec of ``metric``; an unknown metric is printed as is, 3 decimals, lower is better."""
    try:
        return METRICS[metric]
    except KeyError:
        return MetricSpec(
            metric, False, 3, None,
            {
                "ru": f"{metric} (меньше – лучше). {_VALUES_RU}",
                "en": f"{metric} (lower is better). {_VALUES_EN}",
            },
        )


def method_name(method: str, language: str) -> str:
    """Display name of a method key (its calibrator's ``display_names``; the key itself when unknown)."""
    language = check_language(language)
    cls = CALIBRATORS.get(method)
    return cls.display_names.get(language, method) if cls is not None else method


def header_lines(name: str) -> tuple[str, ...]:
    """A column header split where it may break onto two lines."""
    return _HEADER_BREAKS.get(name, (name,))


#: short metric names (reproduction report, figure annotations)
SHORT_NAMES = {
    "accuracy": "Accuracy, %",
    "brier": "Brier",
    "ece": "ECE, %",
    "mce": "MCE, %",
    "nll": "NLL",
    "classwise_ece": "Classwise-ECE, %",
    "ece_equal_mass": "ECE equal-mass, %",
    "mce_equal_mass": "MCE equal-mass, %",
    "ece_l2": "ECE-l2, %",
    "ece_l2_debiased": "Debiased ECE-l2, %",
    "smooth_ece": "Smooth ECE, %",
    "overconfidence": "Confidence - accuracy, %",
}


def short_name(metric: str) -> str:
    return SHORT_NAMES.get(metric, metric)


def dataset_name(dataset: str) -> str:
    return DATASET_NAMES.get(dataset, dataset)


def figure_title(dataset: str, model: str) -> str:
    """Figure title as in the thesis's figures 2-4: ``CIFAR-10, googlenet``."""
    return f"{dataset_name(dataset)}, {model}"


def format_number(value: float, decimals: int) -> str:
    """``format(value, f".{decimals}f")``, with "-0.00" printed as "0.00" and NaN as ""."""
    if value is None or math.isnan(value):
        return ""
    text = format(value, f".{decimals}f")
    if text.startswith("-") and not text.strip("-0."):
        text = text[1:]
    return text


def format_parameter(value: int | float) -> str:
    """A fitted parameter as the parameters tables print it: an integer as it is, a float with four significant
    digits, ``format(x, ".4g")`` (1.377, 0.01, 27.2, 2.22e-17: their scales vary), -0 as 0."""
    if isinstance(value, int):
        return str(value)
    return "0" if value == 0 else format(value, ".4g")


def caption_text(metric: str, language: str, bins: int = 15) -> str:
    """The caption with its light markup (``*emphasis*``, ``{l2}``) still in it."""
    spec = metric_spec(metric)
    return spec.caption[check_language(language)].replace("{bins}", str(bins))
