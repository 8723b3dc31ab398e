"""Time the whole appendix from cached logits through Snakemake, at the thesis's shapes.

Writes synthetic logits for 13 CIFAR-10-like (K=10, N=10,000), 15 CIFAR-100-like (K=100,
N=10,000) and 4 ImageNet-like (K=1000, N=50,000) models as `source: logits` models, then runs
the real workflow (local profile): once to `results/bench/metrics.csv` plus all tables (the
appendix: six columns, all metrics, one seed, and the bootstrap intervals and paired comparisons the
tables mark), then the conformal part (`conformal.csv` and its tables: 3 scores, 2 alphas, 10 repeats
for every model and calibrator), once more for the reliability diagrams, the conformal figures and the
reproduction report.

    .venv/bin/python benchmarks/bench_pipeline.py [--workdir DIR] [--cores 2] [--small] [--no-intervals]

`--small` uses 2 + 2 + 1 models for a quick check; `--no-intervals` leaves out the bootstrap;
`--no-conformal` the conformal part (`conformal.enabled: false`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from calibrepro.layout import Layout

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = Layout.named("bench")  # the config file is bench.yaml
SHAPES = {"cifar10": (13, 10, 10_000), "cifar100": (15, 100, 10_000), "imagenet": (4, 1000, 50_000)}


def write_logits(path: Path, k: int, n: int, seed: int) -> None:
    """Overconfident synthetic logits: a correct-class margin drawn per sample, scaled up."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % k
    logits = rng.normal(size=(n, k)).astype(np.float32)
    hit = rng.random(n) < 0.8
    target = np.where(hit, labels, rng.integers(0, k, size=n))
    logits[np.arange(n), target] += rng.gamma(4.0, 1.0, size=n).astype(np.float32)
    np.savez(path, logits=logits * 2.5, labels=labels.astype(np.int64))


def make_config(workdir: Path, small: bool, intervals: bool, conformal: bool = True) -> Path:
    models = {}
    for dataset, (count, k, n) in SHAPES.items():
        count = min(count, 1 if k == 1000 else 2) if small else count
        models[dataset] = {}
        for index in range(count):
            path = workdir / "logits" / dataset / f"model{index:02d}.npz"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                write_logits(path, k, n, seed=1000 * k + index)
            models[dataset][f"model{index:02d}"] = {"source": "logits", "path": str(path)}
    config = workdir / "bench.yaml"
    settings = {"models": models, **({} if intervals else {"uncertainty": {"enabled": False}}),
                **({} if conformal else {"conformal": {"enabled": False}})}
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config


CONFIGURATIONS = {
    "profile": ["--profile", str(ROOT / "workflow" / "profiles" / "default")],
    "plain": [],
    "no-threads": ["--workflow-profile", "none"],
}
#: what the timed runs start from: the cached logits and their requests
KEPT = {"logits", "requests"}
TABLES = [
    LAYOUT.table(metric, ext)
    for metric in ["accuracy", "brier", "ece", "mce", "nll", "classwise_ece", "ece_equal_mass", "mce_equal_mass", "ece_l2"]
    for ext in ("md", "tex")
]
CONFORMAL = [LAYOUT.conformal, LAYOUT.table("conformal", "md"), LAYOUT.table("conformal", "tex")]


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``; the process times of
    Snakemake's worker processes are not reported to this process, their parent is a fork server)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def snakemake(workdir: Path, config: Path, cores: int, flags: list[str], *targets: str) -> tuple[float, float]:
    """Run Snakemake; return its wall time and the machine's busy CPU seconds meanwhile (on a quiet
    machine: the CPU time of Snakemake and all its jobs)."""
    command = [
        sys.executable, "-m", "snakemake", *targets,
        "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
        *flags, "--cores", str(cores), "--configfile", str(config), "--quiet", "all",
    ]
    busy = busy_cpu_seconds()
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start, busy_cpu_seconds() - busy


def clear_after_logits(workdir: Path) -> None:
    """Delete everything the workflow made after the logits (and Snakemake's records of it)."""
    for path in (workdir / LAYOUT.results).iterdir():
        if path.name not in KEPT:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    shutil.rmtree(workdir / LAYOUT.reports, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None, help="keeps the synthetic logits between runs")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--plain", action="store_true", help="also time plain `snakemake --cores N`")
    parser.add_argument("--no-threads", action="store_true", help="also time it without profiles/default")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (best is reported)")
    parser.add_argument("--no-intervals", action="store_true",
                        help="without the bootstrap intervals and paired comparisons (uncertainty.enabled: false)")
    parser.add_argument("--no-conformal", action="store_true", help="without the conformal part (conformal.enabled: "
                        "false)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="calibrepro-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    config = make_config(workdir, args.small, intervals=not args.no_intervals, conformal=not args.no_conformal)
    models = yaml.safe_load(config.read_text())["models"]
    count = sum(len(names) for names in models.values())
    # Caching the logits (copying the .npz files) is not part of the appendix's work.
    logits = [LAYOUT.logits(d, m) for d, names in models.items() for m in names]
    snakemake(workdir, config, args.cores, CONFIGURATIONS["profile"], *logits)
    load = os.getloadavg()
    names = ["profile"] + ["plain"] * args.plain + ["no-threads"] * args.no_threads
    appendix: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    conformal: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for round_ in range(args.repeat):
        # alternating, and in reverse order every other round, so that a change of the machine's load
        # hits every column alike
        for name in names if round_ % 2 == 0 else names[::-1]:
            clear_after_logits(workdir)
            appendix[name].append(snakemake(workdir, config, args.cores, CONFIGURATIONS[name], LAYOUT.metrics, *TABLES))
            if not args.no_conformal:
                conformal[name].append(snakemake(workdir, config, args.cores, CONFIGURATIONS[name], *CONFORMAL))
            figures[name].append(snakemake(workdir, config, args.cores, CONFIGURATIONS[name]))
    print(f"models: {count}; cores: {args.cores}; workdir: {workdir}; best of {args.repeat}; "
          f"load average before: {load[0]:.1f}, after: {os.getloadavg()[0]:.1f}")
    print(f"{'seconds, wall (CPU)':<56}" + "".join(f"{name:>16}" for name in names))
    work = "6 calibrators, all metrics" + ("" if args.no_intervals else ", B = 1000 intervals")
    rows = [(f"appendix ({work}, tables)", appendix)]
    if not args.no_conformal:
        rows.append(("then the conformal part (3 scores, 2 alphas, 10 repeats)", conformal))
    for label, times in rows + [("then reliability diagrams and reproduction report", figures)]:
        print(f"{label:<56}" + "".join(f"{'%.1f (%.1f)' % min(times[name]):>16}" for name in names))
    if args.repeat > 1:
        print(f"{'appendix, median wall (CPU)':<56}"
              + "".join(f"{'%.1f (%.1f)' % sorted(appendix[name])[len(appendix[name]) // 2]:>16}" for name in names))
    if not args.no_conformal:
        for name in names:
            share = min(conformal[name])[0] / min(appendix[name])[0]
            print(f"conformal part / appendix, wall, {name}: {share:.2f} (issue 39's target: at most 0.25)")
    fastest = min(names, key=lambda name: min(appendix[name]))
    for name in names:
        ratio = min(appendix[name])[0] / min(appendix[fastest])[0]
        print(f"appendix wall time, {name} / fastest ({fastest}): {ratio:.2f} (best of {args.repeat})")


if __name__ == "__main__":
    main()
