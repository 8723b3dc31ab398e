"""Checkpoint files: PyTorch weights read without running code, whoever wrote them.

Every network the project loads (the zoo's pinned checkpoints, a user's ``source: checkpoint`` file, the
networks it trains and caches) goes through :func:`load_weights`.
"""

from __future__ import annotations

from pathlib import Path

import torch


class CheckpointError(ValueError):
    """A weights file cannot be loaded (not a PyTorch checkpoint, or an unsafe one)."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint holds pickled objects other than tensors and plain containers; it was not loaded."""


def load_weights(source: str | Path | bytes, name: str | None = None):
    """``torch.load`` a checkpoint (a path, or the bytes of an archive member) onto the CPU.

    Always ``weights_only=True``: torch unpickles only tensors, plain containers and numbers, so a
    crafted file cannot run code. This is never relaxed, as a file pinned by a short hash prefix, an
    unpinned archive or a mirror could have been replaced. Every original checkpoint the zoo pins
    loads this way (akamaster's ``.th`` files are a dict of a ``state_dict`` and a float
    ``best_prec1``; the others are plain state dicts), so no extra class is allowed.

    ``name`` names ``source`` in errors (give it for bytes, e.g. ``archive.zip:member``). Raises
    :class:`UnsafeCheckpointError` when the file holds anything else, :class:`CheckpointError` when
    it is no PyTorch checkpoint; both name the file.
    """
    import io
    import pickle
    import re

    is_bytes = isinstance(source, (bytes, bytearray))
    shown = name or ("checkpoint bytes" if is_bytes else str(source))
    try:
        return torch.load(io.BytesIO(source) if is_bytes else source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL ([\w.]+)", str(error))
        if found is None:
            raise CheckpointError(
                f"{shown}: not a readable PyTorch checkpoint (the weights-only unpickler cannot parse it); "
                "delete the file and download it again"
            ) from None
        raise UnsafeCheckpointError(
            f"{shown}: refusing to unpickle this checkpoint: it holds a pickled {found.group(1)}, not only "
            "tensors and plain containers, and loading it could run arbitrary code. Delete the file and "
            "fetch the original (check downloads.mirrors if it came from a mirror)."
        ) from None
    except (RuntimeError, KeyError, EOFError, ValueError) as error:
        raise CheckpointError(
            f"{shown}: not a readable PyTorch checkpoint ({type(error).__name__}: {str(error)[:200]}); "
            "delete the file and download it again"
        ) from None


def strip_prefix(state_dict: dict, prefix: str = "module.") -> dict:
    """Remove a ``DataParallel`` prefix from every key that has it."""
    return {(key[len(prefix):] if key.startswith(prefix) else key): value for key, value in state_dict.items()}
