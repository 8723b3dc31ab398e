"""Check this machine: does the demo give the published bytes here?

    python tools/verify_demo.py [--cores N]    # run the demo in a temporary folder, then compare (`make verify`)
    python tools/verify_demo.py --root DIR     # compare the demo outputs already under DIR

Compares the sha256 of every table and CSV of the demo with docs/demo-sha256.json (written by
tools/readme_demo.py from the developers' run), prints "identical" or each file that differs with its
first differing lines, then the machine's facts a report of a difference needs: processor, the
kernel variables calibrepro pinned, library versions, BLAS. Exit status: 0 identical, 1 different,
2 the demo could not run.
"""

from __future__ import annotations

import argparse
import difflib
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from calibrepro import determinism
from readme_demo import CHECKSUMS, REPOSITORY, DemoOutputError, checksums, line_digests

#: the differing lines printed per file
SHOWN_LINES = 5
LIBRARIES = ("calibrepro", "torch", "numpy", "scipy", "scikit-learn", "snakemake")


def run_demo(workdir: Path, cores: int) -> None:
    """``snakemake --cores N`` with this checkout's Snakefile, writing into ``workdir``; its output to a log there."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPOSITORY / "Snakefile"),
               "--directory", str(workdir), "--cores", str(cores)]
    log = workdir / "snakemake.log"
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
        try:
            status = process.wait()
        except KeyboardInterrupt:  # Snakemake had the Ctrl-C too: it ends its jobs and says so in its log
            process.wait()
            raise DemoOutputError(f"interrupted; the unfinished run is in {workdir}") from None
    if status != 0:
        raise DemoOutputError(f"the demo run failed (exit status {status}); its output is in {log}")


def _lines_that_differ(published: list[str], ours: bytes) -> list[int]:
    """Indexes of the lines of ``ours`` that the published line digests do not have in their place (a line diff)."""
    changed = []
    matcher = difflib.SequenceMatcher(None, published, line_digests(ours), autojunk=False)
    for tag, _, _, start, end in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            changed += range(start, end)
        elif tag == "delete":
            changed.append(start)  # published lines missing here: shown by the line now in their place
    return sorted(set(changed))


def compare(root: Path, published: dict[str, dict[str, str]]) -> list[str]:
    """The report of each published file under ``root`` that differs, is missing or is not published; empty if none."""
    found = checksums(root)
    report = []
    for name in sorted(published.keys() - found.keys()):
        report.append(f"{name}: missing (the demo did not write it)")
    for name in sorted(found.keys() - published.keys()):
        report.append(f"{name}: not in the published list (a file the published demo does not write)")
    for name in sorted(published.keys() & found.keys()):
        if published[name]["sha256"] == found[name]["sha256"]:
            continue
        data = (root / name).read_bytes()
        ours = data.splitlines()
        differ = _lines_that_differ(published[name]["lines"].split(), data)
        head = f"{name}: {len(differ)} of its {len(ours)} lines differ"
        if name.endswith(".csv") and ours:
            head += f"; columns: {ours[0].decode('utf-8', 'replace')}"
        report.append(head)
        report += [f"    line {i + 1}: {ours[i].decode('utf-8', 'replace')}" if i < len(ours) else
                   f"    after line {len(ours)}: lines missing" for i in differ[:SHOWN_LINES]]
        if len(differ) > SHOWN_LINES:
            report.append(f"    ... and {len(differ) - SHOWN_LINES} more")
    return report


def _cpuinfo() -> dict[str, str]:
    facts = {}
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                facts.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return facts


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _kernels(value) -> str:
    """A value of :func:`calibrepro.determinism.describe`, the pinned variables as ``NAME=value`` pairs."""
    if isinstance(value, dict):
        pairs = ", ".join(f"{key}={item}" for key, item in value.items())
        return pairs or "nothing (no AVX2 and FMA here, or CALIBREPRO_NATIVE_KERNELS set)"
    return str(value)


def machine_facts() -> list[str]:
    """What a report of a difference needs: processor, pinned kernels, versions, BLAS libraries."""
    import numpy  # noqa: F401  imported (after calibrepro, as in every step) for threadpoolctl to see its BLAS
    import scipy.linalg  # noqa: F401
    import torch
    from threadpoolctl import threadpool_info

    cpu = _cpuinfo()
    flags = determinism.cpu_flags()
    libc = " ".join(filter(None, platform.libc_ver())) or "C library unknown"
    built = [line.strip(" -") for line in torch.__config__.show().splitlines() if "Math Kernel Library" in line
             or "MKL-DNN" in line]  # the MKL and oneDNN that torch bundles
    facts = [
        f"processor: {cpu.get('vendor_id', 'vendor unknown')}, {cpu.get('model name', 'model unknown')} (family "
        f"{cpu.get('cpu family', '?')}, model {cpu.get('model', '?')}, stepping {cpu.get('stepping', '?')}; "
        f"{platform.machine()}, {libc})",
        "flags: " + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in ("avx2", "fma", "avx512f")),
        *(f"{key}: {_kernels(value)}" for key, value in determinism.describe().items()),  # pinned, torch's capability
        f"python {platform.python_version()}; " + ", ".join(f"{name} {_version(name)}" for name in LIBRARIES),
        *(f"torch: {line}" for line in built),
    ]
    for library in sorted(threadpool_info(), key=lambda library: library["filepath"]):
        details = [library.get("version"), library.get("architecture"), Path(library["filepath"]).name]
        facts.append(f"{library['internal_api']}: " + ", ".join(str(item) for item in details if item))
    return facts


def read_list(path: Path) -> dict[str, dict[str, str]]:
    """The published list's files and their digests."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError) as error:
        raise DemoOutputError(f"{path}: not a list of sha256 as tools/readme_demo.py writes it ({error})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="compare the demo outputs under this folder instead of running the demo")
    parser.add_argument("--cores", type=int, default=2, help="cores for the demo run (the numbers do not depend on it)")
    parser.add_argument("--list", type=Path, default=REPOSITORY / CHECKSUMS, help="the published sha256 list")
    args = parser.parse_args(argv)
    try:
        published = read_list(args.list)
        if args.root is not None:
            report = compare(args.root, published)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="calibrepro-verify-"))
            print(f"verify: running the demo in {workdir} (about two minutes on two cores)", flush=True)
            run_demo(workdir, args.cores)  # a failed run keeps the folder: its log says why
            report = compare(workdir, published)
            shutil.rmtree(workdir)
    except DemoOutputError as error:
        print(f"verify: {error}", file=sys.stderr)
        return 2
    if report:
        print(f"verify: the demo's outputs differ from the published ones ({args.list}):")
        print("\n".join(f"  {line}" for line in report))
    else:
        print(f"verify: identical: all {len(published)} tables and CSVs of the demo have the published sha256 "
              f"({args.list})")
    print("machine (please include it in a report of a difference):")
    print("\n".join(f"  {line}" for line in machine_facts()))
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
