"""Names close to a mistyped one, for the "did you mean" part of error messages (difflib's ratio)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest_name(name, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (similarity ratio >= 0.6), or None."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def closest(name: str, known: list[str], n: int = 5) -> str:
    """Up to ``n`` known names close to ``name`` (ratio >= 0.5), comma-separated; "none close" without any."""
    return ", ".join(difflib.get_close_matches(name, known, n=n, cutoff=0.5)) or "none close"
