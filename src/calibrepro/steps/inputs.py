"""The steps up to the logits: a pinned download, the logits job's request, a user's own logits file.

``workflow/rules/download.smk`` and ``workflow/rules/logits.smk`` call them; a network's logits are
computed by the command line (``calibrepro logits``), in a process of its own.
"""

from __future__ import annotations

from typing import Mapping

from calibrepro.io import read_json, write_text
from calibrepro.steps.run import step_log


def download_step(download, output, *, mirrors: Mapping[str, str], timeout: float, retries: int, log=None) -> None:
    """Fetch one pinned file (``calibrepro.zoo.Download``) and verify its checksum."""
    from calibrepro.download import fetch  # urllib and gdown: only where something is downloaded

    with step_log(log) as logger:
        logger.info("fetching %s -> %s", download.url, output)
        fetch(download, output, mirrors=mirrors, timeout=timeout, retries=retries)
        logger.info("ok: %s (%s)", output, download.checksum)


def logits_request_step(request: str, output, *, log=None) -> None:
    """Write one logits job's request (JSON text, ``calibrepro.zoo.LogitsRequest``) for ``calibrepro logits``."""
    with step_log(log) as logger:
        write_text(output, request + "\n")
        logger.info("request of the logits job written to %s", output)


def own_logits_step(request, output, *, log=None) -> None:
    """A ``source: logits`` model's file read, checked and written into the cache, and the cache read back, as
    ``calibrepro logits`` does (``request``: the job's request file). In the job's thread: a copy, mostly reading
    and writing, which need not wait for the worker processes' imports."""
    from calibrepro.zoo import LogitsRequest, produce_logits

    with step_log(log) as logger:
        logger.info(produce_logits(LogitsRequest.from_json(read_json(request)), output))
