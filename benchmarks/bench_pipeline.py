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

`--appendix` times what the README's plain run does instead (issue 44): `snakemake --cores 2` from the
users' .npz files (the logits jobs included) to `tables/ece.md` and `tables/nll.md`, without intervals,
from empty results every time. It prints the wall time, each rule's job time (the sum over its jobs of
the time from Snakemake announcing a job to its "Finished jobid" line, both stamped as the lines
arrive) and the compute floor: the same splits, fits and metrics by the library's steps in one
process, one model after the other. `--checkout DIR` (repeatable) times another checkout of the
project too (its Snakefile, its src/ first on PYTHONPATH), in turns with this one, and the digests of
every run's tables and CSVs are compared:

    git worktree add --detach /tmp/wt-b589464 b589464
    .venv/bin/python benchmarks/bench_pipeline.py --appendix --checkout /tmp/wt-b589464 --repeat 3
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
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


#: the README's plain run of the appendix (--appendix): two of its tables, which need every fit and metric
APPENDIX_TARGETS = [LAYOUT.table("ece", "md"), LAYOUT.table("nll", "md")]
#: a job's start (the rule's line, then its jobid) and its end in Snakemake's output
RULE_LINE = re.compile(r"(?:local)?rule (\w+):$")
JOBID_LINE = re.compile(r"\s+jobid: (\d+)$")
FINISHED_LINE = re.compile(r"Finished jobid: (\d+) ")


def timed_snakemake(command: list[str], cwd: Path, env: dict) -> tuple[float, dict[str, list[float]]]:
    """Run Snakemake; return its wall time and rule -> each job's seconds, from the job's announcement to
    its "Finished jobid" line, both stamped here as Snakemake writes them."""
    started: dict[str, tuple[str, float]] = {}
    jobs: dict[str, list[float]] = defaultdict(list)
    rule, tail = None, []
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as process:
        for line in process.stdout:
            now = time.perf_counter()
            tail = [*tail[-30:], line]
            if match := RULE_LINE.match(line):
                rule = match[1]
            elif (match := JOBID_LINE.match(line)) and rule:
                started[match[1]], rule = (rule, now), None
            elif (match := FINISHED_LINE.match(line)) and match[1] in started:
                name, begun = started.pop(match[1])
                jobs[name].append(now - begun)
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}:\n{''.join(tail)}")
    return time.perf_counter() - start, jobs


def digests(run: Path) -> dict[str, str]:
    """sha256 of every CSV and table a run wrote, by path under the run's folder."""
    files = sorted([*(run / LAYOUT.results).rglob("*.csv"), *(run / LAYOUT.reports).rglob("*.md")])
    return {str(path.relative_to(run)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def checkout_name(root: Path) -> str:
    """The checkout's commit, marked + where its files differ from it."""
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return commit + ("+" if changed else "")


def compute_floor(workdir: Path, root: Path) -> float:
    """Seconds of the appendix's splits, fits and evaluations by the library's steps in this process, one
    model after the other, its imports done before the clock starts (no Snakemake, no process start-up)."""
    import torch._dynamo  # noqa: F401 - what the workflow's workers preload: torch's optimisers import it

    from calibrepro.calibrators import CALIBRATORS
    from calibrepro.config import load_schema, validate_config
    from calibrepro.steps.calibration import evaluate_step, fit_step, split_step

    config = validate_config(yaml.safe_load((workdir / "bench.yaml").read_text()),
                             load_schema(root / "workflow" / "schemas" / "config.schema.yaml"))
    [CALIBRATORS[method] for method in config["calibrators"]]  # their modules imported
    out = workdir / "floor"
    shutil.rmtree(out, ignore_errors=True)
    seed = config["split"]["seeds"][0]
    start = time.perf_counter()
    for dataset, models in config["models"].items():
        split = out / f"{dataset}.npz"
        split_step(models[sorted(models)[0]]["path"], config["split"]["calibration_fraction"], seed, split,
                   dataset=dataset)
        for model, spec in models.items():
            fitted = {method: out / dataset / model / f"{method}.json" for method in config["calibrators"]}
            fit_step(spec["path"], split, fitted, bins=config["bins"], options=config["calibrator_options"])
            evaluate_step(spec["path"], split, out / dataset / f"{model}.csv", out / dataset / f"{model}.json",
                          calibrators=fitted, metrics=config["metrics"], dataset=dataset, model=model, seed=seed,
                          bins=config["bins"])
    return time.perf_counter() - start


def time_appendix(workdir: Path, checkouts: list[Path], cores: int, repeat: int, small: bool) -> None:
    """Time the README's plain run of the appendix for each checkout, in turns; print the medians."""
    make_config(workdir, small, intervals=False)
    runs = {root: workdir / "runs" / root.name for root in checkouts}
    walls, floors = defaultdict(list), defaultdict(list)
    rules: dict[Path, dict[str, list[float]]] = {root: defaultdict(list) for root in checkouts}
    counts: dict[str, int] = {}
    load = os.getloadavg()
    for round_ in range(repeat):
        for root in checkouts if round_ % 2 == 0 else checkouts[::-1]:
            run = runs[root]
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir(parents=True)
            shutil.copy(workdir / "bench.yaml", run / "bench.yaml")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
            command = [sys.executable, "-m", "snakemake", *APPENDIX_TARGETS, "--snakefile", str(root / "Snakefile"),
                       "--cores", str(cores), "--configfile", "bench.yaml"]
            wall, jobs = timed_snakemake(command, run, env)
            walls[root].append(wall)
            for rule, seconds in jobs.items():
                rules[root][rule].append(sum(seconds))
                counts[rule] = len(seconds)
            floor = subprocess.run([sys.executable, __file__, "--floor", "--workdir", str(run), "--checkout",
                                    str(root)], env=env, capture_output=True, text=True)
            if floor.returncode:
                raise SystemExit(f"the compute floor of {root} failed:\n{floor.stderr}")
            floors[root].append(float(floor.stdout))
    names = {root: checkout_name(root) for root in checkouts}
    median = lambda values: sorted(values)[len(values) // 2]  # noqa: E731
    print(f"{counts.get('logits', 0)} models; cores: {cores}; median of {repeat}; load average "
          f"before: {load[0]:.1f}, after: {os.getloadavg()[0]:.1f}; workdir: {workdir}")
    print(f"{'seconds':<40}" + "".join(f"{names[root]:>14}" for root in checkouts))
    print(f"{'wall':<40}" + "".join(f"{median(walls[root]):>14.1f}" for root in checkouts))
    print(f"{'compute floor (one process)':<40}" + "".join(f"{median(floors[root]):>14.1f}" for root in checkouts))
    for rule in sorted(counts, key=lambda rule: -max(median(rules[root][rule] or [0]) for root in checkouts)):
        print(f"{f'{rule} ({counts[rule]} jobs), job time':<40}"
              + "".join(f"{median(rules[root][rule] or [0]):>14.1f}" for root in checkouts))
    first = checkouts[0]
    for root in checkouts[1:]:
        print(f"wall {names[root]} / {names[first]}: {median(walls[root]) / median(walls[first]):.2f}")
    groups: dict[tuple, list[str]] = defaultdict(list)  # checkouts whose tables and CSVs are byte-identical
    for root in checkouts:
        groups[tuple(sorted(digests(runs[root]).items()))].append(names[root])
    print(f"tables and CSVs ({len(digests(runs[first]))} files), byte-identical within each group: "
          + "; ".join(", ".join(group) for group in groups.values()))


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
    parser.add_argument("--appendix", action="store_true", help="time the README's plain run of the appendix's "
                        "ECE and NLL tables from the users' files, per rule, beside the compute floor")
    parser.add_argument("--checkout", type=Path, action="append", default=[],
                        help="with --appendix: also time this checkout of the project (e.g. a git worktree), "
                        "before this one; the ratios are to the first")
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)  # one checkout's floor (--appendix)
    args = parser.parse_args()
    if args.floor:
        print(compute_floor(args.workdir, args.checkout[0]))
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="calibrepro-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.appendix:
        time_appendix(workdir, [*(root.resolve() for root in args.checkout), ROOT], args.cores, args.repeat, args.small)
        return
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
                targets = [LAYOUT.conformal, LAYOUT.table("conformal", "md"), LAYOUT.table("conformal", "tex")]
                conformal[name].append(snakemake(workdir, config, args.cores, CONFIGURATIONS[name], *targets))
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
