"""Writers killed with SIGKILL leave hidden .part files; the next run of the step that owns them removes them."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from calibrepro.download import fetch
from calibrepro.io import atomic_path, new_part_file, remove_stale_parts, write_json
from calibrepro.reliability import reliability_bins
from calibrepro.report.figures import write_reliability_figure
from calibrepro.zoo import Download
from servers import sha256_hex

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
