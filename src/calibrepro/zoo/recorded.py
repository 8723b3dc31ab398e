"""Checksums of unpinned downloads, recorded on first use and checked on every later use.

A timm tag's hub file or a checkpoint URL has no checksum published anywhere we could pin. The
first logits job that uses such a file writes its sha256 into a JSON record (``downloads.recorded``,
default ``<downloads.dir>/recorded.json``: ``{download path: {"url", "sha256"}}``); every later job
compares the file it reads with the record and stops when the file behind the URL changed. The
record is updated under a file lock and replaced atomically (jobs run in parallel).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Mapping

from calibrepro.download import ChecksumError, Download, parse_checksum, sha256_of


def record_path(config: Mapping) -> Path:
    """Where the record lives: ``downloads.recorded``, else ``<downloads.dir>/recorded.json``."""
    downloads = config.get("downloads") or {}
    return Path(downloads.get("recorded") or Path(downloads.get("dir", "results/downloads")) / "recorded.json")


def check(download: Download, path: str | os.PathLike, config: Mapping) -> str:
    """Record the sha256 of an unpinned ``download`` on first use, else compare; return the sha256.

    Pinned downloads were verified when fetched and pass through. Raises :class:`ChecksumError`
    naming the URL, both hashes and the record when the file differs from its first use.
    """
    form, _ = parse_checksum(download.checksum)
    digest = sha256_of(path)
    if form != "unpinned":
        return digest
    record = record_path(config)
    record.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{record}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
        known = entries.get(download.path)
        if known is not None and known["sha256"] != digest:
            raise ChecksumError(
                f"{download.url}: the file {path} has sha256 {digest}, but its first use recorded {known['sha256']} "
                f"(in {record}); the file behind the URL changed. Delete {path} and fetch it again, or, if the new "
                f"file is the one you want, remove the entry {download.path!r} from {record}"
            )
        if known is None:
            entries[download.path] = {"url": download.url, "sha256": digest}
            part = record.with_name(f".{record.name}.{os.getpid()}.part")
            part.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(part, record)
    return digest
