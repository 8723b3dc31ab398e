"""config/blog.yaml's regression part end to end on the real UCI files of ../shared/realdata/uci (issue 31).

The files reach the pipeline as an air-gapped user's would: ``downloads.mirrors`` points the pinned URLs at
local copies, which the download step checks against the pins (wine, crime) or against the sha256 the user
gives for the energy file (``regression.energy.sha256``: UCI publishes none, and the shared copy holds two
of its columns).  The data sets and models are blog.yaml's; fewer splits and bootstrap resamples keep the
run to minutes (the full run is timed in benchmarks/README.md).  Skipped without ../shared/realdata/uci.
"""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from calibrepro.regression.data import ENERGY_URL, WINE_URL
from servers import UCI, realdata_checksums
from workflow_helpers import ROOT, run_snakemake, write_config

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not UCI.is_dir(), reason="needs ../shared/realdata/uci")]

MIRRORS = {
    WINE_URL: f"{UCI}/wine-quality-red/",
    "https://archive.ics.uci.edu/ml/machine-learning-databases/communities/": f"{UCI}/communities/",
    ENERGY_URL: f"{UCI}/energy/appliances.csv",
}


def blog_regression(*datasets: str, **changes) -> dict:
    """A configuration of blog.yaml's regression entries ``datasets``, updated by ``changes`` (per data set)."""
    blog = yaml.safe_load((ROOT / "config" / "blog.yaml").read_text())
    entries = {name: {**blog["regression"][name], **changes.get(name, {})} for name in datasets}
    return {"name": "blog", "regression": entries, "downloads": {"mirrors": MIRRORS},
            "uncertainty": {"bootstrap": 100}}


def verdicts(report: str, *datasets: str) -> list[str]:
    """The verdict column of the report's findings about ``datasets``."""
    claims = report.split("## The seed's findings, checked")[1]
    return [line.rsplit("|", 2)[1].strip() for line in claims.splitlines() if line.startswith(
        tuple(f"| {d} |" for d in datasets))]


def check_finite_metrics(results):
    metrics = pd.read_csv(results / "regression" / "metrics.csv")
    assert len(metrics) and metrics.value.notna().all() and metrics.value.abs().lt(float("inf")).all()
    return metrics


def test_the_blog_s_wine_and_crime_tables_with_the_seed_s_model_and_its_findings(tmp_path):
    config = write_config(tmp_path / "blog.yaml", blog_regression("wine", "crime", wine={"splits": 2},
                                                                  crime={"splits": 2}))
    result = run_snakemake(tmp_path, "regression", "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = check_finite_metrics(tmp_path / "results" / "blog")
    assert {"mc_dropout", "aleatoric", "mc_dropout_fitted"} <= set(metrics.model)
    report = (tmp_path / "reports" / "blog" / "regression" / "reproduction.md").read_text()
    published, claims = report.split("## The seed's findings, checked")
    rows = [line for line in published.splitlines() if line.startswith(("| wine |", "| crime |"))]
    assert len(rows) == 20 and " of 20 published values lie inside our interval." in published
    found = verdicts(report, "wine", "crime")
    assert len(found) == 12 and all(v == "holds" or v.startswith("does not hold (") for v in found)
    overconfident = [line for line in claims.splitlines() if "MC-Dropout is overconfident" in line]
    assert [line.endswith("| holds |") for line in overconfident] == [True, True]  # coverage 0.27 / 0.39
    assert (tmp_path / "reports/blog/regression/figures/reliability/crime/mc_dropout.png").stat().st_size > 0
    log = (tmp_path / "results/blog/logs/download/regression/communities/communities.data.log").read_text()
    assert "ok: results/downloads/regression/communities/communities.data (sha256:" in log
    assert not (tmp_path / "results" / "blog" / "metrics.csv").exists()  # the classification part did not run


def test_the_blog_s_energy_part_on_the_shared_appliances_series(tmp_path):
    sums = realdata_checksums()
    models = {name: options for name, options in yaml.safe_load((ROOT / "config" / "blog.yaml").read_text())[
        "regression"]["energy"]["models"].items() if name != "mc_dropout_fitted"}  # the seed's three
    config = write_config(tmp_path / "blog.yaml", blog_regression(
        "energy", energy={"sha256": sums["uci/energy/appliances.csv"], "models": models}))
    result = run_snakemake(tmp_path, "regression", "--configfile", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    check_finite_metrics(tmp_path / "results" / "blog")
    log = (tmp_path / "results/blog/logs/download/regression/energy/energydata_complete.csv.log").read_text()
    assert f"(sha256:{sums['uci/energy/appliances.csv']})" in log  # the user's pin, verified
    figures = tmp_path / "reports" / "blog" / "regression" / "figures"
    assert sorted(p.stem for p in (figures / "horizon" / "energy").glob("*.png")) == sorted(models)
    report = (tmp_path / "reports" / "blog" / "regression" / "reproduction.md").read_text()
    found = verdicts(report, "energy")
    assert len(found) == 5 and all(v == "holds" or v.startswith("does not hold (") for v in found)
    assert "Pearson r ≥ 0.7" in report and "evidential r = " in report
