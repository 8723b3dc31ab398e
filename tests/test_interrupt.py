"""Ctrl-C during a run: one line, the processes the run started end, and the next run continues."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from calibrepro.snakemake_hooks import interrupt_message
from workflow_helpers import run_snakemake, snakemake_command, synthetic_logits, write_config


def test_the_line_names_the_interrupted_steps_and_the_command_to_continue():
    running = [("fit_calibrators", "(dataset=d, model=a, seed=0)", []), ("split", "(dataset=d, seed=0)", []),
               ("table", "(metric=ece)", []), ("metrics", "()", [])]
    line = interrupt_message(running, ["/x/snakemake/__main__.py", "--cores", "2", "--configfile", "my file.yaml"])
    assert line == (
        "calibrepro: interrupted while running fit_calibrators (dataset=d, model=a, seed=0), split (dataset=d, "
        "seed=0), 2 more; finished outputs are kept, unfinished ones removed. "
        "Continue with: snakemake --cores 2 --configfile 'my file.yaml'"
    )
    assert interrupt_message([], ["snakemake"]) == (
        "calibrepro: interrupted; finished outputs are kept, unfinished ones removed. Continue with: snakemake"
    )


@pytest.mark.slow
def test_ctrl_c_ends_the_run_with_one_line_and_the_rerun_finishes_it(tmp_path):
    _, labels = synthetic_logits(tmp_path / "a.npz", n=20_000, k=10, seed=1)
    synthetic_logits(tmp_path / "b.npz", n=20_000, k=10, seed=2, labels=labels)
    config = write_config(tmp_path / "byo.yaml", {"models": {"d": {
        "a": {"source": "logits", "path": "a.npz"}, "b": {"source": "logits", "path": "b.npz"}}}})
    command = snakemake_command(tmp_path, "--configfile", str(config))
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    fits = tmp_path / "results/byo/logs/fit_calibrators/d"
    deadline = time.monotonic() + 600
    while run.poll() is None and not fits.is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before a calibrator fit started"
    os.killpg(run.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole foreground group
    output, _ = run.communicate(timeout=120)
    assert run.returncode != 0
    lines = output.rstrip().splitlines()
    assert lines[-1].startswith("calibrepro: interrupted while running fit_calibrators (dataset=d, model="), lines[-5:]
    assert lines[-1].endswith(f"Continue with: snakemake {' '.join(command[3:])}")
    assert "Traceback" not in output and "Error in rule" not in output and "KeyboardInterrupt" not in output
    left = _processes_in_group(run.pid, wait=15.0)  # a busy machine may take seconds to reap the workers
    assert left == [], f"processes of the interrupted run are still running: {left}"
    again = run_snakemake(tmp_path, "--configfile", str(config))
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "reports/byo/reproduction.md").is_file()


def _processes_in_group(group: int, wait: float) -> list[str]:
    """The processes (pid and command line) still running in a process group, polled until none is left
    or ``wait`` seconds have passed."""
    deadline = time.monotonic() + wait
    while True:
        left = subprocess.run(["pgrep", "-a", "-g", str(group)], capture_output=True, text=True).stdout.splitlines()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
