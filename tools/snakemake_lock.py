"""Tell a stale Snakemake lock (left by a killed run) from the lock of a run still going; remove only the former.

    python tools/snakemake_lock.py [DIRECTORY]            # exit 0: no lock, or a live run holds it;
                                                          # exit 3: stale lock, with what to do
    python tools/snakemake_lock.py --unlock [DIRECTORY]   # remove a stale lock (refused while a run is alive)

A lock is stale when ``DIRECTORY/.snakemake/locks`` holds lock files and no Snakemake process on this
machine works in ``DIRECTORY`` (its current directory, which Snakemake sets to ``--directory``). A
Snakemake on another machine sharing the directory cannot be seen from here: on a cluster, check
``squeue``/``ps`` on the other login nodes before unlocking. Needs Linux's /proc; elsewhere it never
calls a lock stale. ``make demo`` runs the check before Snakemake; ``make unlock`` runs ``--unlock``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

STALE = 3


def lock_files(directory: Path) -> list[Path]:
    folder = directory / ".snakemake" / "locks"
    return sorted(folder.glob("*.lock")) if folder.is_dir() else []


def _is_snakemake(argv: list[str]) -> bool:
    """``snakemake ...``, ``python -m snakemake ...`` or ``python .../bin/snakemake ...``."""
    for index, arg in enumerate(argv[:3]):
        if os.path.basename(arg) == "snakemake" or (arg == "-m" and argv[index + 1: index + 2] == ["snakemake"]):
            return True
    return False


def running_snakemakes(directory: Path) -> list[int] | None:
    """Process ids of the Snakemakes working in ``directory``; None when this system has no /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "cmdline").exists():
        return None
    target, found = directory.resolve(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if _is_snakemake(argv) and (entry / "cwd").resolve() == target:
                found.append(int(entry.name))
        except OSError:  # ended meanwhile, or another user's process whose cwd we cannot read
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", nargs="?", default=".", type=Path)
    parser.add_argument("--unlock", action="store_true", help="remove the lock if it is stale")
    args = parser.parse_args(argv)
    locks = lock_files(args.directory)
    if not locks:
        return 0
    alive = running_snakemakes(args.directory)
    if alive is None:
        print("cannot tell whether a Snakemake still runs here (no /proc); if none does, run "
              "`snakemake --unlock` with the same arguments", file=sys.stderr)
        return 0
    if alive:
        print(f"Snakemake is running in {args.directory.resolve()} (process {', '.join(map(str, alive))}); "
              "wait for it to finish", file=sys.stderr)
        return 0 if not args.unlock else 1
    if args.unlock:
        shutil.rmtree(args.directory / ".snakemake" / "locks")
        print(f"removed the stale Snakemake lock of {args.directory.resolve()}")
        return 0
    print(
        f"{args.directory.resolve()} is locked by a Snakemake run that was killed (no Snakemake runs here now).\n"
        "Remove the lock with `make unlock` (or `snakemake --unlock` with the arguments of that run), then run "
        "the same command again: finished outputs are kept.",
        file=sys.stderr,
    )
    return STALE


if __name__ == "__main__":
    sys.exit(main())
