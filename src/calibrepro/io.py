"""Files the pipeline reads and writes: atomic writes, JSON, and logits archives.

Every writer goes through :func:`atomic_path`, so an interrupted job never leaves a
partial file behind under the final name.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import socket
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

# mkstemp creates files readable by their owner only; generated files get the usual
# permissions instead (0666 less the umask, read once here, as setting it is process-wide).
_UMASK = os.umask(0)
os.umask(_UMASK)


_HOST = socket.gethostname()


def new_part_file(path: str | os.PathLike) -> Path:
    """Create an empty hidden temporary file beside ``path``: ``.<name>.<pid>@<host>.<random>.part``.

    The writer's process id and host in the name let :func:`remove_stale_parts` tell a file left by
    a killed writer from one still being written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}@{_HOST}.", suffix=".part", dir=path.parent)
    os.close(fd)
    return Path(tmp)


#: what follows ``.<name>.`` in a part file's name: ``<pid>@<host>.`` (absent in names written before
#: writers were recorded) and mkstemp's 8 random characters
_PART_MIDDLE = re.compile(r"^(?:(?P<pid>\d+)@(?P<host>.+)\.)?[a-z0-9_]{8}$")


def _is_stale(middle: str) -> bool:
    """Whether a part file whose name has ``middle`` was left by a writer that is gone."""
    found = _PART_MIDDLE.match(middle)
    if found is None:
        return False  # not a part file of this target (e.g. of ``<name>.png`` beside ``<name>``)
    if found["pid"] is None:
        return True  # no writer recorded: an old interrupted write that nobody finishes
    if found["host"] != _HOST:
        return False  # cannot be checked from here; its own host's next run removes it
    try:
        os.kill(int(found["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a running process of another user
        return False
    return False


def remove_stale_parts(path: str | os.PathLike) -> list[Path]:
    """Delete the ``.part`` files beside ``path`` that killed writers of ``path`` left; return them.

    Called by every writer of ``path`` before it writes (:func:`atomic_path`,
    :func:`calibrepro.download.fetch`): a write interrupted by SIGKILL or a power cut cannot clean
    up after itself, so the next run of the step that owns the file does. Part files of a writer
    that is still running are kept.
    """
    path = Path(path)
    prefix, removed = f".{path.name}.", []
    if not path.parent.is_dir():
        return removed
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*.part"):
        if _is_stale(candidate.name[len(prefix): -len(".part")]):
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
    return removed


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    Part files that killed earlier writers of ``path`` left behind are removed first.
    """
    remove_stale_parts(path)
    tmp = new_part_file(path)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


class NonFiniteValueError(ValueError):
    """A writer was handed NaN or an infinity; the message names the file and the key or row (nothing is written)."""


def _non_finite_key(data, key: str = "") -> str | None:
    """The path (``a.b[3]``) of the first NaN or infinite float in JSON-like ``data``, or None."""
    if isinstance(data, (float, np.floating)):
        return None if np.isfinite(data) else key or "<top level>"
    if isinstance(data, dict):
        items = ((f"{key}.{k}" if key else str(k), v) for k, v in data.items())
    elif isinstance(data, (list, tuple)):
        items = ((f"{key}[{i}]", v) for i, v in enumerate(data))
    else:
        return None
    return next((found for k, v in items if (found := _non_finite_key(v, k)) is not None), None)


def write_json(path: str | os.PathLike, data) -> None:
    """Write ``data`` as indented JSON with sorted keys (byte-stable for equal data).

    Refuses NaN and infinities (JSON has none) with :class:`NonFiniteValueError` naming the file and the key.
    """
    try:
        text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
    except (ValueError, TypeError):
        # only a refused document is searched for its key (the search costs as much as the dump itself)
        bad = _non_finite_key(data)
        if bad is None:
            raise
        raise NonFiniteValueError(
            f"{path}: refusing to write a NaN or infinite value at {bad}; nothing was written"
        ) from None
    write_text(path, text + "\n")


def tidy_csv(columns, rows, where: str | os.PathLike = "a CSV file") -> str:
    """CSV text of ``rows`` under the header ``columns``, one line per row.

    Floats are written with ``repr`` (the shortest exact round trip), so equal values give equal
    bytes and reading the file back gives the same doubles. Every tidy table of the pipeline
    (metrics, intervals, comparisons, size study) is written through here by its owning module.
    A NaN or infinite float raises :class:`NonFiniteValueError` naming ``where`` (the file), the line
    and the row.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for line, row in enumerate(rows, start=2):
        cells = []
        for i, v in enumerate(row):
            if isinstance(v, (float, np.floating)):
                if not np.isfinite(v):
                    shown = ", ".join(f"{c}={x}" for c, x in zip(columns, row))
                    column = columns[i] if i < len(columns) else i
                    raise NonFiniteValueError(
                        f"{where}: refusing to write {float(v)!r} in column {column!r} of line {line} ({shown}); "
                        "nothing was written"
                    )
                v = repr(float(v))
            cells.append(v)
        writer.writerow(cells)
    return buffer.getvalue()


def write_csv(path: str | os.PathLike, columns, rows) -> None:
    """Write the tidy CSV of ``rows`` (:func:`tidy_csv`) atomically; NaN or infinity refused, naming ``path``."""
    write_text(path, tidy_csv(columns, rows, where=path))


def read_tidy_csv(path, columns, error=ValueError) -> Iterator[tuple[int, dict]]:
    """``(line number, row)`` of each data row of a tidy CSV file that must hold ``columns``.

    Raises ``error`` when the file does not exist or lacks one of ``columns``; the values are the
    caller's to check (their messages should name ``path`` and the line).
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such file")
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise error(f"{path}: missing column(s) {missing}; expected {list(columns)}")
        yield from enumerate(reader, start=2)


def concatenate_csv(inputs, output, columns, error=ValueError, what: str = "a tidy CSV file") -> int:
    """Write ``output``: the tidy CSV files ``inputs`` (each under the header ``columns``) in order.

    Raises ``error`` naming the first file with another header (``what`` says what it should be);
    returns the number of rows written.
    """
    header = ",".join(columns) + "\n"
    parts = [header]
    for path in inputs:
        text = Path(path).read_text(encoding="utf-8")
        if not text.startswith(header):
            raise error(f"{path}: not {what} (expected the header {header.strip()!r})")
        parts.append(text[len(header):])
    write_text(output, "".join(parts))
    return sum(part.count("\n") for part in parts[1:])


def read_json(path: str | os.PathLike):
    """Read a JSON file."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


class LogitsFileError(ValueError):
    """A logits archive is missing arrays or holds values the pipeline cannot use."""


@dataclass
class Logits:
    """Logits of one model on one evaluation set, with the true labels."""

    logits: np.ndarray  # (N, K) float32
    labels: np.ndarray | None  # (N,) int64; None for an archive read with ``labels=False`` that has none
    metadata: dict = field(default_factory=dict)

    @property
    def num_classes(self) -> int:
        return self.logits.shape[1]


def _check_shapes(logits, labels, where: str) -> np.ndarray | None:
    """Check the shape and dtype of the logits (without reading them) and the labels (if any); return the labels."""
    if logits.ndim != 2:
        raise LogitsFileError(f"{where}: 'logits' must be a 2-D array (N, K), got shape {logits.shape}")
    n, k = logits.shape
    if n < 2 or k < 2:
        raise LogitsFileError(f"{where}: 'logits' needs at least 2 samples and 2 classes, got shape {logits.shape}")
    if not np.issubdtype(logits.dtype, np.floating):
        raise LogitsFileError(f"{where}: 'logits' must hold floating-point numbers, got dtype {logits.dtype}")
    if labels is None:
        return None
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise LogitsFileError(f"{where}: 'labels' must be a 1-D array (N,), got shape {labels.shape}")
    if labels.shape[0] != n:
        raise LogitsFileError(f"{where}: 'labels' has {labels.shape[0]} entries but 'logits' has {n} rows")
    if np.issubdtype(labels.dtype, np.floating):
        if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
            raise LogitsFileError(f"{where}: 'labels' must be integer class indices, got non-integer values")
    elif not np.issubdtype(labels.dtype, np.integer):
        raise LogitsFileError(f"{where}: 'labels' must be integer class indices, got dtype {labels.dtype}")
    bad = (labels < 0) | (labels >= k)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise LogitsFileError(
            f"{where}: label {labels[first]} at row {first} is outside the {k} classes [0, {k - 1}] of 'logits'"
        )
    return labels.astype(np.int64, copy=False)


def validate_logits(logits, labels, where: str = "logits", rows=None) -> Logits:
    """Check shapes, dtypes and values of a logits/labels pair; return them as float32/int64.

    ``rows`` (sample indices) keeps only those samples: the labels are checked in full, the logits
    only in the kept rows (of a memory-mapped array only those are read); messages number the rows
    of the whole array.  Raises :class:`LogitsFileError` naming ``where`` and what to fix.
    """
    logits = logits if isinstance(logits, np.ndarray) else np.asarray(logits)
    labels = _check_shapes(logits, labels, where)
    if rows is None:
        rows = np.arange(logits.shape[0])
        # a mapped file is read into memory (never kept as a view of the file); an array is only cast
        mapped = isinstance(logits, np.memmap)
        logits = np.array(logits, dtype=np.float32) if mapped else logits.astype(np.float32, copy=False)
    else:
        rows = np.asarray(rows, dtype=np.int64)
        logits = np.asarray(logits[rows], dtype=np.float32)
    finite = np.isfinite(logits)
    if not finite.all():
        bad_rows = rows[np.flatnonzero(~finite.all(axis=1))]
        raise LogitsFileError(
            f"{where}: 'logits' holds NaN or infinite values in {bad_rows.size} row(s), first at row {bad_rows.min()}"
        )
    return Logits(logits, None if labels is None else labels[rows])


#: the largest array a logits archive may declare (elements): 2**32 float32 values are 16 GiB, far above
#: ImageNet's 50,000 x 1,000; a larger shape in a member's header is a corrupt or crafted file
MAX_ARRAY_ELEMENTS = 2**32
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_HOW_TO_WRITE = "write it with numpy.savez(path, logits=logits, labels=labels)"


def archive_members(path: str | os.PathLike) -> dict[str, tuple]:
    """Shape, order, dtype and data offset of an .npz's uncompressed members, from their headers only."""
    return _check_archive(Path(path))


def _check_archive(path: Path) -> dict[str, tuple]:
    """Reject files that are no .npz and members whose header declares an impossible array, before loading.

    Reads only the magic bytes and each member's ``.npy`` header (numpy.lib.format), so a header
    declaring 10**14 elements fails here instead of allocating.  Returns, for each member stored
    uncompressed (``numpy.savez``), ``name -> (shape, fortran_order, dtype, offset of its data)``.
    """
    import zipfile

    from numpy.lib import format as npy_format

    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic == npy_format.MAGIC_PREFIX:
        raise LogitsFileError(
            f"{path}: this is a single NumPy array (.npy) under an .npz name; the file must be an .npz archive "
            f"holding two arrays: {_HOW_TO_WRITE}"
        )
    if magic[:4] not in _ZIP_MAGIC:
        raise LogitsFileError(f"{path}: not a NumPy archive (.npz is a zip file of arrays); {_HOW_TO_WRITE}")
    stored = {}
    try:
        with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
            for member in archive.infolist():
                if not member.filename.endswith(".npy"):
                    continue
                with archive.open(member) as stream:
                    version = npy_format.read_magic(stream)
                    read_header = (
                        npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
                    )  # 2.0 and 3.0 headers share a layout (3.0 only allows utf-8 field names)
                    shape, fortran_order, dtype = read_header(stream)
                    header_bytes = stream.tell()
                    data_bytes = member.file_size - header_bytes
                elements = int(np.prod(shape, dtype=object))
                name = member.filename[: -len(".npy")]
                if elements > MAX_ARRAY_ELEMENTS or elements * dtype.itemsize > data_bytes:
                    raise LogitsFileError(
                        f"{path}: array {name!r} declares shape {shape} ({elements:.3g} values of {dtype}), more than "
                        f"the file holds or any logits archive needs (at most {MAX_ARRAY_ELEMENTS:.3g}); the file is "
                        f"corrupt: {_HOW_TO_WRITE}"
                    )
                if member.compress_type == zipfile.ZIP_STORED and not dtype.hasobject:
                    raw.seek(member.header_offset)
                    local = raw.read(30)  # the member's local file header: its name and extra field follow
                    skip = int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
                    stored[name] = (shape, fortran_order, dtype, member.header_offset + 30 + skip + header_bytes)
    except (zipfile.BadZipFile, ValueError, EOFError) as error:
        if isinstance(error, LogitsFileError):
            raise
        raise LogitsFileError(f"{path}: not a readable .npz archive ({error}); {_HOW_TO_WRITE}") from None
    return stored


def load_logits(path: str | os.PathLike, rows=None, *, labels: bool = True) -> Logits:
    """Read and validate a logits archive (``.npz`` with arrays ``logits`` and ``labels``).

    ``rows`` (sample indices, e.g. one half of a split) reads only those samples. ``labels=False``
    also reads an archive without labels (new data to calibrate): its :attr:`Logits.labels` is None.  The logits of an
    uncompressed archive (``numpy.savez``, as the pipeline writes them) are memory-mapped, so only
    the rows asked for are read from the page cache: at ImageNet's 50,000 x 1,000 one half takes
    0.03 s instead of 0.1-0.7 s for reading the whole array through the zip reader (measured on the
    2-core build machine), and half the memory.  Mapped members skip the zip's CRC check (the
    labels and compressed members keep it); the values are checked as always.
    """
    with _open_logits(path, labels) as (logits, stored_labels, archive):
        result = validate_logits(logits, stored_labels, where=str(path), rows=rows)
        if "metadata" in archive.files:
            result.metadata = json.loads(str(archive["metadata"]))
    return result


def logits_summary(archive: Logits) -> str:
    """``N samples, K classes, top-1 accuracy A`` of a checked archive with labels (what check-logits prints)."""
    n, k = archive.logits.shape
    accuracy = float((archive.logits.argmax(axis=1) == archive.labels).mean())
    return f"{n} samples, {k} classes, top-1 accuracy {accuracy:.4f}"


def load_labels(path: str | os.PathLike) -> np.ndarray:
    """The labels of a logits archive (int64), checked as :func:`load_logits` checks them, logits unread."""
    with _open_logits(path) as (logits, labels, _):
        return _check_shapes(logits, labels, str(path))


def _shape_and_labels(path: str | os.PathLike) -> Logits:
    """A logits archive's labels and its logits unread (mapped where stored uncompressed), their shapes checked."""
    with _open_logits(path) as (logits, labels, _):
        return Logits(logits, _check_shapes(logits, labels, str(path)))


@contextmanager
def _open_logits(path: str | os.PathLike, labels: bool = True):
    """``(logits, labels, archive)`` of a logits archive: the logits memory-mapped where stored uncompressed.

    ``labels=False``: the labels may be missing (None)."""
    path = Path(path)
    if not path.is_file():
        raise LogitsFileError(f"{path}: no such file")
    stored = _check_archive(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = ({"logits", "labels"} if labels else {"logits"}) - set(archive.files)
            if missing:
                raise LogitsFileError(
                    f"{path}: missing array(s) {sorted(missing)}; the file must hold 'logits' (N, K) and 'labels' (N,)"
                )
            if "logits" in stored:
                shape, fortran_order, dtype, offset = stored["logits"]
                order = "F" if fortran_order else "C"
                logits = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
            else:
                logits = archive["logits"]
            yield logits, archive["labels"] if "labels" in archive.files else None, archive
    except (OSError, ValueError) as error:
        if isinstance(error, LogitsFileError):
            raise
        raise LogitsFileError(f"{path}: not a readable .npz archive ({error})") from error


def check_agreement(files: Mapping[str, str | os.PathLike], group: str = "files given together") -> None:
    """Check that logits archives meant for one data set agree: same N, same K, the same labels in order.

    ``files`` maps what to call each file in a message (its path, or ``model (path)``) to its path;
    ``group`` says what they have in common (e.g. ``data set 'mydata'``). Each file is compared with
    the first by its shape and labels, its logits unread (their values are each file's own check,
    :func:`load_logits`). Raises :class:`LogitsFileError` naming both files and both counts.
    """
    if len(files) < 2:
        return
    items = iter(files.items())
    first_name, first_path = next(items)
    first = _shape_and_labels(first_path)
    fix = "all must hold the logits of the same evaluation samples in the same order"
    for name, path in items:
        other = _shape_and_labels(path)
        (n1, k1), (n2, k2) = first.logits.shape, other.logits.shape
        if n1 != n2:
            raise LogitsFileError(f"{group}: {first_name} has {n1} samples but {name} has {n2}; {fix}")
        if k1 != k2:
            raise LogitsFileError(
                f"{group}: {first_name} has {k1} classes but {name} has {k2}; models compared together must "
                "share one label set"
            )
        differ = np.flatnonzero(first.labels != other.labels)
        if differ.size:
            raise LogitsFileError(
                f"{group}: {first_name} and {name} have different labels in {differ.size} of {n1} rows "
                f"(first at row {differ[0]}); {fix}"
            )


def save_logits(path: str | os.PathLike, logits, labels, metadata: dict | None = None) -> None:
    """Validate and write a logits archive atomically, with ``metadata`` stored as JSON."""
    checked = validate_logits(logits, labels, where=str(path))
    meta = json.dumps(metadata or {}, sort_keys=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, logits=checked.logits, labels=checked.labels, metadata=np.array(meta))
