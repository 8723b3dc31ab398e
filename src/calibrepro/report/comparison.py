"""Regenerated values against the published ones, cell by cell: the rules of the reproduction report.

For every cell present in both the published file and ``metrics.csv``:

* **identical**: our seed-``seed`` value (seed 0 = the thesis's own split), in printed units
  (x100 for percent metrics) and formatted with as many decimals as the published string
  (``format(x, ".3f")``, see :mod:`calibrepro.report.labels`), equals the published string.
* **difference**: our printed value minus the published value, in printed units (exact decimal
  subtraction of the two printed strings, so it is 0 exactly when the cell is identical).
* **within split noise** (only where at least two seeds are present for the cell): with ``mean``
  and ``std`` (sample std, ddof=1) of our unrounded values over all seeds present, seed 0
  included, in printed units, the published value ``p`` lies within the noise when
  ``|p - mean| <= noise_sigmas * std + u/2`` where ``u`` is one unit of the last printed digit
  (the published value is itself rounded by up to ``u/2``); ``noise_sigmas`` defaults to 2.
* **inside our interval** (only with an intervals file, ``results/<name>/intervals.csv``): the published
  value lies in our bootstrap interval of the seed-``seed`` cell, of the method ``intervals.csv``
  names for the metric (``uncertainty.interval``; test-half resampling, calibrators fixed;
  :mod:`calibrepro.bootstrap`), widened by ``u/2`` on both sides for the
  rounding of the published number: ``low - u/2 <= p <= high + u/2`` in printed units.
* **bold**: whether the methods our seed-``seed`` values make bold in a row (same rule as the
  tables) are the ones printed bold; counted over rows where every published method was regenerated.

:mod:`calibrepro.report.reproduction` writes the comparison as Markdown; the size study's table
applies :func:`within_noise` to the published sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pandas as pd

from calibrepro.report.labels import format_number, metric_spec
from calibrepro.report.metrics_file import Metrics, summarise, table_cells
from calibrepro.report.published import decimals_of
from calibrepro.report.uncertainty_files import Intervals


@dataclass
class Comparison:
    """One published cell next to its regenerated value."""

    table: str
    dataset: str
    model: str
    method: str
    metric: str
    published: str
    published_bold: bool
    decimals: int
    #: our seed-``seed`` value formatted like the published one (None: no value at that seed)
    ours: str | None
    ours_bold: bool | None
    identical: bool | None
    #: ours - published in printed units, formatted (None when ``ours`` is None)
    difference: str | None
    #: mean and sample std over seeds in printed units, and the number of seeds
    noise_mean: float
    noise_std: float
    noise_n: int
    #: None when fewer than two seeds
    within_noise: bool | None
    #: our bootstrap interval at ``seed`` in printed units, and whether the published value is inside
    interval: tuple[float, float] | None = None
    inside_interval: bool | None = None

    @property
    def missed(self) -> bool:
        return self.identical is False or (self.identical is None and self.within_noise is False)


def _difference(ours: str, published: str, decimals: int) -> str:
    delta = Decimal(ours) - Decimal(published)
    if delta == 0:
        return format_number(0.0, decimals)
    return f"{delta:+.{decimals}f}"


def within_noise(published: str, mean: float, std: float, noise_sigmas: float = 2.0) -> bool:
    """The split-noise rule (module docstring): ``|p - mean| <= noise_sigmas * std + u/2``, all in
    printed units, ``u`` one unit of the published value's last printed digit."""
    tolerance = noise_sigmas * std + 0.5 * 10.0 ** (-decimals_of(published))
    # the 1e-12 relative slack keeps a value exactly on the boundary inside despite float noise
    return abs(float(published) - mean) <= tolerance * (1 + 1e-12)


def compare(
    metrics: Metrics,
    published: pd.DataFrame,
    *,
    seed: int = 0,
    noise_sigmas: float = 2.0,
    intervals: Intervals | None = None,
) -> tuple[list[Comparison], pd.DataFrame, list[tuple[str, str, str, str]]]:
    """Compare; returns the comparisons (published order), the published cells without any
    regenerated value, and our cells (of published metrics) without a published value."""
    bold_cache: dict[str, dict] = {}

    def ours_bold(dataset, model, method, metric):
        if metric not in bold_cache:
            try:
                bold_cache[metric] = table_cells(metrics, metric, [seed])[3]
            except ValueError:
                bold_cache[metric] = {}
        cell = bold_cache[metric].get((dataset, model, method))
        return None if cell is None or cell.n == 0 else cell.bold

    comparisons: list[Comparison] = []
    unmatched = []
    for index, row in enumerate(published.itertuples(index=False)):
        key = (row.dataset, row.model, row.method, row.metric)
        by_seed = metrics.values.get(key, {})
        if not by_seed:
            unmatched.append(index)
            continue
        spec = metric_spec(row.metric)
        decimals = decimals_of(row.value)
        if seed in by_seed:
            ours = format_number(spec.display(by_seed[seed]), decimals)
            identical = ours == format_number(float(row.value), decimals)
            difference = _difference(ours, row.value, decimals)
        else:
            ours = difference = None
            identical = None
        mean, std, n = summarise(by_seed)
        mean, std = spec.display(mean), spec.display(std)
        within = within_noise(row.value, mean, std, noise_sigmas) if n >= 2 else None
        interval = inside = None
        bounds = None if intervals is None else intervals.cells.get(key, {}).get(seed)
        if bounds is not None:
            interval = (spec.display(bounds[1]), spec.display(bounds[2]))
            half_unit = 0.5 * 10.0 ** (-decimals)
            inside = interval[0] - half_unit <= float(row.value) <= interval[1] + half_unit
        comparisons.append(
            Comparison(
                table=str(row.table), dataset=row.dataset, model=row.model, method=row.method,
                metric=row.metric, published=row.value, published_bold=bool(row.bold), decimals=decimals,
                ours=ours, ours_bold=ours_bold(*key) if seed in by_seed else None, identical=identical,
                difference=difference, noise_mean=mean, noise_std=std, noise_n=n, within_noise=within,
                interval=interval, inside_interval=inside,
            )
        )
    published_keys = set(zip(published["dataset"], published["model"], published["method"], published["metric"]))
    published_metrics = set(published["metric"])
    extra = [
        key for key, by_seed in metrics.values.items()
        if key[3] in published_metrics and by_seed and key not in published_keys
    ]
    return comparisons, published.iloc[unmatched], extra
