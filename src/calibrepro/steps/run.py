"""A run and its steps' records: each step's log, the outputs an earlier run left, the closing summary.

Every step writes its records through :func:`step_log` into its rule's ``log:`` file (under
``results/<name>/logs/``); a step that fails ends its log with ``error: <message>``, the line
:func:`failure_summary` prints for it when the run fails. ``workflow/rules/common.smk`` calls
:func:`remove_stale_outputs` when a run starts and the summaries when it ends.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

_logger = logging.getLogger("calibrepro")


class _ThisThread(logging.Filter):
    """Pass the records emitted by the thread that created the filter."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread == self.thread


@contextmanager
def step_log(path: str | os.PathLike | None) -> Iterator[logging.Logger]:
    """Send the records of the ``calibrepro`` loggers from this thread to ``path`` while the block runs.

    Steps hold no state, so Snakemake may run several in parallel threads of its own process; each
    step's log receives only the records of its own thread. An exception leaving the block is
    recorded as the log's last line (``error: <message>``), so the log ends with the step's own
    error; the workflow's error summary prints that line.
    """
    if path is None:
        yield _logger
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(_ThisThread())
    previous_level = _logger.level
    _logger.addHandler(handler)
    if _logger.getEffectiveLevel() > logging.INFO:
        _logger.setLevel(logging.INFO)
    start = time.perf_counter()
    try:
        yield _logger
        _logger.info("done in %.2f s", time.perf_counter() - start)
    except Exception as error:
        _logger.error("error: %s", error)
        raise
    finally:
        _logger.removeHandler(handler)
        _logger.setLevel(previous_level)
        handler.close()


def remove_stale_outputs(layout, targets: Sequence[str]) -> str:
    """Delete what an earlier run of this configuration reported and this one does not produce.

    ``layout.stale(targets)`` lists them (reports, gathered tables); say in one line what went.
    """
    stale = layout.stale(targets)
    for path in stale:
        os.remove(path)
    for folder, _, _ in os.walk(layout.reports, topdown=False):  # and the folders left empty
        if not os.listdir(folder):
            os.rmdir(folder)
    if not stale:
        return ""
    return f"calibrepro: removed {len(stale)} output(s) of an earlier run that this configuration does not produce: " + ", ".join(stale)


def outputs_summary(groups: Mapping[str, Sequence[str]]) -> str:
    """Lines telling where a finished run's outputs are: per group, its folder and the files present."""
    found = {name: [path for path in paths if os.path.exists(path)] for name, paths in groups.items()}
    found = {name: present for name, present in found.items() if present}
    width = max([9, *map(len, found)])  # the names line up, the longest included
    lines = []
    for name, present in found.items():
        if len(present) == 1:
            where = present[0]
        else:
            where = f"{os.path.commonpath(present)}/  ({len(present)} files)"
        lines.append(f"  {name:<{width}} {where}")
    if not lines:
        return ""
    return "\n".join(["calibrepro: finished. Outputs:", *lines])


def failure_summary(failures: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """Lines naming each failed step (rule, what it worked on, its logs) with its log's last line."""
    lines = []
    for rule, what, logs in failures:
        last = ""
        for path in logs:
            if os.path.isfile(path):
                tail = [line for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
                last = tail[-1].strip() if tail else last
        where = f" (full log: {', '.join(logs)})" if logs else ""
        lines.append(f"  {rule} {what}: {last or 'failed, see the output above'}{where}")
    if not lines:
        return ""
    return "\n".join(["calibrepro: the run failed.", *lines])
