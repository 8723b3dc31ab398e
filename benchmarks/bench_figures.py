"""Time the 32 reliability diagrams of the thesis's appendix (PNG + PDF), serially in one process.

Builds the reliability data of 32 synthetic models (13 x K=10, 15 x K=100 with 5,000 test samples,
4 x K=1000 with 25,000; six methods each, as the pipeline writes them), then draws every diagram
with ``write_reliability_figure`` and prints the total and the split into building the figure,
rendering the PNG and writing the PDF.

    .venv/bin/python benchmarks/bench_figures.py [--intervals] [--count 32] [--jobs 2]

``--jobs N`` also draws them as a local run of the workflow does: N job threads calling the
pipeline's figure step, which runs in N worker processes (:mod:`calibrepro.workers`); the time
includes starting the workers.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from scipy.special import softmax

from calibrepro import workers
from calibrepro.steps.reports import figure_step
from calibrepro.reliability import read_reliability, reliability_bins, write_reliability
from calibrepro.report.figures import PDF_METADATA, PNG_METADATA, build_reliability_figure, write_reliability_figure
from calibrepro.report.labels import METHOD_ORDER

SHAPES = [(10, 5_000)] * 13 + [(100, 5_000)] * 15 + [(1000, 25_000)] * 4


def synthetic_reliability(path: Path, k: int, n: int, seed: int) -> None:
    """Six 'methods' = six temperatures of one set of overconfident synthetic logits."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, size=n)
    logits = rng.normal(size=(n, k))
    logits[np.arange(n), labels] += rng.gamma(4.0, 1.0, size=n)
    methods = {
        method: reliability_bins(softmax(logits * scale, axis=1), labels)
        for method, scale in zip(METHOD_ORDER, (2.5, 1.0, 1.2, 1.4, 1.6, 1.8))
    }
    write_reliability(path, dataset="cifar10", model=f"model{seed:02d}", seed=0, bins=15, methods=methods)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", action="store_true", help="draw Wilson error bars (level 0.95)")
    parser.add_argument("--count", type=int, default=len(SHAPES), help="number of diagrams (default 32)")
    parser.add_argument("--jobs", type=int, default=0, help="also draw them in N worker processes, as the workflow")
    args = parser.parse_args()
    level = 0.95 if args.intervals else None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = []
        for i, (k, n) in enumerate(SHAPES[: args.count]):
            sources.append(tmp / f"r{i}.json")
            synthetic_reliability(sources[-1], k, n, i)
        write_reliability_figure(sources[0], tmp / "warm.png", tmp / "warm.pdf", intervals=level)  # imports, fonts
        start, cpu = time.perf_counter(), time.process_time()
        for i, source in enumerate(sources):
            write_reliability_figure(source, tmp / f"f{i}.png", tmp / f"f{i}.pdf", intervals=level)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        build = png = pdf = 0.0
        for i, source in enumerate(sources):
            t0 = time.perf_counter()
            figure = build_reliability_figure(read_reliability(source), intervals=level)
            t1 = time.perf_counter()
            figure.savefig(tmp / "x.png", format="png", dpi=200, metadata=PNG_METADATA)
            t2 = time.perf_counter()
            figure.savefig(tmp / "x.pdf", format="pdf", metadata=PDF_METADATA)
            t3 = time.perf_counter()
            build, png, pdf = build + t1 - t0, png + t2 - t1, pdf + t3 - t2
        if args.jobs:
            workers.configure(args.jobs, ["calibrepro.report.figures"])
            start = time.perf_counter()
            with ThreadPoolExecutor(args.jobs) as jobs:  # Snakemake's job threads
                list(jobs.map(lambda i: figure_step(
                    sources[i], tmp / f"w{i}.png", tmp / f"w{i}.pdf", language="en", intervals=level), range(len(sources))))
            parallel = time.perf_counter() - start
            workers.configure(0)
    print(f"{len(sources)} reliability diagrams (PNG + PDF){' with Wilson intervals' if level else ''}: "
          f"{total:.2f} s wall, {cpu:.2f} s CPU ({total / len(sources):.3f} s each)")
    print(f"  of which build {build:.2f} s, PNG {png:.2f} s, PDF {pdf:.2f} s (second pass)")
    if args.jobs:
        print(f"the same in {args.jobs} worker processes, as the workflow draws them: {parallel:.2f} s wall "
              "(workers started from scratch)")


if __name__ == "__main__":
    main()
