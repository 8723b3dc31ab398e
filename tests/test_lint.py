"""The workflow's conventions: `snakemake --lint` and `snakefmt` clean, logs and conda envs declared.

Both linters also run in CI (.ci/run) before the tests. The conda environment of the shell rule
cannot be resolved here (no conda, no conda channel reachable): what is checked is that it parses,
that every shell rule names one, and that it asks for exactly the run-time dependencies of
pyproject.toml with the same lower bounds. Where `conda` or `mamba` is installed, the spec is also
resolved with a dry run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ROOT

RULE_FILES = sorted((ROOT / "workflow" / "rules").glob("*.smk"))
# pip name -> conda-forge name, where they differ
CONDA_NAMES = {"torch": "pytorch"}


def rules() -> dict[str, str]:
    """Rule name -> its text, from every rule file."""
    found = {}
    for path in RULE_FILES:
        parts = re.split(r"^rule (\w+):\n", path.read_text(encoding="utf-8"), flags=re.M)
        found.update({name: body.split("\n\n\n")[0] for name, body in zip(parts[1::2], parts[2::2])})
    return found


def test_snakemake_lint_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )


def test_snakefmt_check_is_clean():
    snakefmt = shutil.which("snakefmt") or str(Path(sys.executable).parent / "snakefmt")
    result = subprocess.run([snakefmt, "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_logs_under_its_own_name():
    found = rules()
    assert {"logits", "split", "fit_calibrators", "evaluate", "metrics", "table"} <= set(found)
    for name, body in found.items():
        log = re.search(r"^    log:\n        (.+?),?$", body, flags=re.M)
        assert log, f"rule {name} has no log:"
        assert log.group(1).startswith(f'LAYOUT.log("{name}"'), f"rule {name} logs to {log.group(1)}"


def test_rule_files_take_their_paths_from_the_layout():
    """No result or report path is spelled out in a rule file: they come from calibrepro.layout."""
    for path in [*RULE_FILES, ROOT / "Snakefile"]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            assert not re.search(r"[\"'](results|reports)/", code), f"{path.name}:{number}: {line.strip()}"


def requirement(text: str) -> tuple[str, str]:
    name, bound = re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", text.replace(" ", "")).groups()
    return name.lower(), bound


def test_shell_rules_have_a_conda_env_matching_pyproject():
    shell_rules = {name: body for name, body in rules().items() if "\n    shell:\n" in body}
    assert shell_rules, "no shell rule found"
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 reads pyproject.toml")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = dict(requirement(item) for item in pyproject["project"]["dependencies"])
    wanted = {CONDA_NAMES.get(name, name): bound for name, bound in wanted.items()}
    wanted["python"] = pyproject["project"]["requires-python"]
    for name, body in shell_rules.items():
        conda = re.search(r"^    conda:\n        \"(.+)\"", body, flags=re.M)
        assert conda, f"shell rule {name} has no conda: environment"
        env_file = (ROOT / "workflow" / "rules" / conda.group(1)).resolve()
        env = yaml.safe_load(env_file.read_text(encoding="utf-8"))
        assert env["channels"][0] == "conda-forge"
        assert all(isinstance(item, str) for item in env["dependencies"]), "pip: sections do not resolve with conda"
        declared = dict(requirement(item) for item in env["dependencies"])
        assert declared == wanted, f"{env_file} differs from pyproject.toml's dependencies"


@pytest.mark.skipif(not (shutil.which("mamba") or shutil.which("conda")), reason="no conda/mamba on this machine")
def test_conda_env_resolves(tmp_path):
    tool = shutil.which("mamba") or shutil.which("conda")
    env_file = ROOT / "workflow" / "envs" / "calibrepro.yaml"
    result = subprocess.run(
        [tool, "env", "create", "--dry-run", "--file", str(env_file), "--prefix", str(tmp_path / "env")],
        capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docstrings_cite_documents_of_this_checkout():
    """Cited decisions live in docs/ of the project (a user's checkout has no design notes of the developers)."""
    cited = set()
    for path in (ROOT / "src").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "design.md" not in text, f"{path} cites design.md; cite docs/decisions.md"
        for name, section in re.findall(r'docs/(\w[\w-]*\.md), "([^"]+)"', text):
            cited.add((name, section))
    assert ("decisions.md", "Scaling fits") in cited
    for name, section in cited:
        headings = re.findall(r"^## (.+)$", (ROOT / "docs" / name).read_text(encoding="utf-8"), flags=re.M)
        assert section in headings, f"docs/{name} has no section {section!r}"
