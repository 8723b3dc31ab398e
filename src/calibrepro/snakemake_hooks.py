"""What the workflow reads from Snakemake's internals, in one place.

Snakemake has no public API for the jobs a run will execute, the jobs that failed or run now, or the
cores it was given, nor a way to lift a local run's job-rate limit; the workflow's hooks
(workflow/rules/common.smk) need them for the checks before the first job, the worker processes, the
scheduler, the failure summary and the Ctrl-C line. Every use of such an internal
(``workflow.dag.needrun_jobs()``, ``workflow.scheduler.failed`` / ``.running`` / ``.job_rate_limiter``,
``workflow.global_resources["_cores"]``) is in this module and nowhere else; they are those of the
Snakemake versions ``pyproject.toml`` declares (tested with 9.27), so an upgrade that changes them
fails here, by name, with :class:`SnakemakeInternalsError`.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import sys
import threading
from typing import Iterable

SNAKEMAKE_TESTED = "9.27"


class SnakemakeInternalsError(RuntimeError):
    """Snakemake no longer has an internal attribute the workflow reads."""


def _internal(read, what: str):
    try:
        return read()
    except (AttributeError, KeyError, TypeError) as error:
        import snakemake

        raise SnakemakeInternalsError(
            f"Snakemake {snakemake.__version__} has no {what} (calibrepro is tested with Snakemake "
            f"{SNAKEMAKE_TESTED}; see calibrepro/snakemake_hooks.py): {error}"
        ) from None


def pending_jobs(workflow) -> list:
    """The jobs this run will execute (after the DAG is built: onstart)."""
    return list(_internal(lambda: workflow.dag.needrun_jobs(), "workflow.dag.needrun_jobs()"))


def local_jobs_are_threads(workflow) -> bool:
    """Whether this process runs its jobs as threads of its own (``force-use-threads``, not a cluster job)."""
    return _internal(
        lambda: workflow.use_threads and workflow.local_exec and not workflow.remote_exec and not workflow.subprocess_exec,
        "workflow.use_threads/local_exec/remote_exec/subprocess_exec",
    )


def lift_job_rate_limit(workflow) -> None:
    """Turn off Snakemake's job-rate limit (``--max-jobs-per-timespan``) in a run whose jobs execute on this machine.

    The limit spares a cluster's scheduler; here it only costs: each pass of Snakemake's scheduler that leaves
    jobs waiting starts a timer that wakes it for another pass a second later, which starts another timer, so
    every finished job adds one wake-up a second until the run ends (about 2,000 passes, each re-reading the
    ready jobs' input sizes, for the appendix's 160 jobs on 2 cores).
    """
    local = _internal(lambda: workflow.local_exec and not workflow.remote_exec, "workflow.local_exec/remote_exec")
    if local and _internal(lambda: workflow.scheduler.job_rate_limiter, "workflow.scheduler.job_rate_limiter"):
        workflow.scheduler.job_rate_limiter = None


def cores(workflow) -> int:
    """The cores the run was given (``--cores``)."""
    return _internal(lambda: workflow.global_resources["_cores"].value, 'workflow.global_resources["_cores"]') or 1


def _describe(jobs: Iterable) -> list[tuple[str, str, list[str]]]:
    """(rule, "(wildcards)", logs) of each job, members of group jobs one by one."""
    found = []
    for job in jobs:
        for member in getattr(job, "jobs", [job]):
            wildcards = ", ".join(f"{key}={value}" for key, value in member.wildcards.items())
            found.append((member.rule.name, f"({wildcards})", [str(path) for path in member.log]))
    return sorted(found)


def failed_steps(workflow) -> list[tuple[str, str, list[str]]]:
    """(rule, wildcards, logs) of each job that failed in this run, for the error summary."""
    return _describe(_internal(lambda: list(workflow.scheduler.failed), "workflow.scheduler.failed"))


def running_steps(workflow) -> list[tuple[str, str, list[str]]]:
    """(rule, wildcards, logs) of each job running now."""
    return _describe(_internal(lambda: list(workflow.scheduler.running), "workflow.scheduler.running"))


def running_outputs(workflow) -> list[str]:
    """The output files of the jobs running now."""
    jobs = _internal(lambda: list(workflow.scheduler.running), "workflow.scheduler.running")
    return sorted({str(path) for job in jobs for member in getattr(job, "jobs", [job]) for path in member.output})


def _remove(paths: Iterable[str]) -> None:
    for path in paths:
        if os.path.isfile(path):
            os.remove(path)


def interrupt_message(running: list[tuple[str, str, list[str]]], argv: list[str]) -> str:
    """The one line an interrupted run ends with: what was interrupted, what is kept, how to go on."""
    steps = [f"{rule} {what}" if what != "()" else rule for rule, what, _ in running]
    if len(steps) > 2:
        steps = [*steps[:2], f"{len(steps) - 2} more"]
    where = f" while running {', '.join(steps)}" if steps else ""
    command = shlex.join(["snakemake", *argv[1:]])
    return (
        f"calibrepro: interrupted{where}; finished outputs are kept, unfinished ones removed. "
        f"Continue with: {command}"
    )


def _end_descendants(grace: float = 3.0) -> None:
    """Stop every process this one started (worker processes, their fork server, shell jobs)."""
    import psutil  # a dependency of Snakemake

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(children, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def _end_leftover_workers() -> None:
    """At the exit of an interrupted run: stop the worker processes that a job thread was still starting.

    A job thread in the middle of starting a worker when :func:`_end_descendants` ran can leave one
    alive: forked by the fork server just after the list of descendants was taken (then orphaned), or
    by a fork server that multiprocessing restarted.  Such a worker waits for work forever, and
    multiprocessing's own exit handler, which joins every worker it started, would wait for it (the likely
    cause of an interrupted run that had not ended 120 s after Ctrl-C, seen once in the full test suite
    and not reproduced).  Registered with ``atexit`` after
    that handler, this runs first, when no job thread can start another.
    """
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
    _end_descendants(grace=1.0)


def _quiet() -> None:
    """Send this process's remaining output to /dev/null: Snakemake's cancel path prints an error per job."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def on_ctrl_c(workflow) -> None:
    """Make Ctrl-C end the run with one line instead of pages of tracebacks.

    On SIGINT: print :func:`interrupt_message`, silence the rest, stop the processes the run
    started, and hand over to Snakemake's own cancel path (a KeyboardInterrupt in its scheduler), which
    removes the run's lock. The interrupted jobs' outputs are removed when the process exits (after
    their threads, which may still write one, have ended): Snakemake would otherwise refuse the next
    run over files it marked incomplete. A second Ctrl-C exits at once.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupted(signum, frame):
        signal.signal(signal.SIGINT, lambda *_: os._exit(130))
        try:
            running, unfinished = running_steps(workflow), running_outputs(workflow)
        except SnakemakeInternalsError:
            running, unfinished = [], []
        atexit.register(_remove, unfinished)
        atexit.register(_end_leftover_workers)
        print(interrupt_message(running, sys.argv), file=sys.stderr, flush=True)
        _quiet()  # first: the jobs whose processes end now fail, and Snakemake would print each
        _end_descendants()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
