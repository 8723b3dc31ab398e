"""calibrepro.fingerprint and ``calibrepro fingerprint``: a rerun gives the same bytes, a comparison names what
differs by path, and the committed fingerprints (docs/fingerprints/) agree with this machine and with each other
wherever the project promises the same bytes (the ``analysis`` and ``training`` primitives)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from calibrepro import cli, fingerprint
from workflow_helpers import ROOT

FINGERPRINTS = ROOT / "docs" / "fingerprints"
COMMITTED = sorted(FINGERPRINTS.glob("*.json"))
PROMISED = ("analysis", "training")
SRC = ROOT / "src"


def measure_in_a_new_process(output: Path) -> dict:
    """``calibrepro fingerprint --output`` in a fresh Python process, with this checkout's code first on the path."""
    environment = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-m", "calibrepro.cli", "fingerprint", "--output", str(output)],
                            capture_output=True, text=True, env=environment, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(output.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> list[dict]:
    """This machine's fingerprint, measured twice, each time in a new process."""
    folder = tmp_path_factory.mktemp("fingerprints")
    return [measure_in_a_new_process(folder / f"run{run}.json") for run in (1, 2)]


def committed(name: str) -> dict:
    return fingerprint.load(FINGERPRINTS / name)


def test_a_second_run_in_a_new_process_gives_the_same_fingerprint(measured):
    first, second = measured
    assert first == second
    assert set(first) == {"format", "cpu", "versions", "pinned", "torch_capability", "primitives"}
    assert {entry["path"] for entry in first["primitives"].values()} == set(fingerprint.PATHS)


def test_this_machines_analysis_and_training_equal_the_committed_fingerprint_of_its_processor(measured):
    ours = measured[0]
    path = FINGERPRINTS / fingerprint.file_name(ours["cpu"])
    if not path.exists():
        pytest.skip(f"no committed fingerprint of this processor ({path.name}): make one with calibrepro fingerprint")
    differ = fingerprint.compare(ours, fingerprint.load(path))
    assert {key: differ[key] for key in PROMISED} == {key: [] for key in PROMISED}, path.name


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: path.name)
def test_the_committed_fingerprints_parse_and_name_their_processor(path):
    found = fingerprint.load(path)
    assert found["format"] == fingerprint.FORMAT
    assert fingerprint.file_name(found["cpu"]) == path.name
    assert found["torch_capability"] == "AVX2" and found["pinned"]["MKL_CBWR"] == "COMPATIBLE"
    assert all(entry["path"] in fingerprint.PATHS for entry in found["primitives"].values())


def test_the_committed_intel_and_amd_fingerprints_agree_on_every_promised_primitive():
    amd, intel = committed("AuthenticAMD-26-2.json"), committed("GenuineIntel-6-207.json")
    shared = [name for name in amd["primitives"] if name in intel["primitives"]]
    assert len(shared) == 137  # every primitive of the shared probe (docs/fingerprints/README.md)
    assert all(amd["primitives"][name]["path"] == intel["primitives"][name]["path"] for name in shared)
    assert sum(amd["primitives"][name]["path"] in PROMISED for name in shared) == 53
    differ = fingerprint.compare(amd, intel)
    assert {key: differ[key] for key in PROMISED} == {key: [] for key in PROMISED}
    assert differ["off-path"][:3] == ["torch.sqrt f32", "torch.sqrt f64", "torch.optim adam wd 5 steps"]


def test_compare_finds_a_changed_digest_under_its_path_and_what_the_reference_did_not_measure():
    ours = committed("AuthenticAMD-26-2.json")
    reference = copy.deepcopy(ours)
    changed = {path: next(name for name, entry in ours["primitives"].items() if entry["path"] == path)
               for path in fingerprint.PATHS}
    for name in changed.values():
        reference["primitives"][name]["digest"] = "0" * 16
    dropped = list(ours["primitives"])[-1]
    del reference["primitives"][dropped]
    assert fingerprint.compare(ours, reference) == {**{path: [name] for path, name in changed.items()},
                                                     fingerprint.MISSING: [dropped]}
    text = fingerprint.summary(ours, reference, "there.json")
    assert "analysis: 1 of " in text and f"\n  {changed['training']}\n" in text
    assert f"not measured on the reference machine: 1\n  {dropped}" in text
    assert fingerprint.compare(ours, ours) == {**{path: [] for path in fingerprint.PATHS}, fingerprint.MISSING: []}


def test_the_command_compares_with_a_reference_file(monkeypatch, capsys):
    monkeypatch.setattr(fingerprint, "measure", lambda: committed("AuthenticAMD-26-2.json"))
    reference = FINGERPRINTS / "GenuineIntel-6-207.json"
    assert cli.main(["fingerprint", "--compare", str(reference)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "this machine:      AuthenticAMD family 26 model 2 (AMD EPYC)"
    assert lines[1].startswith("reference machine: GenuineIntel family 6 model 207 (")
    assert "analysis: none differ (29 compared)" in lines and "training: none differ (24 compared)" in lines
    assert "off-path (not used by any output): 6 of 84 differ:" in lines


@pytest.mark.parametrize("content", [None, "not json", '{"cpu": {}}'])
def test_an_unreadable_or_wrong_reference_is_a_one_line_error_naming_it(tmp_path, capsys, content):
    path = tmp_path / "reference.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert cli.main(["fingerprint", "--compare", str(path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"calibrepro: error: {path}: ")


PARSER = textwrap.dedent(
    """
    import json, sys
    from calibrepro import cli
    cli.build_parser().parse_args(["fingerprint", "--compare", "x.json"])
    print(json.dumps(sorted(name for name in ("torch", "calibrepro.fingerprint") if name in sys.modules)))
    """
)


@pytest.mark.parametrize("module", ["torch", "calibrepro.fingerprint"])
def test_building_the_command_line_parser_imports_nothing_heavy(module):
    environment = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-c", PARSER], capture_output=True, text=True, env=environment,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert module not in json.loads(result.stdout)
