"""What the curves cost: the demo's networks with ``curves`` trained with and without the evaluations.

    python benchmarks/bench_curves.py [--repeats 3] 2>/dev/null

Trains each network of ``config/config.yaml`` that has ``curves`` (on the digits, seed as configured) with
the library's trainer and the epoch hook of :mod:`calibrepro.training.curves`, ``--repeats`` times, and
prints, of the run with the smallest share, the seconds inside the hook (the evaluations) against the
seconds outside it (the training): the share the evaluations add (issue 45 asks for at most 15 %). Timing
the hook itself keeps the machine's load out of the comparison of two separate runs. The per-epoch log
lines go to stderr.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


class Timed:
    """The epoch hook ``hook``, adding up the seconds spent in it."""

    def __init__(self, hook):
        self.hook, self.seconds = hook, 0.0

    def __call__(self, network, record) -> None:
        start = time.perf_counter()
        self.hook(network, record)
        self.seconds += time.perf_counter() - start


def main() -> None:
    import torch

    from calibrepro.training import data, trainer
    from calibrepro.training.curves import Recorder, curve_settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    run = {"bins": config["bins"], "split": config["split"]}
    parts = data.load("digits", {}, config["datasets"]["digits"])
    cpu = torch.device("cpu")
    print("| network | epochs | every | training s | evaluations s | evaluations add |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, spec in config["models"]["digits"].items():
        if not spec.get("curves"):
            continue
        options, settings = trainer.training_options(spec), curve_settings(spec, run)
        runs = []
        for _ in range(args.repeats):
            hook = Timed(Recorder(parts.x_eval, parts.y_eval, settings, options["epochs"], cpu))
            start = time.perf_counter()
            trainer.train(parts, options, cpu, model, hook)
            training = time.perf_counter() - start - hook.seconds
            runs.append((hook.seconds / training, training, hook.seconds))
        share, training, evaluations = min(runs)
        print(f"| {model} | {options['epochs']} | {settings['every']} | {training:.2f} | {evaluations:.2f} | "
              f"{100 * share:.1f} % |")


if __name__ == "__main__":
    main()
