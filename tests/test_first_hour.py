"""What a new user meets first: the report language, the demo's reproduction report, a killed run's lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from calibrepro.config import load_schema, validate_config
from calibrepro.report.reproduction import write_reproduction_report
from workflow_helpers import ROOT, run_snakemake, snakemake_command, synthetic_logits, write_config

LOCK_TOOL = ROOT / "tools" / "snakemake_lock.py"


def test_english_by_default_and_russian_for_the_thesis():
    schema = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    assert validate_config({"models": {"d": {"m": {"source": "train"}}}}, schema)["report"]["language"] == "en"
    assert yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["report"]["language"] == "en"
    assert yaml.safe_load((ROOT / "config" / "thesis.yaml").read_text())["report"]["language"] == "ru"


@pytest.mark.parametrize("language, expected", [
    ("en", "This run's models (digits/logistic_regression, digits/mlp) have no published values in this file"),
    ("ru", "Для моделей этого запуска (digits/logistic_regression, digits/mlp) в этом файле нет"),
])
def test_a_report_without_published_values_says_how_to_add_them(tmp_path, language, expected):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text(
        "dataset,model,method,seed,metric,value\n"
        "digits,logistic_regression,uncalibrated,0,ece,0.05\ndigits,mlp,uncalibrated,0,ece,0.07\n"
    )
    out = tmp_path / "reproduction.md"
    write_reproduction_report(metrics, out, language=language)
    text = out.read_text(encoding="utf-8")
    assert expected in text
    assert "`report.published`" in text and "`dataset,model,method,metric,value`" in text


def _lock_tool(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LOCK_TOOL), *args, str(directory)], capture_output=True, text=True)


@pytest.mark.slow
def test_a_killed_run_leaves_a_stale_lock_that_the_tool_names_and_removes_safely(tmp_path):
    _, labels = synthetic_logits(tmp_path / "a.npz", n=30_000, k=10, seed=1)
    synthetic_logits(tmp_path / "b.npz", k=10, seed=2, labels=labels)
    config = write_config(tmp_path / "c.yaml", {"models": {"d": {
        "a": {"source": "logits", "path": str(tmp_path / "a.npz")},
        "b": {"source": "logits", "path": str(tmp_path / "b.npz")}}}})
    locks = tmp_path / ".snakemake" / "locks"
    command = snakemake_command(tmp_path, "results/c/metrics.csv", "--configfile", str(config), cores=1)
    for _ in range(5):  # kill Snakemake (and its jobs) while it holds the lock
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        # Snakemake writes its input lock first, then its output lock: only the latter stops a second run
        while run.poll() is None and not (locks.is_dir() and any(locks.glob("*.output.lock"))):
            time.sleep(0.01)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            break
    assert any(locks.glob("*.output.lock")), "Snakemake finished before it could be killed"

    again = run_snakemake(tmp_path, "--configfile", str(config))
    assert again.returncode != 0 and "cannot be locked" in again.stderr  # what the user would meet

    checked = _lock_tool(tmp_path)
    assert checked.returncode == 3
    assert "locked by a Snakemake run that was killed" in checked.stderr and "make unlock" in checked.stderr

    # a Snakemake still running in the directory: the lock is its own, never removed
    live = subprocess.Popen(["bash", "-c", "exec -a snakemake sleep 60"], cwd=tmp_path)
    try:
        time.sleep(0.2)
        assert _lock_tool(tmp_path).returncode == 0
        refused = _lock_tool(tmp_path, "--unlock")
        assert refused.returncode == 1 and f"process {live.pid}" in refused.stderr
        assert any(locks.glob("*.lock"))
    finally:
        live.kill()
        live.wait()

    assert _lock_tool(tmp_path, "--unlock").returncode == 0
    assert not locks.exists()
    rerun = run_snakemake(tmp_path, "results/c/metrics.csv", "--configfile", str(config))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (tmp_path / "results" / "c" / "metrics.csv").read_text().startswith("dataset,model,method,seed,metric,value\n")
