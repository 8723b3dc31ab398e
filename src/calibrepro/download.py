"""Pinned downloads: fetch a URL to a file, verify its checksum, never leave a partial file.

Every file the pipeline downloads is a :class:`Download`: a URL, a checksum and a
path under the downloads directory. :func:`fetch` streams the URL to a temporary file beside the
destination, verifies the checksum and only then renames it onto the destination; a failed
transfer or a wrong checksum deletes the temporary file and raises an error naming the URL; a
temporary file left by a download killed outright is removed by the next :func:`fetch` of the same
destination (:func:`calibrepro.io.remove_stale_parts`).

Checksum forms (``Download.checksum``):

``sha256:<64 hex>``
    the full SHA-256 of the file (the normal case).
``md5:<32 hex>``
    where the origin publishes only MD5 (the CIFAR tarballs on cs.toronto.edu).
``sha256-prefix:<8-63 hex>``
    a **weaker** pin for files whose full hash is published nowhere but whose file name carries the
    first hex digits of their SHA-256 (the torch.hub convention ``name-<prefix>.pth`` that
    ``torch.hub.download_url_to_file(..., hash_prefix=...)`` checks). Eight hex digits are 32 bits:
    enough to catch a corrupted or substituted file by accident, not a deliberate collision. The full
    SHA-256 of the file actually used is recorded in every logits archive's metadata.
``unpinned:<reason>``
    no checksum of the file is published anywhere (huyvnphan's ``state_dicts.zip``). The file is
    accepted, a warning with its SHA-256 is logged, and the source that uses it must verify its
    content (for ``state_dicts.zip``: every expected member loads strictly into its architecture).

URLs are redirected with ``mirrors`` (``{url prefix: replacement prefix}``, longest prefix wins);
the checksum stays the one of the original pin, so a mirror can serve only byte-identical files.
A replacement without a URL scheme is a local folder (or file) for air-gapped use: e.g.
``{"https://archive.ics.uci.edu/ml/machine-learning-databases/communities/": "/data/uci/communities/"}``
copies ``/data/uci/communities/communities.data`` through its ``file://`` URL, checked like a download.
Google Drive URLs (``drive.google.com``, ``drive.usercontent.google.com``) are downloaded with
``gdown``, which handles Drive's confirmation page for large files; every other URL with urllib.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import Mapping

from calibrepro.io import new_part_file, remove_stale_parts


@dataclass(frozen=True)
class Download:
    """One pinned file: where it comes from, its checksum, where it goes under the downloads dir."""

    url: str
    checksum: str  # one of the forms above, e.g. "sha256:<hex>"; checked by :func:`parse_checksum`
    path: str  # relative to the downloads directory, e.g. "weights/akamaster/resnet20-12fca82f.th"


_logger = logging.getLogger(__name__)

#: sent with every request; some hosts (GitHub, Google Drive) reject anonymous clients
USER_AGENT = "calibrepro/0.1 (+https://github.com; reproducible calibration pipeline) python-urllib"
#: HTTP status codes worth retrying (the server may recover); others fail at once
RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}
GOOGLE_DRIVE_HOSTS = {"drive.google.com", "drive.usercontent.google.com", "docs.google.com"}
CHUNK_SIZE = 1 << 20

_CHECKSUM_FORMS = {
    "sha256": re.compile(r"^[0-9a-f]{64}$"),
    "md5": re.compile(r"^[0-9a-f]{32}$"),
    "sha256-prefix": re.compile(r"^[0-9a-f]{8,63}$"),
    # the id git gives a file's content (sha1 of "blob <size>\0" + content), as a repository's tree names it
    "git-blob-sha1": re.compile(r"^[0-9a-f]{40}$"),
}


class DownloadError(RuntimeError):
    """A file could not be downloaded (network error, HTTP error, truncated transfer)."""


class ChecksumError(DownloadError):
    """A downloaded file does not have its pinned checksum; the file has been deleted."""


def sha256_of(path: str | Path, chunk_size: int = CHUNK_SIZE) -> str:
    """Hex sha256 of a file, read in chunks."""
    return _digest_of(path, "sha256", chunk_size)


def _digest_of(path: str | Path, algorithm: str, chunk_size: int = CHUNK_SIZE) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_checksum(checksum: str) -> tuple[str, str]:
    """Split a checksum pin into ``(form, value)``; raise :class:`ValueError` for an unknown form."""
    form, sep, value = checksum.partition(":")
    if not sep:
        raise ValueError(f"checksum {checksum!r} has no form; expected e.g. 'sha256:<64 hex digits>'")
    if form == "unpinned":
        if not value.strip():
            raise ValueError("checksum 'unpinned:' must say why no checksum is pinned")
        return form, value
    pattern = _CHECKSUM_FORMS.get(form)
    if pattern is None:
        raise ValueError(
            f"checksum {checksum!r}: unknown form {form!r}; "
            f"known forms: {', '.join([*_CHECKSUM_FORMS, 'unpinned'])}"
        )
    if not pattern.match(value):
        raise ValueError(f"checksum {checksum!r}: {form} needs lower-case hex digits of the right length")
    return form, value


def git_blob_sha1(path: str | Path, chunk_size: int = CHUNK_SIZE) -> str:
    """The git blob id of a file: sha1 of ``b"blob <size>\\0"`` followed by its bytes."""
    digest = hashlib.sha1(f"blob {Path(path).stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksum(path: str | Path, checksum: str, url: str | None = None, saved_as: str | Path | None = None) -> str:
    """Check ``path`` against the pin ``checksum``; return the file's full sha256.

    Raises :class:`ChecksumError` naming the URL (when given), where the file goes (``saved_as``,
    default ``path``), the expected and the actual checksum, and the file's size.
    """
    form, expected = parse_checksum(checksum)
    sha256 = sha256_of(path)
    if form == "unpinned":
        _logger.warning(
            "%s: no published checksum to verify (%s); its sha256 is %s", url or path, expected, sha256
        )
        return sha256
    if form == "md5":
        actual = _digest_of(path, "md5")
        ok = actual == expected
        shown = f"md5:{actual}"
    elif form == "git-blob-sha1":
        actual = git_blob_sha1(path)
        ok = actual == expected
        shown = f"git-blob-sha1:{actual}"
    elif form == "sha256-prefix":
        ok = sha256.startswith(expected)
        shown = f"sha256:{sha256}"
    else:
        ok = sha256 == expected
        shown = f"sha256:{sha256}"
    if not ok:
        where = f"{url} (saved as {saved_as or path})" if url else str(saved_as or path)
        size = Path(path).stat().st_size
        raise ChecksumError(f"checksum mismatch for {where}: expected {checksum}, got {shown} ({size} bytes)")
    return sha256


def rewrite_url(url: str, mirrors: Mapping[str, str] | None) -> str:
    """Apply the longest matching mirror prefix of ``mirrors`` to ``url``; a replacement without a scheme
    (``/data/uci/``, ``~/mirror/``, ``copies/``) is a local path, returned as its absolute ``file://`` URL."""
    if not mirrors:
        return url
    matches = [prefix for prefix in mirrors if url.startswith(prefix)]
    if not matches:
        return url
    prefix = max(matches, key=len)
    target = mirrors[prefix] + url[len(prefix):]
    if "://" not in mirrors[prefix]:
        return Path(urllib.parse.unquote(target)).expanduser().resolve().as_uri()
    return target


def _file_mode() -> int:
    """Permissions of a new file under the process umask (mkstemp's files are private: 0600)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o644


def is_google_drive(url: str) -> bool:
    return urllib.parse.urlsplit(url).hostname in GOOGLE_DRIVE_HOSTS


class _Retryable(DownloadError):
    """A failure worth another attempt (connection error, truncated body, 5xx)."""


def _open(url: str, timeout: float):
    if urllib.parse.urlsplit(url).scheme not in {"http", "https", "file"}:
        raise DownloadError(f"{url}: only http, https and file URLs can be downloaded")
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # follows redirects (301/302/303/307/308)
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:  # urllib gave up following: a loop, too many hops, or no Location
            raise DownloadError(
                f"{url}: redirect loop or too many redirects (gave up at HTTP {error.code} from {error.filename}); "
                "check the URL and downloads.mirrors"
            ) from None
        message = f"{url}: HTTP {error.code} {error.reason}"
        if error.code in RETRYABLE_STATUS:
            raise _Retryable(message) from error
        raise DownloadError(message) from error
    except (urllib.error.URLError, HTTPException, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError):
            raise _Retryable(f"{url}: no answer within {timeout:g} s (downloads.timeout)") from error
        raise _Retryable(f"{url}: cannot connect ({reason})") from error


def _stream(url: str, target: Path, timeout: float, progress: bool) -> None:
    """Write the body of ``url`` to ``target``; raise if fewer bytes arrive than announced."""
    from tqdm.auto import tqdm

    with _open(url, timeout) as response:
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        if response.headers.get("Content-Encoding", "identity") not in {"identity", ""}:
            expected = None  # the length counts encoded bytes; the checksum still decides
        received = 0
        name = Path(urllib.parse.urlsplit(url).path).name or url
        with open(target, "wb") as handle, tqdm(
            total=expected,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=name,
            disable=not progress,
            file=sys.stderr,
            leave=False,
        ) as bar:
            while True:
                try:
                    chunk = response.read1(CHUNK_SIZE)  # what has arrived, so a stall is seen at once
                except TimeoutError as error:
                    raise _Retryable(
                        f"{url}: the server stalled: nothing received for {timeout:g} s after {received} bytes "
                        "(downloads.timeout); try again later or raise downloads.timeout"
                    ) from error
                except (HTTPException, OSError) as error:  # IncompleteRead, reset
                    raise _Retryable(f"{url}: connection lost after {received} bytes ({error!r})") from error
                if not chunk:
                    break
                handle.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if expected is not None and received != expected:
        raise _Retryable(f"{url}: connection closed after {received} of {expected} bytes")


def _gdrive(url: str, target: Path, timeout: float, progress: bool) -> None:
    """Download a Google Drive file with gdown (handles the large-file confirmation page)."""
    import inspect

    import gdown

    wanted = {"url": url, "output": str(target), "quiet": not progress, "user_agent": USER_AGENT, "timeout": timeout}
    accepted = inspect.signature(gdown.download).parameters  # gdown 5 and 6 differ (timeout is new in 6)
    kwargs = {key: value for key, value in wanted.items() if key in accepted}
    try:
        result = gdown.download(**kwargs)
    except Exception as error:  # gdown raises its own exception types, requests' and OSError
        raise _Retryable(f"{url}: Google Drive download failed ({error})") from error
    if result is None or not target.is_file():
        raise _Retryable(f"{url}: Google Drive download failed (no file; the link may be dead or over quota)")


def fetch(
    download: "Download",
    destination: str | os.PathLike,
    *,
    mirrors: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    retries: int = 2,
    backoff: float = 2.0,
    progress: bool = True,
) -> Path:
    """Download ``download.url`` (after mirror rewriting) to ``destination`` and verify its checksum.

    The body is streamed to a temporary file beside ``destination`` and renamed onto it only after
    the checksum matches, so ``destination`` is either absent or complete and verified. A file already
    at ``destination`` with the right checksum is kept without downloading. Connection errors,
    truncated bodies and HTTP 408/429/5xx are retried ``retries`` times (waiting ``backoff``,
    ``2*backoff``, ... seconds); a checksum mismatch is not retried.

    Raises :class:`ChecksumError` (the file is deleted) or :class:`DownloadError`, both naming the URL.
    """
    destination = Path(destination)
    for stale in remove_stale_parts(destination):
        _logger.info("removed %s, left by an interrupted download", stale)
    url = rewrite_url(download.url, mirrors)
    shown = url if url == download.url else f"{url} (mirror of {download.url})"
    parse_checksum(download.checksum)  # a malformed pin fails before any transfer
    if destination.is_file():
        try:
            verify_checksum(destination, download.checksum, shown)
            return destination
        except ChecksumError:
            _logger.warning("%s exists but does not match %s; downloading it again", destination, download.checksum)
    local = urllib.parse.urlsplit(url)
    if local.scheme == "file" and not Path(urllib.request.url2pathname(local.path)).is_file():
        raise DownloadError(f"{urllib.request.url2pathname(local.path)}: no such file, the local copy of "
                            f"{download.url} that downloads.mirrors names")
    tmp = new_part_file(destination)
    try:
        for attempt in range(retries + 1):
            try:
                if is_google_drive(url):
                    _gdrive(url, tmp, timeout, progress)
                else:
                    _stream(url, tmp, timeout, progress)
                break
            except _Retryable as error:
                tmp.unlink(missing_ok=True)
                if attempt == retries:
                    raise DownloadError(
                        f"download of {shown} failed after {attempt + 1} attempt(s): {error}; no file was kept"
                    ) from error
                wait = backoff * 2**attempt
                _logger.warning("%s; retrying in %.1f s (%d/%d)", error, wait, attempt + 1, retries)
                time.sleep(wait)
        try:
            verify_checksum(tmp, download.checksum, shown, saved_as=destination)
        except ChecksumError as error:
            raise ChecksumError(f"{error}; the downloaded file was deleted") from None
        os.chmod(tmp, _file_mode())
        os.replace(tmp, destination)
    finally:
        tmp.unlink(missing_ok=True)
    return destination
