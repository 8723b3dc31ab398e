"""README.md's "Use as a library" and docs/library.md's Python examples run as written; the public names resolve."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest

import calibrepro
from workflow_helpers import ROOT

PYTHON = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def section(text: str, heading: str) -> str:
    """The text of the ``## heading`` section."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def examples() -> list[tuple[str, str]]:
    readme = section((ROOT / "README.md").read_text(encoding="utf-8"), "Use as a library")
    found = [("README.md", block) for block in PYTHON.findall(readme)]
    found += [("docs/library.md", block) for block in PYTHON.findall((ROOT / "docs/library.md").read_text("utf-8"))]
    return found


EXAMPLES = examples()


def test_the_documents_have_their_examples():
    assert [document for document, _ in EXAMPLES] == ["README.md", "docs/library.md", "docs/library.md"]


@pytest.mark.parametrize("document, code", EXAMPLES, ids=[document for document, _ in EXAMPLES])
def test_example_runs_as_written(tmp_path, document, code):
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{document}:\n{result.stdout}{result.stderr[-3000:]}"
    if document == "README.md":
        lines = result.stdout.splitlines()
        assert re.fullmatch(r"ece 0\.\d{4} \[0\.\d{4}, 0\.\d{4}\] \(basic\)", lines[0]), lines
        assert re.fullmatch(r"nll \d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\] \(percentile\)", lines[1]), lines
        assert re.fullmatch(r"T = \d\.\d{4}", lines[2]) and float(lines[2][4:]) > 1  # overconfident: T > 1
        assert (tmp_path / "ts.json").is_file()


def test_public_names_resolve_with_docstrings():
    assert calibrepro.__all__ == sorted(calibrepro.__all__) and "metric_intervals" in calibrepro.__all__
    for name in calibrepro.__all__:
        value = getattr(calibrepro, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"calibrepro.{name} has no docstring"
    assert set(calibrepro.__all__) <= set(dir(calibrepro))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        calibrepro.nope  # noqa: B018
