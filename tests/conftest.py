"""Fixtures shared by the test modules (pytest finds them here; nothing imports them by hand)."""

from __future__ import annotations

import pytest

import calibrepro  # noqa: F401  before any test module loads NumPy: the tests compute on the pinned kernels
from servers import FileServer


@pytest.fixture
def file_server():
    """A started :class:`servers.FileServer` on 127.0.0.1; stopped after the test."""
    server = FileServer().start()
    try:
        yield server
    finally:
        server.stop()


def pytest_collection_modifyitems(config, items):
    """The longest tests first: Slurm's (minutes, mostly waiting on the cluster), then the slow ones.

    ``make test`` runs the suite in parallel, a test module at a time per pytest-xdist worker
    (``--dist loadfile``: test_slurm.py's tests share one cluster, so they must run in one worker); the
    modules are handed out in this order, so the long poles start at once instead of at the end.
    """
    items.sort(key=lambda item: (item.get_closest_marker("slurm") is None, item.get_closest_marker("slow") is None))
