"""Worker processes for the workflow's compute steps when Snakemake runs its jobs as threads.

With ``force-use-threads`` (``profiles/default``, read by Snakemake on every run) all jobs of a
local run are threads of the one Snakemake process.  That saves starting a Snakemake process per
job (seconds each), but the interpreter lock lets only one of those threads run Python at a time:
on 2 cores the thesis-shaped appendix took as long with ``--cores 2`` as with ``--cores 1``, and
the threads' hand-overs of the lock cost millions of futex calls.  So the Snakefile calls
:func:`configure` with its core count, and every step decorated with :func:`offload` then runs in
one of that many long-lived worker processes (started on first use); the job's thread only waits
for it.  Elsewhere (a Slurm job, ``--workflow-profile none``, tests and library calls) nothing is
configured and steps run inline, in the caller.  The workers are forked from one fork server that
imports the libraries once for all of them; it starts its imports when :func:`configure` is called
(Snakemake's ``onstart``), so they overlap the run's first jobs (the logits, the splits) instead
of delaying the first step.

Workers come from a ``forkserver`` (not ``fork``: the Snakemake process has threads), run every
library single-threaded (the parallelism is the number of processes, as Snakemake planned it),
and exit by themselves within a second when the Snakemake process is gone, even if it was killed.
A step's result and its exceptions come back to the job's thread as if the step had run there.

The fork server is a new interpreter started with the environment that :mod:`calibrepro.determinism`
set, so NumPy in the workers runs the pinned kernels; the Snakemake process imported NumPy before
reading the workflow, so with one core too, its steps go to one worker unless that process happens
to be pinned (:func:`calibrepro.determinism.kernels_pinned`, e.g. started with the variables set).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import forkserver

from calibrepro import determinism

#: environment of the workers: one thread for every numerical library imported in them
_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}

_lock = threading.Lock()
_state: dict = {"processes": 0, "pool": None, "in_worker": False}


class WorkerDiedError(RuntimeError):
    """A worker process ended in the middle of a step (killed, or out of memory)."""


def configure(processes: int, preload: tuple[str, ...] = ()) -> None:
    """Run offloaded steps in up to ``processes`` worker processes (0: inline, the default; 1: inline
    where this process runs the pinned kernels, else in one worker).

    ``preload``: modules the fork server imports once for all workers: the step modules and what they
    import (torch and what its optimisers import on first use: about 3 s, paid once instead of per worker).
    """
    with _lock:
        _state["processes"] = max(0, int(processes))
    _close_pool()  # a new configuration gets new workers
    if _uses_workers():
        # The fork server starts importing now, beside the run's first jobs (this does not wait for it;
        # if the run ends first, the server exits by itself once it has imported everything).
        # The workers themselves start with the first step.
        multiprocessing.get_context("forkserver").set_forkserver_preload(["__main__", *preload])
        with _ctrl_c_ignored():  # inherited by the fork server and its workers: Ctrl-C is the Snakemake process's
            forkserver.ensure_running()


@contextlib.contextmanager
def _ctrl_c_ignored():
    """Ignore SIGINT in the processes started in the block (the main thread's handler is restored after).

    On Ctrl-C the Snakemake process ends the run (calibrepro.snakemake_hooks.on_ctrl_c) and stops the
    workers itself; workers that took the SIGINT too would each print a traceback.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def end_of_run() -> None:
    """At the end of a run (Snakemake's ``onsuccess`` and ``onerror``): stop the workers, let the process exit.

    Snakemake's job-rate limiter (``--max-jobs-per-timespan``, 100/1s by default) starts a
    ``threading.Timer`` of one timespan at each pass of its scheduler while jobs run, only to wake
    the scheduler again; they are not daemon threads, so Python waited for the last one before
    exiting, up to a second after every run. Once the run is over they wake nobody: cancelled here.
    """
    _close_pool()
    for thread in threading.enumerate():
        if isinstance(thread, threading.Timer):
            thread.cancel()


def _close_pool() -> None:
    """Stop the current workers, if any (the next offloaded step starts new ones)."""
    with _lock:
        pool, _state["pool"] = _state["pool"], None
    if pool is not None:
        pool.shutdown(cancel_futures=True)


def _uses_workers() -> bool:
    """Whether offloaded steps go to worker processes: two or more configured, or one where this
    process does not run the pinned kernels."""
    processes = _state["processes"]
    return processes > 1 or (processes == 1 and not determinism.kernels_pinned())


def _worker_start() -> None:
    """In each new worker: one thread per library, and exit when the parent is gone."""
    os.environ.update(_ONE_THREAD)
    _state["in_worker"] = True
    determinism.single_threaded()  # the libraries already loaded (numpy's BLAS, torch)
    parent = multiprocessing.parent_process()  # the process that asked for the worker, not the fork server

    def watch() -> None:  # a killed Snakemake cannot shut its pool down; its workers see it here
        while parent.is_alive():
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="calibrepro-parent-watch", daemon=True).start()


def _pool() -> ProcessPoolExecutor:
    with _lock:
        if _state["pool"] is None:
            # The fork server imports the step modules once (configure: ``__main__``, Snakemake's, too:
            # else every worker would import it again); every worker forked from it has them.
            context = multiprocessing.get_context("forkserver")
            _state["pool"] = ProcessPoolExecutor(max(1, _state["processes"]), context, initializer=_worker_start)
        return _state["pool"]


def _call(module: str, name: str, args: tuple, kwargs: dict):
    """In a worker: the step ``module.name`` itself (its :func:`offload` wrapper runs it inline here)."""
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


def offload(step):
    """Decorate a step function so that it runs in a worker process once :func:`configure` asked for them."""

    @functools.wraps(step)
    def run(*args, **kwargs):
        if _state["in_worker"] or not _uses_workers():
            if not _state["in_worker"]:
                determinism.single_threaded()  # as in a worker: the results do not depend on the cores
            return step(*args, **kwargs)
        future = _pool().submit(_call, step.__module__, step.__name__, args, kwargs)
        try:
            return future.result()
        except BrokenProcessPool:
            with _lock:  # the next step gets a fresh pool
                _state["pool"] = None
            message = (
                f"the worker process running {step.__name__} ended without finishing it (killed, or out of "
                "memory?); run the workflow again to redo this step"
            )
            if kwargs.get("log"):  # the step could not end its log with its error: say it there
                with open(kwargs["log"], "a", encoding="utf-8") as log:
                    log.write(f"error: {message}\n")
            raise WorkerDiedError(message) from None

    return run
