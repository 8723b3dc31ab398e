"""Where a run's files go: the one table of result and report paths.

The rule files, ``workflow/rules/common.smk`` and the library take every path of a run from a
:class:`Layout`, so moving the outputs (e.g. into a folder per configuration) is a change here
only. Rules pass wildcard placeholders as arguments (``layout.logits("{dataset}", "{model}")``);
the library passes values. Adding an output: add a method here, use it in the rule's ``output:``,
and list the path among the run's targets (``targets()`` in common.smk), which is also the list of
what the run keeps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Layout:
    """The folders of one run: ``results`` (data, intermediate files, logs) and ``reports`` (tables, figures)."""

    results: str = "results"
    reports: str = "reports"

    @classmethod
    def named(cls, name: str) -> "Layout":
        """The folders of the configuration called ``name``: ``results/<name>/`` and ``reports/<name>/``."""
        return cls(f"results/{name}", f"reports/{name}")

    # --- results: cached logits, splits, fitted calibrators, metrics -----------------------------

    def logits(self, dataset: str, model: str) -> str:
        """A model's logits archive on its evaluation set (``calibrepro.io``)."""
        return f"{self.results}/logits/{dataset}/{model}.npz"

    def logits_request(self, dataset: str, model: str) -> str:
        """The logits job's request file (``calibrepro.zoo.LogitsRequest`` as JSON)."""
        return f"{self.results}/requests/logits/{dataset}/{model}.json"

    def split(self, dataset: str, seed) -> str:
        """The calibration/test split of a data set for one seed (``calibrepro.splits``)."""
        return f"{self.results}/splits/{dataset}/seed{seed}.npz"

    def calibrator(self, dataset: str, model: str, method: str, seed) -> str:
        """One fitted calibrator (``calibrepro.calibrators``)."""
        return f"{self.results}/calibrators/{dataset}/{model}/{method}/seed{seed}.json"

    def evaluation(self, dataset: str, model: str, seed) -> str:
        """One model's rows of ``metrics.csv`` for one seed."""
        return f"{self.results}/evaluations/{dataset}/{model}/seed{seed}.csv"

    def reliability(self, dataset: str, model: str, seed) -> str:
        """One model's reliability-diagram bins for one seed (``calibrepro.reliability``)."""
        return f"{self.results}/reliability/{dataset}/{model}/seed{seed}.json"

    @property
    def metrics(self) -> str:
        """Every model's metrics, tidy (``calibrepro.report.metrics_file``)."""
        return f"{self.results}/metrics.csv"

    def convergence_part(self, dataset: str, model: str, seed) -> str:
        """How the fits behind one model's rows of ``metrics.csv`` ended, for one seed."""
        return f"{self.results}/convergence/{dataset}/{model}/seed{seed}.csv"

    @property
    def convergence(self) -> str:
        """How every calibrator's fit ended, tidy (``calibrepro.report.convergence_file``)."""
        return f"{self.results}/convergence.csv"

    @property
    def parameters(self) -> str:
        """Every calibrator's fitted numbers and how its fit ended, tidy (``calibrepro.report.parameters_file``)."""
        return f"{self.results}/parameters.csv"

    def probabilities(self, dataset: str, model: str, method: str, seed) -> str:
        """One calibrator's probabilities on the test half (``calibrepro apply``'s file; asked for, or
        ``report.export_probabilities``)."""
        return f"{self.results}/probabilities/{dataset}/{model}/{method}/seed{seed}.npz"

    # --- results: uncertainty and the calibration-set-size study ---------------------------------

    def bootstrap(self, dataset: str, model: str, seed, kind: str) -> str:
        """One model's bootstrap file of ``kind`` ("intervals" or "comparisons") for one seed."""
        return f"{self.results}/bootstrap/{dataset}/{model}/seed{seed}.{kind}.csv"

    @property
    def intervals(self) -> str:
        return f"{self.results}/intervals.csv"

    @property
    def comparisons(self) -> str:
        return f"{self.results}/comparisons.csv"

    def size_study_part(self, dataset: str, model: str) -> str:
        """One model's size-study rows."""
        return f"{self.results}/size_study/{dataset}/{model}.csv"

    @property
    def size_study(self) -> str:
        return f"{self.results}/size_study.csv"

    # --- results: conformal prediction sets ------------------------------------------------------

    def conformal_splits(self, dataset: str, seed) -> str:
        """The repeated conformal splits of a data set's test half (``calibrepro.conformal.splits``)."""
        return f"{self.results}/conformal_splits/{dataset}/seed{seed}.npz"

    def conformal_part(self, dataset: str, model: str, seed) -> str:
        """One model's rows of ``conformal.csv`` (``calibrepro.conformal.results``)."""
        return f"{self.results}/conformal/{dataset}/{model}/seed{seed}.csv"

    def conformal_sweep(self, dataset: str, model: str) -> str:
        """One model's mean set size and CovGap against the temperature (its figure's numbers, first split seed)."""
        return f"{self.results}/conformal/{dataset}/{model}/sweep.csv"

    @property
    def conformal(self) -> str:
        """Every model's and calibrator's prediction-set metrics, tidy (``calibrepro.conformal.results``)."""
        return f"{self.results}/conformal.csv"

    def conformal_figure(self, dataset: str, model: str, extension: str) -> str:
        """One model's mean set size and CovGap against the temperature (``png`` or ``pdf``)."""
        return f"{self.figures}/conformal/{dataset}/{model}.{extension}"

    # --- results: calibration over training ------------------------------------------------------

    @property
    def training_curves(self) -> str:
        """Every trained network's curves (``curves: {every: N}``), tidy (``calibrepro.report.curves_file``)."""
        return f"{self.results}/training_curves.csv"

    # --- results: logs ---------------------------------------------------------------------------

    @property
    def logs(self) -> str:
        return f"{self.results}/logs"

    def log(self, rule: str, what: str = "") -> str:
        """The log of one job of ``rule``: ``logs/<rule>/<what>.log``, or ``logs/<rule>.log`` without ``what``."""
        return f"{self.logs}/{rule}/{what}.log" if what else f"{self.logs}/{rule}.log"

    # --- reports: tables, figures, the reproduction report ---------------------------------------

    @property
    def tables(self) -> str:
        return f"{self.reports}/tables"

    def table(self, name: str, extension: str) -> str:
        """A table (a metric's, ``ranks``, ``size_study``) as ``md`` or ``tex``."""
        return f"{self.tables}/{name}.{extension}"

    @property
    def figures(self) -> str:
        return f"{self.reports}/figures"

    def reliability_figure(self, dataset: str, model: str, extension: str) -> str:
        """One model's reliability diagram (``png`` or ``pdf``)."""
        return f"{self.figures}/reliability/{dataset}/{model}.{extension}"

    def named_figure(self, name: str, extension: str) -> str:
        """A figure named in the config's ``report.figures``."""
        return f"{self.figures}/{name}.{extension}"

    def dataset_figure(self, kind: str, dataset: str, extension: str) -> str:
        """A per-data-set figure of ``kind`` ("cd", "size_study")."""
        return f"{self.figures}/{kind}/{dataset}.{extension}"

    @property
    def curves_findings(self) -> str:
        """The findings of calibration over training, the reproduction report's section (``report.curve_claims``)."""
        return f"{self.tables}/curves_findings.md"

    @property
    def reproduction(self) -> str:
        """The comparison with the published values (``calibrepro.report.reproduction``)."""
        return f"{self.reports}/reproduction.md"

    # --- regression (seed 002, second half): under results/<name>/regression/, reports/<name>/regression/ ---

    def regression_data(self, dataset: str) -> str:
        """A regression data set's arrays as the models read them (``calibrepro.regression.splits``)."""
        return f"{self.results}/regression/data/{dataset}.npz"

    def regression_split(self, dataset: str, split) -> str:
        """Train/calibration/test indices of one split of a regression data set."""
        return f"{self.results}/regression/splits/{dataset}/split{split}.npz"

    def regression_predictions(self, dataset: str, model: str, split) -> str:
        """A regressor's predictive distributions on one split (``calibrepro.regression.predictions``)."""
        return f"{self.results}/regression/predictions/{dataset}/{model}/split{split}.npz"

    def regression_evaluation(self, dataset: str, model: str, split) -> str:
        """One regressor's rows of the regression ``metrics.csv`` for one split."""
        return f"{self.results}/regression/evaluations/{dataset}/{model}/split{split}.csv"

    def regression_curves(self, dataset: str, model: str, split) -> str:
        """Reliability curves, per-output RMSE and std, fitted recalibrators of one split (JSON)."""
        return f"{self.results}/regression/curves/{dataset}/{model}/split{split}.json"

    def regression_replicates(self, dataset: str, model: str, split) -> str:
        """Every metric of every recalibrator on the bootstrap resamples of one split's test part."""
        return f"{self.results}/regression/bootstrap/{dataset}/{model}/split{split}.npz"

    @property
    def regression_metrics(self) -> str:
        """Every regressor's metrics, tidy: ``dataset,model,method,split,metric,value``."""
        return f"{self.results}/regression/metrics.csv"

    @property
    def regression_conformal(self) -> str:
        """Split-conformal intervals beside each recalibrator's, tidy (``calibrepro.regression.conformal``)."""
        return f"{self.results}/regression/conformal.csv"

    @property
    def regression_parameters(self) -> str:
        """Every recalibrator's fitted numbers, tidy (``calibrepro.report.parameters_file``)."""
        return f"{self.results}/regression/parameters.csv"

    def regression_table(self, name: str, extension: str) -> str:
        return f"{self.reports}/regression/tables/{name}.{extension}"

    def regression_figure(self, kind: str, dataset: str, model: str, extension: str) -> str:
        """A regression figure of ``kind`` ("reliability", "horizon") of one data set and model."""
        return f"{self.reports}/regression/figures/{kind}/{dataset}/{model}.{extension}"

    @property
    def regression_reproduction(self) -> str:
        return f"{self.reports}/regression/reproduction.md"

    # --- what an earlier run of the same configuration left behind -----------------------------

    def stale(self, targets: Iterable[str]) -> list[str]:
        """Outputs on disk that this run does not produce: every file under ``reports`` and the top-level
        files of ``results`` (the gathered tables) that are not among ``targets``.

        Cached intermediate files (logits, splits, fitted calibrators) stay: they are not reported and
        cost time to make again.
        """
        keep = {os.path.normpath(path) for path in targets}
        found = [os.path.join(root, name) for root, _, names in os.walk(self.reports) for name in names]
        if os.path.isdir(self.results):
            found += [entry.path for entry in os.scandir(self.results) if entry.is_file()]
        return sorted(path for path in found if os.path.normpath(path) not in keep)
