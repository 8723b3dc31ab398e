"""Compute steps in worker processes (calibrepro.workers): same files, same errors, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from calibrepro import workers
from calibrepro.steps.calibration import fit_step, split_step
from calibrepro.calibrators import CALIBRATORS, module_of
from calibrepro.io import LogitsFileError, save_logits
from workflow_helpers import overconfident

METHODS = ["uncalibrated", "isotonic", "temperature_scaling"]


@pytest.fixture
def two_workers():
    workers.configure(2)
    yield
    workers.configure(0)


@workers.offload
def process_id() -> int:
    return os.getpid()


@workers.offload
def die(*, log=None) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def fit_files(tmp_path, name: str) -> dict[str, bytes]:
    logits, labels = overconfident(n=600, k=5, seed=3)
    save_logits(tmp_path / "m.npz", logits, labels)
    if not (tmp_path / "split.npz").exists():
        split_step(tmp_path / "m.npz", 0.5, 0, tmp_path / "split.npz", dataset="d")
    outputs = {method: tmp_path / name / f"{method}.json" for method in METHODS}
    fit_step(tmp_path / "m.npz", tmp_path / "split.npz", outputs, bins=15, log=tmp_path / f"{name}.log")
    return {method: path.read_bytes() for method, path in outputs.items()}


def test_a_step_in_a_worker_writes_the_same_bytes_as_inline(tmp_path, two_workers):
    assert process_id() != os.getpid()  # offloaded
    in_worker = fit_files(tmp_path, "worker")
    workers.configure(0)
    assert process_id() == os.getpid()  # inline again
    assert fit_files(tmp_path, "inline") == in_worker
    assert "temperature_scaling: fitted on 300 samples" in (tmp_path / "worker.log").read_text()


def test_a_steps_error_reaches_the_job_with_its_type_message_and_log_line(tmp_path, two_workers):
    outputs = {"uncalibrated": tmp_path / "u.json"}
    with pytest.raises(LogitsFileError, match="missing.npz: no such file"):
        fit_step(tmp_path / "missing.npz", tmp_path / "split.npz", outputs, bins=15, log=tmp_path / "fit.log")
    assert (tmp_path / "fit.log").read_text().splitlines()[-1] == f"error: {tmp_path / 'missing.npz'}: no such file"


def test_a_killed_worker_fails_its_step_with_a_message_and_the_next_step_gets_a_new_one(tmp_path, two_workers):
    with pytest.raises(workers.WorkerDiedError, match="the worker process running die ended without finishing it"):
        die(log=tmp_path / "die.log")
    # the workflow's failure summary prints a step's last log line: it is the error, not the last progress
    assert (tmp_path / "die.log").read_text().startswith("error: the worker process running die ended")
    assert process_id() != os.getpid()


def test_workers_exit_by_themselves_when_snakemake_is_killed(tmp_path):
    """A SIGKILLed parent cannot shut its pool down: its workers must notice and exit."""
    script = textwrap.dedent(
        """
        import os, sys, time
        sys.path.insert(0, sys.argv[1])
        from calibrepro import workers
        import test_workers
        if __name__ == "__main__":
            workers.configure(2)
            print(test_workers.process_id(), flush=True)
            time.sleep(60)
        """
    )
    (tmp_path / "parent.py").write_text(script)
    tests_dir = os.path.dirname(__file__)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), tests_dir], stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    assert os.path.exists(f"/proc/{worker}")
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{worker}"), "the worker outlived its killed parent"


def test_workers_run_numerical_libraries_single_threaded(two_workers):
    assert threads_in_worker() == {"OMP_NUM_THREADS": "1", "blas": 1}


@workers.offload
def threads_in_worker() -> dict:
    from threadpoolctl import threadpool_info

    np.ones(3) @ np.ones(3)  # BLAS loaded
    blas = {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "blas": max(blas)}


def test_every_module_the_workflow_preloads_for_the_workers_exists():
    """The fork server skips a module it cannot import without a word: a typo would only cost time."""
    import importlib
    import re
    from pathlib import Path

    common = (Path(__file__).parents[1] / "workflow" / "rules" / "common.smk").read_text()
    block = common[common.index("_CALIBRATION = ("):common.index("def start_workers")]
    modules = set(re.findall(r'"((?:calibrepro|torch)\.[\w.]+)"', block))
    modules |= {module_of(method) for method in CALIBRATORS}  # the calibrators' modules, from the registry
    assert {"torch._dynamo", "calibrepro.calibrators.scaling", "calibrepro.report.figures"} <= modules
    for module in sorted(modules):
        importlib.import_module(module)


def test_end_of_run_stops_the_workers_and_cancels_the_schedulers_leftover_timers(two_workers):
    """Snakemake's rate limiter leaves non-daemon 1 s timers behind; Python would wait for them at exit."""
    fired = []
    timer = threading.Timer(60, fired.append, args=[True])
    timer.start()
    worker = process_id()
    workers.end_of_run()
    timer.join(timeout=5)
    assert not timer.is_alive() and not fired
    deadline = time.monotonic() + 10  # the fork server, its parent, reaps it
    while os.path.exists(f"/proc/{worker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{worker}"), "the worker outlived the run"
    assert process_id() != worker  # a later run (configure still asks for workers) gets new ones
