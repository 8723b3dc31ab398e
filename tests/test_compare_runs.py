"""tools/compare_runs.py: two output trees compared file by file, as the byte-identity checks of a refactoring use it."""

from __future__ import annotations

import subprocess
import sys

from workflow_helpers import ROOT

TOOL = ROOT / "tools" / "compare_runs.py"


def compare(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_same_bytes_pass_and_every_difference_is_named(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    for root in (before, after):
        (root / "tables").mkdir(parents=True)
        (root / "tables" / "ece.md").write_bytes(b"| a |\n")
        (root / "logs").mkdir()
    (before / "logs" / "fit.log").write_text("done in 1.00 s\n")
    (after / "logs" / "fit.log").write_text("done in 2.00 s\n")
    result = compare(before, after, "--ignore", "logs/*")
    assert result.returncode == 0
    assert result.stdout.strip() == "1 identical, 0 different or on one side only (1 files before, 1 after)"
    (after / "tables" / "ece.md").write_bytes(b"| b |\n")
    (before / "tables" / "nll.md").write_text("x")
    (after / "convergence.csv").write_text("x")
    result = compare(before, after)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "differs      logs/fit.log", "differs      tables/ece.md", "only before  tables/nll.md",
        "only after   convergence.csv", "0 identical, 4 different or on one side only (3 files before, 3 after)",
    ]
