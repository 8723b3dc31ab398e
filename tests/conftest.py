"""Fixtures shared by the test modules (pytest finds them here; nothing imports them by hand)."""

from __future__ import annotations

import pytest

from servers import FileServer


@pytest.fixture
def file_server():
    """A started :class:`servers.FileServer` on 127.0.0.1; stopped after the test."""
    server = FileServer().start()
    try:
        yield server
    finally:
        server.stop()
