"""Faults: writers killed with SIGKILL leave hidden .part files that the next run of the step that owns
them removes; the demo killed with SIGKILL, or stopped by a full disk, reruns to the bytes of an
undisturbed run; and ``make verify`` (tools/verify_demo.py) compares that undisturbed run with a list."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from calibrepro import fingerprint
from calibrepro.download import fetch
from calibrepro.io import atomic_path, load_logits, new_part_file, remove_stale_parts, save_logits, write_json
from calibrepro.reliability import reliability_bins
from calibrepro.report.figures import write_reliability_figure
from calibrepro.zoo import Download
from servers import sha256_hex
from workflow_helpers import ROOT, run_in_group, run_snakemake, snakemake_command

SRC = Path(__file__).resolve().parents[1] / "src"
PAYLOAD = bytes(range(256)) * 4096 * 4  # 4 MiB


def start(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def parts(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.part"))


def wait_for(condition, process, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the writer ended early: {process.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the writer never got that far")
        time.sleep(0.02)


def kill(process):
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def test_a_killed_download_leaves_a_part_that_the_next_fetch_removes(file_server, tmp_path):
    pin = f"sha256:{sha256_hex(PAYLOAD)}"
    url = file_server.add_stalled("/weights.th", PAYLOAD, cut=1_000_000, stall=120)
    target = tmp_path / "downloads" / "weights.th"
    writer = start(
        """
        import sys
        from calibrepro.download import fetch
        from calibrepro.zoo import Download
        fetch(Download(sys.argv[1], sys.argv[2], "weights.th"), sys.argv[3], timeout=120, progress=False)
        """,
        url, pin, str(target),
    )
    wait_for(lambda: any(p.stat().st_size >= 1_000_000 for p in parts(target.parent)), writer)
    assert remove_stale_parts(target) == []  # its writer is alive: kept
    kill(writer)
    (left,) = parts(target.parent)
    assert left.name.startswith(".weights.th.") and left.stat().st_size == 1_000_000

    file_server.add_file("/weights.th", PAYLOAD)  # the next run
    fetch(Download(url, pin, "weights.th"), target, backoff=0, progress=False)
    assert sorted(p.name for p in target.parent.iterdir()) == ["weights.th"]
    assert target.read_bytes() == PAYLOAD


def _reliability_json(path: Path) -> Path:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 4)) * 3
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(0, 4, size=300)
    methods = {method: reliability_bins(probabilities, labels, bins=15) for method in ("uncalibrated", "isotonic")}
    write_json(path, {"dataset": "digits", "model": "m", "seed": 0, "bins": 15, "methods": methods})
    return path


def test_a_figure_write_killed_mid_write_is_cleaned_by_the_next_run(tmp_path):
    data = _reliability_json(tmp_path / "reliability.json")
    figures = tmp_path / "reports" / "figures"
    png, pdf = figures / "m.png", figures / "m.pdf"
    # the real figure writer, over and over, killed by SIGKILL at the first moment a .part file exists
    for _ in range(20):
        writer = start(
            """
            import sys
            from calibrepro.report.figures import write_reliability_figure
            while True:
                write_reliability_figure(sys.argv[1], sys.argv[2], sys.argv[3], language="en")
            """,
            str(data), str(png), str(pdf),
        )
        wait_for(lambda: figures.is_dir() and parts(figures), writer)
        kill(writer)
        if parts(figures):
            break
    left = parts(figures)
    assert left, "no .part file survived 20 kills"
    assert all(str(writer.pid) in p.name for p in left)

    write_reliability_figure(data, png, pdf, language="en")  # the next run of the figure step
    assert sorted(p.name for p in figures.iterdir()) == ["m.pdf", "m.png"]
    assert pdf.read_bytes().startswith(b"%PDF") and png.read_bytes().startswith(b"\x89PNG")


def test_stale_parts_of_other_files_and_of_live_writers_are_kept(tmp_path):
    target = tmp_path / "table.md"
    live = new_part_file(target)  # this process: alive
    other = new_part_file(tmp_path / "other.md")
    legacy = tmp_path / ".table.md.abc123xy.part"  # a name from before writers were recorded
    legacy.write_text("half")
    dead = tmp_path / f".table.md.{2**22 + 12345}@{os.uname().nodename}.qwertyui.part"  # beyond pid_max
    dead.write_text("half")
    with atomic_path(target) as tmp:
        tmp.write_text("| a |\n")
    assert target.read_text() == "| a |\n"
    assert sorted(tmp_path.iterdir()) == sorted([target, live, other])


@pytest.mark.parametrize("name", ["a.b.json", "x[1].npz"])
def test_names_with_dots_and_glob_characters(tmp_path, name):
    target = tmp_path / name
    stale = tmp_path / f".{name}.abc_1234.part"
    stale.write_text("x")
    longer = new_part_file(tmp_path / f"{name}.png")  # a part of another file whose name starts the same
    os.rename(longer, longer.with_name(longer.name.replace(str(os.getpid()), str(2**22 + 1))))  # and is dead
    write_json(target, {"ok": True})
    assert json.loads(target.read_text()) == {"ok": True} and not stale.exists()
    assert len(list(tmp_path.glob(f".{glob.escape(name)}.png.*.part"))) == 1


# ------------------------------------------------------------------ the demo killed, or out of disk space

#: seconds a whole demo run may take on a loaded CI machine
DEMO_TIMEOUT = 1500


def demo_outputs(workdir: Path) -> dict[str, str]:
    """sha256 of every file under ``workdir``'s results/ and reports/, hidden ones included, logs aside."""
    return {name: sha256_hex(path.read_bytes())
            for folder in ("results", "reports") for path in sorted((workdir / folder).rglob("*"))
            if path.is_file() and not (name := path.relative_to(workdir).as_posix()).startswith("results/demo/logs/")}


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory) -> Path:
    """The demo run once without a fault (the working directory): the bytes a disturbed run must end with."""
    workdir = tmp_path_factory.mktemp("undisturbed")
    result = run_snakemake(workdir, timeout=DEMO_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def steps(output: str) -> tuple[int, int]:
    """How many steps Snakemake's output says are done, and of how many."""
    done = re.findall(r"^(\d+) of (\d+) steps \(\d+%\) done$", output, re.MULTILINE)
    return tuple(map(int, done[-1])) if done else (0, 0)


@pytest.mark.slow
def test_the_demo_killed_with_sigkill_reruns_to_the_undisturbed_bytes(undisturbed, tmp_path):
    reference = demo_outputs(undisturbed)
    workdir, output = tmp_path / "run", tmp_path / "killed.out"
    workdir.mkdir()
    with open(output, "w") as handle:  # a file, not a pipe: nobody reads while the run goes on
        run = subprocess.Popen(snakemake_command(workdir), stdout=handle, stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.monotonic() + DEMO_TIMEOUT
    while run.poll() is None and steps(output.read_text())[0] < 30 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.poll() is None, f"the demo ended before 30 steps were done: {output.read_text()[-2000:]}"
    os.killpg(run.pid, signal.SIGKILL)  # Snakemake, its worker processes and the jobs running
    run.wait(timeout=60)
    assert 0 < len(demo_outputs(workdir)) < len(reference)
    assert list((workdir / ".snakemake" / "locks").iterdir()), "the killed run left no lock"
    total = steps(output.read_text())[1]

    # as the README says: remove the lock, then the same command again
    unlock = run_snakemake(workdir, "--unlock")
    assert unlock.returncode == 0, unlock.stderr[-3000:]
    rerun = run_snakemake(workdir, timeout=DEMO_TIMEOUT)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert steps(rerun.stderr)[1] < total  # what the killed run finished was kept
    assert demo_outputs(workdir) == reference  # logs aside, every file, weights caches included


#: a mount namespace of its own for the test's tmpfs: as root directly, else in a user namespace
NAMESPACE = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
#: in that namespace: the run with its results/ on a 4 MiB tmpfs (about half of what the demo writes
#: there), a copy of what it left, the same tmpfs grown, the rerun, its copy. Snakemake's own records
#: (.snakemake/) stay on the big disk: on the full one, its bookkeeping can fail before any step does,
#: with Snakemake's own tracebacks, which the workflow cannot turn into its one-line summary.
DISK_FULL = textwrap.dedent("""
    set -u
    work=$1 out=$2; shift 2
    mkdir -p "$work/results"
    mount -t tmpfs -o size=4m tmpfs "$work/results" || exit 90
    "$@" > "$out/full.out" 2>&1; echo $? > "$out/full.status"
    cp -a "$work/." "$out/full" || exit 91
    mount -o remount,size=1g "$work/results" || exit 92
    "$@" > "$out/rerun.out" 2>&1; echo $? > "$out/rerun.status"
    cp -a "$work/." "$out/rerun" || exit 93
""")


@pytest.mark.slow
def test_the_demo_on_a_full_disk_stops_naming_the_step_and_its_log_and_reruns_identical(undisturbed, tmp_path):
    reference = demo_outputs(undisturbed)
    work, out = tmp_path / "run", tmp_path / "out"
    for folder in (work, out / "full", out / "rerun"):
        folder.mkdir(parents=True)
    scenario = run_in_group([*NAMESPACE, "bash", "-c", DISK_FULL, "bash", str(work), str(out), *snakemake_command(work)],
                            timeout=2 * DEMO_TIMEOUT)
    assert scenario.returncode == 0, (f"no tmpfs in a mount namespace of its own here (exit status "
                                      f"{scenario.returncode}): {scenario.stderr[-2000:]}")
    output = (out / "full.out").read_text()
    assert (out / "full.status").read_text().strip() != "0", output[-3000:]
    # the closing summary names each step that failed and its log (whose last line is the error, unless
    # the full disk took that line too); the error is the full disk's
    failed = re.findall(r"^  (\w+) \(.*\): .* \(full log: (\S+)\)$", output, re.MULTILINE)
    assert failed and "[Errno 28] No space left on device" in output, output[-3000:]
    for rule, log in failed:
        assert log.startswith(f"results/demo/logs/{rule}/"), (rule, log)
    # nothing partial: no temporary file, and every output present is the undisturbed run's file
    left = demo_outputs(out / "full")
    assert 0 < len(left) < len(reference)
    assert {name: digest for name, digest in left.items() if reference.get(name) != digest} == {}
    assert not list((out / "full").rglob("*.part"))
    # more space, the same command: the undisturbed run's bytes
    assert (out / "rerun.status").read_text().strip() == "0", (out / "rerun.out").read_text()[-3000:]
    assert demo_outputs(out / "rerun") == reference


# ------------------------------------------------------------------------------ make verify

def _readme_demo():
    spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "tools" / "readme_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "verify_demo.py"), *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_verify_says_identical_or_names_the_lines_that_differ(undisturbed, tmp_path):
    listing = tmp_path / "demo-sha256.json"
    listing.write_text(_readme_demo().checksums_text(undisturbed, "test-machine"))
    logits = ["--logits", str(undisturbed / "results/demo/logits/digits")]  # the list's own run: its logits are published
    same = verify("--root", str(undisturbed), "--list", str(listing), *logits)
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.startswith("verify: identical: all ")
    assert re.search(r"^  processor: .+\n  flags: avx2 (yes|no), fma (yes|no), avx512f (yes|no)$", same.stdout, re.MULTILINE)
    assert re.search(r"^  python 3\.\d+\.\d+; calibrepro .*, torch .*, numpy ", same.stdout, re.MULTILINE)

    tampered = tmp_path / "tampered"
    for folder in ("results", "reports"):
        shutil.copytree(undisturbed / folder, tampered / folder)
    metrics = tampered / "results/demo/metrics.csv"
    lines = metrics.read_text().splitlines(keepends=True)
    lines[39] = lines[39].rsplit(",", 1)[0] + ",0.5\n"
    metrics.write_text("".join(lines))
    (tampered / "reports/demo/tables/nll.tex").unlink()
    differs = verify("--root", str(tampered), "--list", str(listing), *logits)
    assert differs.returncode == 1, differs.stdout + differs.stderr
    assert differs.stdout.startswith("verify: the demo's outputs differ from the published ones")
    assert "  reports/demo/tables/nll.tex: missing (the demo did not write it)\n" in differs.stdout
    assert (f"  results/demo/metrics.csv: 1 of its {len(lines)} lines differ; columns: "
            f"dataset,model,method,seed,metric,value\n      line 40: {lines[39]}") in differs.stdout
    assert differs.stdout.count(": ") > 3 and "  pinned: " in differs.stdout  # the machine's facts all the same
    # the networks gave the list's logits: no processor's kernels explain the difference
    assert "verify: the networks trained here gave the published logits, yet outputs differ: a bug" in differs.stdout


@pytest.mark.slow
def test_verify_separates_the_analysis_from_networks_trained_to_other_bits(undisturbed, tmp_path):
    """As on a processor whose networks train other last bits than the reference processor's: verify reruns the
    analysis alone on the published logits (identical), and the fingerprint names the primitive that explains it."""
    demo = _readme_demo()
    listing = tmp_path / "demo-sha256.json"
    listing.write_text(demo.checksums_text(undisturbed, "reference-machine"))
    here = tmp_path / "here"
    for folder in ("results", "reports"):
        shutil.copytree(undisturbed / folder, here / folder)
    for path in demo.demo_logits(here).values():  # one logit a last bit up, and a table with it
        archive = load_logits(path)
        logits = archive.logits.copy()
        logits[0, 0] = np.nextafter(logits[0, 0], np.float32(np.inf))
        save_logits(path, logits, archive.labels)
    metrics = here / "results/demo/metrics.csv"
    metrics.write_text(metrics.read_text().replace(",", ", ", 1))
    ours = fingerprint.measure()
    fingerprints = tmp_path / "fingerprints"
    fingerprints.mkdir()
    trained = next(name for name, entry in ours["primitives"].items() if entry["path"] == "training")
    reference = json.loads(json.dumps(ours))
    reference["primitives"][trained]["digest"] = "0" * 16
    (fingerprints / "reference-machine.json").write_text(json.dumps(reference))
    options = ["--root", str(here), "--list", str(listing), "--fingerprints", str(fingerprints),
               "--logits", str(undisturbed / "results/demo/logits/digits")]
    explained = verify(*options)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert "verify: the networks trained on this processor (" in explained.stdout
    assert "1 of the " in explained.stdout and "tables and CSVs differ" in explained.stdout
    assert re.search(r"verify: the analysis of the published logits is identical: all \d+ of its", explained.stdout)
    assert re.search(r"verify: (\d+) of the \1 findings of the reproduction reports have the published verdict",
                     explained.stdout)
    assert f"training: 1 of " in explained.stdout and f"    {trained}\n" in explained.stdout
    # the same difference with every training primitive as the reference's: nothing explains it
    (fingerprints / "reference-machine.json").write_text(json.dumps(ours))
    unexplained = verify(*options)
    assert unexplained.returncode == 1, unexplained.stdout + unexplained.stderr
    assert "a kernel the fingerprint does not measure" in unexplained.stdout

