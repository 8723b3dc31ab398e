"""Compare two output trees file by file (sha256): what a change of the code did to a run's outputs.

    .venv/bin/python tools/compare_runs.py BEFORE AFTER [--ignore GLOB ...]

BEFORE and AFTER are folders (e.g. two copies of ``results/demo`` and ``reports/demo``, or the
working folders of two runs). Every file below each is hashed; the files that differ, and those
present on one side only, are listed by their path relative to the folder. ``--ignore`` leaves out
paths matching a glob (``fnmatch``, on the relative path; e.g. ``'*/logs/*'`` for the step logs,
which record timings). Exit status: 0 when both trees hold the same files with the same bytes,
1 otherwise.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from calibrepro.download import sha256_of


def digests(root: Path, ignore: list[str]) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``root`` that no ``ignore`` glob matches."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not any(fnmatch.fnmatch(relative, pattern) for pattern in ignore):
            found[relative] = sha256_of(path)
    return found


def compare(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per difference: ``differs``, ``only before``, ``only after``."""
    lines = [f"differs      {path}" for path in sorted(before.keys() & after.keys()) if before[path] != after[path]]
    lines += [f"only before  {path}" for path in sorted(before.keys() - after.keys())]
    lines += [f"only after   {path}" for path in sorted(after.keys() - before.keys())]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--ignore", action="append", default=[], metavar="GLOB", help="leave out matching paths")
    args = parser.parse_args()
    for root in (args.before, args.after):
        if not root.is_dir():
            parser.error(f"{root}: not a folder")
    before, after = digests(args.before, args.ignore), digests(args.after, args.ignore)
    lines = compare(before, after)
    same = sum(1 for path in before.keys() & after.keys() if before[path] == after[path])
    print("\n".join(lines + [f"{same} identical, {len(lines)} different or on one side only "
                             f"({len(before)} files before, {len(after)} after)"]))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
