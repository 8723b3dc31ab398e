"""Time the seed's whole regression half through Snakemake, and one model's recalibration + metrics.

Runs the real workflow on the `regression:` part of config/blog.yaml (wine and crime: the seed's
MC-Dropout, the aleatoric variant, the fitted-noise MC-Dropout, the ensemble and the evidential
network, 5 splits; the energy series; every recalibrator, metric, table and figure, the
reproduction report) in a fresh working directory, with `--cores N` (2 by default), and reports the
wall time, the CPU seconds of Snakemake and every process it started (its worker processes
included: their parent is a fork server, so the operating system never reports their times to this
process; they are sampled every 0.2 s, a lower bound within 0.2 s per process), the load average
before and after, and the peak resident memory of the largest process.  The data sets are
downloaded on the first run into the working directory's `results/downloads` (or taken from
`--downloads DIR`); `--local-copies FILE` merges FILE into the configuration, e.g. the
`downloads.mirrors` to local copies of an air-gapped machine (docs/regression.md).  Then it times,
in this process, the recalibration of one MC-Dropout model's predictions with every recalibrator
and all metrics.

    .venv/bin/python benchmarks/bench_regression.py [--cores 2] [--workdir DIR] [--downloads DIR]
        [--local-copies FILE.yaml] [--config config/blog.yaml] [--only-recalibration PREDICTIONS.npz]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def regression_config(source: Path, workdir: Path, downloads: Path | None, local_copies: Path | None) -> Path:
    """The `regression:` part of ``source`` alone (a regression-only configuration), with ``local_copies``
    merged into it (one level deep: its ``downloads`` keys and its data sets' keys)."""
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    only = {"regression": config["regression"], "downloads": {}}
    if downloads is not None:
        only["downloads"]["dir"] = str(downloads)
    extra = yaml.safe_load(local_copies.read_text(encoding="utf-8")) if local_copies else {}
    only["downloads"].update(extra.get("downloads", {}))
    for name, entry in extra.get("regression", {}).items():
        only["regression"][name] = {**only["regression"][name], **entry}
    path = workdir / "regression.yaml"
    path.write_text(yaml.safe_dump(only, sort_keys=False), encoding="utf-8")
    return path


def run_workflow(workdir: Path, config: Path, cores: int) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (Snakemake and every process it started, sampled) and peak RSS (MiB)."""
    import psutil  # Snakemake's own dependency

    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--cores", str(cores), "--configfile", str(config)]
    start, cpu = time.perf_counter(), {}
    with open(workdir / "snakemake.out", "w+", encoding="utf-8") as log:  # a pipe read only at the end fills up
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        root = psutil.Process(process.pid)
        while process.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                for member in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                        times = member.cpu_times()
                        cpu[member.pid] = times.user + times.system
            time.sleep(0.2)
        seconds = time.perf_counter() - start
        log.seek(0)
        output = log.read()
    if process.returncode != 0:
        sys.exit(f"the workflow failed:\n{output[-4000:]}")
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kB on Linux
    return seconds, sum(cpu.values()), peak_mib


def time_recalibration(predictions: Path, repeat: int = 3) -> tuple[float, float]:
    """Best of ``repeat`` (wall and process CPU seconds): every recalibrator fitted on the calibration part,
    every metric on the test part."""
    from calibrepro.regression.distributions import predictive_from_arrays
    from calibrepro.regression.metrics import REGRESSION_METRICS, sample_terms
    from calibrepro.regression.predictions import load_predictions
    from calibrepro.regression.recalibration import RECALIBRATORS, make_recalibrator

    data = load_predictions(predictions)
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        test = predictive_from_arrays(data.family, data.test.params)
        calibration = predictive_from_arrays(data.family, data.calibration.params)
        for method in RECALIBRATORS:
            recalibrator = make_recalibrator(method).fit(calibration, data.calibration.y)
            terms = sample_terms(recalibrator.transform(test), data.test.y)
            for spec in REGRESSION_METRICS.values():
                spec.value(terms)
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - cpu)
    return best, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workdir", type=Path, help="working directory (default: a new temporary one, removed after)")
    parser.add_argument("--downloads", type=Path, help="folder holding the downloaded data sets (default: in the workdir)")
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "blog.yaml")
    parser.add_argument("--local-copies", type=Path, metavar="YAML", help="merged into the configuration "
                        "(e.g. downloads.mirrors to local copies)")
    parser.add_argument("--only-recalibration", type=Path, metavar="NPZ", help="only time recalibration + metrics of NPZ")
    args = parser.parse_args()
    if args.only_recalibration:
        wall, cpu = time_recalibration(args.only_recalibration)
        print(f"recalibration + all metrics of {args.only_recalibration}: {wall:.3f} s wall, {cpu:.3f} s CPU")
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_regression_"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        config = regression_config(args.config, workdir, args.downloads, args.local_copies)
        load = os.getloadavg()
        seconds, cpu, peak = run_workflow(workdir, config, args.cores)
        print(f"regression half of {args.config.name} on {args.cores} cores: {seconds:.1f} s wall, {cpu:.1f} CPU s, "
              f"peak RSS {peak:.0f} MiB; load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
        first = sorted((workdir / "results").glob("*/regression/predictions/*/mc_dropout/split0.npz"))
        for path in first:
            wall, cpu = time_recalibration(path)
            print(f"recalibration + all metrics of {path.relative_to(workdir)}: {wall:.3f} s wall, {cpu:.3f} s CPU")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
