"""Check this machine: does the demo give the published bytes here, and if not, which part differs and why?

    python tools/verify_demo.py [--cores N]    # run the demo in a temporary folder, then compare (`make verify`)
    python tools/verify_demo.py --root DIR     # compare the demo outputs already under DIR

Compares the sha256 of every table and CSV of the demo with docs/demo-sha256.json (written by
tools/readme_demo.py from the developers' run) and prints "identical", or each file that differs with its
first differing lines. Where the networks trained here gave other logits than the published ones, it
separates the two parts of the promise (docs/reproducibility.md): it runs the analysis alone on the
published logits (docs/demo-logits/), which must give the published bytes on every processor, says
how many tables the trained networks' difference reaches and which findings of the reproduction
reports still agree, and names the primitives of this processor's kernel fingerprint that differ from
the reference processor's (docs/fingerprints/). Then the machine's facts a report needs.
Exit status: 0 identical, or the analysis identical and the networks' difference explained by the
fingerprint; 1 otherwise (a broken promise: please report it); 2 the demo could not run.
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
import textwrap
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from calibrepro import determinism, fingerprint
from readme_demo import (CHECKSUMS, PUBLISHED_LOGITS, REPOSITORY, DemoOutputError, checksums, is_analysis, line_digests,
                         logits_that_differ, published_inputs_config, verdicts)

#: the differing lines printed per file
SHOWN_LINES = 5
LIBRARIES = ("calibrepro", "torch", "numpy", "scipy", "scikit-learn", "snakemake")


def run_demo(workdir: Path, cores: int, *options: str) -> None:
    """``snakemake --cores N`` with this checkout's Snakefile, writing into ``workdir``; its output to a log there."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPOSITORY / "Snakefile"),
               "--directory", str(workdir), "--cores", str(cores), *options]
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


def compare(root: Path, published: dict[str, dict[str, str]], keep=lambda name: True) -> list[str]:
    """The report of each published file under ``root`` that differs, is missing or is not published; empty if none.
    ``keep``: which of the files under ``root`` to compare (all by default)."""
    found = {name: entry for name, entry in checksums(root).items() if keep(name)}
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

    cpu = fingerprint.cpu()
    libc = cpu["glibc"] or "C library unknown"
    built = [line.strip(" -") for line in torch.__config__.show().splitlines() if "Math Kernel Library" in line
             or "MKL-DNN" in line]  # the MKL and oneDNN that torch bundles
    facts = [
        f"processor: {cpu['vendor_id'] or 'vendor unknown'}, {cpu['model_name'] or 'model unknown'} (family "
        f"{cpu['family'] or '?'}, model {cpu['model'] or '?'}, stepping {cpu['stepping'] or '?'}; "
        f"{platform.machine()}, {libc})",
        "flags: " + ", ".join(f"{flag} {'yes' if cpu[flag] else 'no'}" for flag in ("avx2", "fma", "avx512f")),
        *(f"{key}: {_kernels(value)}" for key, value in determinism.describe().items()),  # pinned, torch's capability
        f"python {platform.python_version()}; " + ", ".join(f"{name} {_version(name)}" for name in LIBRARIES),
        *(f"torch: {line}" for line in built),
    ]
    for library in sorted(threadpool_info(), key=lambda library: library["filepath"]):
        details = [library.get("version"), library.get("architecture"), Path(library["filepath"]).name]
        facts.append(f"{library['internal_api']}: " + ", ".join(str(item) for item in details if item))
    return facts


def read_list(path: Path) -> dict:
    """The published list: its files' digests, the reference processor and the reproduction reports' verdicts."""
    try:
        published = json.loads(path.read_text(encoding="utf-8"))
        published["files"], published.setdefault("verdicts", {}), published.setdefault("machine", "unknown")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DemoOutputError(f"{path}: not a list of sha256 as tools/readme_demo.py writes it ({error})") from None
    return published


def analysis_report(published: dict, cores: int, logits: Path) -> tuple[bool, str]:
    """Run the analysis alone on the published logits (under ``logits``) in a temporary folder; whether it gives the
    published bytes, and the sentence that says so (or the files that differ)."""
    listed = {name: entry for name, entry in published["files"].items() if is_analysis(name)}
    workdir = Path(tempfile.mkdtemp(prefix="calibrepro-verify-analysis-"))
    print(f"verify: running the analysis alone on the published logits ({logits}) in {workdir}", flush=True)
    run_demo(workdir, cores, "--configfile", str(published_inputs_config(workdir / "published-inputs.yaml", logits)))
    differ = compare(workdir, listed, keep=is_analysis)
    shutil.rmtree(workdir)
    if differ:
        return False, ("the analysis of the published logits does NOT give the published bytes, a bug (please "
                       "report it with this output):\n" + "\n".join(f"  {line}" for line in differ))
    return True, (f"the analysis of the published logits is identical: all {len(listed)} of its tables and CSVs have "
                  f"the published sha256")


def verdict_report(root: Path, published: dict) -> str:
    """How many findings of the reproduction reports have the published verdict here, naming those that do not."""
    ours, theirs = verdicts(root), published["verdicts"]
    pairs = [(key, theirs[name][key], rows.get(key)) for name, rows in ours.items() if name in theirs
             for key in theirs[name]]
    other = [f"{key}: {mine or 'missing'} (published: {verdict})" for key, verdict, mine in pairs if mine != verdict]
    text = f"{len(pairs) - len(other)} of the {len(pairs)} findings of the reproduction reports have the published verdict"
    return text + "".join(f"\n  {line}" for line in other)


def fingerprint_report(reference_name: str, folder: Path) -> tuple[list[str], str]:
    """This processor's kernel fingerprint against the reference processor's (in ``folder``): the training primitives
    that differ, and the report (calibrepro fingerprint --compare)."""
    path = folder / f"{reference_name}.json"
    if not path.is_file():
        return [], f"no kernel fingerprint of the reference processor {reference_name} in {folder}"
    ours, reference = fingerprint.measure(), fingerprint.load(path)
    summary = fingerprint.summary(ours, reference, str(path))
    return fingerprint.compare(ours, reference)["training"], "kernel fingerprint:\n" + textwrap.indent(summary, "  ")


def explain(root: Path, published: dict, report: list[str], trained: list[str],
            args: argparse.Namespace) -> tuple[bool, list[str]]:
    """Where the demo's outputs differ from the published ones (their logits and fingerprints in ``args``; the models
    whose logits differ: ``trained``): whether the promise still holds here, and the sentences that say why."""
    if not trained:
        return False, ["the networks trained here gave the published logits, yet outputs differ: a bug (please report "
                       "it with this output)"]
    affected = sum(not line.startswith(" ") for line in report)  # one line a file, then its differing lines
    analysis_holds, analysis = analysis_report(published, args.cores, args.logits)
    primitives, kernels = fingerprint_report(published["machine"], args.fingerprints)
    lines = [
        f"the networks trained on this processor ({fingerprint.machine_name()}) differ in their last bits from those "
        f"of the reference processor ({published['machine']}): the logits of {', '.join(trained)}; {affected} of the "
        f"{len(published['files'])} tables and CSVs differ (docs/reproducibility.md says where the bytes are promised)",
        analysis,
        verdict_report(root, published),
        kernels,
    ]
    if analysis_holds and not primitives:
        lines.append("no training primitive of the fingerprint differs, yet the networks do: a kernel the fingerprint "
                     "does not measure (please report it with this output)")
    return analysis_holds and bool(primitives), lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="compare the demo outputs under this folder instead of running the demo")
    parser.add_argument("--cores", type=int, default=2, help="cores for the demo run (the numbers do not depend on it)")
    parser.add_argument("--list", type=Path, default=REPOSITORY / CHECKSUMS, help="the published sha256 list")
    parser.add_argument("--logits", type=Path, default=REPOSITORY / PUBLISHED_LOGITS, help="the published demo logits")
    parser.add_argument("--fingerprints", type=Path, default=REPOSITORY / fingerprint.FOLDER,
                        help="the kernel fingerprints of the processors the list may come from")
    args = parser.parse_args(argv)
    try:
        published = read_list(args.list)
        root = args.root
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="calibrepro-verify-"))
            print(f"verify: running the demo in {root} (about a minute on two cores)", flush=True)
            run_demo(root, args.cores)  # a failed run keeps the folder: its log says why
        report = compare(root, published["files"])
        trained = logits_that_differ(root, args.logits) if report else []
        holds, lines = explain(root, published, report, trained, args) if report else (True, [])
        if args.root is None:
            shutil.rmtree(root)
    except DemoOutputError as error:
        print(f"verify: {error}", file=sys.stderr)
        return 2
    if report:
        print(f"verify: the demo's outputs differ from the published ones ({args.list}):")
        shown = [line for line in report if not trained or not line.startswith(" ")]  # networks differ: files only
        print("\n".join(f"  {line}" for line in shown))
        print("\n".join(f"verify: {line}" for line in lines))
    else:
        print(f"verify: identical: all {len(published['files'])} tables and CSVs of the demo have the published sha256 "
              f"({args.list})")
    print("machine (please include it in a report of a difference):")
    print("\n".join(f"  {line}" for line in machine_facts()))
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
