"""Start-up of the ``calibrepro`` command against a bare interpreter (issue 44: at most 0.3 s more).

Times ``python -c pass``, ``python -m calibrepro.cli --help`` and ``python -m calibrepro.cli check-logits``
on a 1,000 x 10 logits file, each a new process, in turns (so that a change of the machine's load hits
all three alike), and prints the median wall time of each and its difference from the bare interpreter.

    .venv/bin/python benchmarks/bench_startup.py [--runs 20]

With ``PYTHONPATH=<checkout>/src`` it times another checkout (e.g. a git worktree of an older commit).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tiny.npz"
        rng = np.random.default_rng(0)
        np.savez(path, logits=rng.normal(size=(1000, 10)).astype(np.float32), labels=np.arange(1000) % 10)
        commands = {
            "python -c pass": ["-c", "pass"],
            "calibrepro --help": ["-m", "calibrepro.cli", "--help"],
            "calibrepro check-logits (1,000 x 10)": ["-m", "calibrepro.cli", "check-logits", str(path)],
        }
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, command in commands.items():
                start = time.perf_counter()
                subprocess.run([sys.executable, *command], check=True, capture_output=True)
                seconds[name].append(time.perf_counter() - start)
    median = {name: sorted(times)[len(times) // 2] for name, times in seconds.items()}
    bare = median["python -c pass"]
    print(f"median of {args.runs} runs each, wall seconds")
    for name, value in median.items():
        print(f"{name:<40}{value:8.3f}" + (f"   +{value - bare:.3f} over the bare interpreter" if value != bare else ""))


if __name__ == "__main__":
    main()
