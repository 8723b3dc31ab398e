"""Running the real Snakemake workflow from tests, in a temporary working directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]


def snakemake_command(workdir: Path, *args: str, profiles=(), cores: int | None = 2) -> list[str]:
    """The command line of the project's Snakefile run in ``workdir``: the one way tests start Snakemake.

    Without ``profiles`` this is the card's plain ``snakemake --cores N`` (Snakemake still reads the
    top-level profiles/default by itself); ``cores=None`` leaves the cores to the profiles (Slurm).
    """
    return [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(ROOT / "Snakefile"),
        "--directory", str(workdir),
        *profiles,
        *(["--cores", str(cores)] if cores is not None else []),
        *args,
    ]


def run_snakemake(workdir: Path, *args: str, profile: str | None = None, timeout: int = 900):
    """Run the project's Snakefile in ``workdir``; return the CompletedProcess (fails the test on a time-out).

    ``profile`` names one under workflow/profiles/ to add to the plain command.
    """
    profiles = ["--profile", str(ROOT / "workflow" / "profiles" / profile)] if profile else []
    return run_in_group(snakemake_command(workdir, *args, profiles=profiles), timeout)


def run_in_group(command: list[str], timeout: int):
    """Run ``command`` in a process group of its own; return the CompletedProcess, or fail the test after
    ``timeout`` seconds with the group killed (Snakemake and the jobs it started)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"{command[0]} ran past {timeout} s; last output:\n{(stdout + stderr)[-3000:]}") from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def overconfident(n, k, seed=0, signal=4.0, scale=2.0):
    """Overconfident synthetic logits (float32) and labels, like a trained network's (in memory)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = (rng.standard_normal((n, k)) * scale).astype(np.float32)
    logits[np.arange(n), labels] += np.float32(signal)
    return logits, labels


def synthetic_logits(path: Path, n: int = 400, k: int = 4, seed: int = 0, labels=None, sharpness: float = 3.0):
    """Write an overconfident-ish synthetic logits archive; return (logits, labels)."""
    rng = np.random.default_rng(seed)
    if labels is None:
        labels = rng.integers(0, k, size=n)
    logits = rng.normal(size=(len(labels), k)) + sharpness * np.eye(k)[labels] * rng.uniform(0.2, 1.5, size=(len(labels), 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, logits=logits.astype(np.float32), labels=np.asarray(labels, dtype=np.int64))
    return logits.astype(np.float32), np.asarray(labels, dtype=np.int64)


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
