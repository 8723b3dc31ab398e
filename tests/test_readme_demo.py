"""tools/readme_demo.py without a demo run: which block is stale, and messages (the demo run's check: test_workflow)."""

from __future__ import annotations

import importlib.util

import pytest
from workflow_helpers import ROOT

spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "tools" / "readme_demo.py")
readme_demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_demo)

TEXT = "intro\n<!-- demo:a -->\n\nold 1.23\n\n<!-- /demo:a -->\nmiddle\n<!-- demo:b -->\n\nsame\n\n<!-- /demo:b -->\nend\n"


def test_rewrite_names_the_stale_block_and_replaces_only_its_text():
    text, stale = readme_demo.rewrite(TEXT, {"a": "new 1.24", "b": "same"})
    assert stale == ["a"]
    assert text == TEXT.replace("old 1.23", "new 1.24")
    assert readme_demo.rewrite(text, {"a": "new 1.24", "b": "same"}) == (text, [])


def test_a_missing_marker_is_an_error():
    with pytest.raises(readme_demo.DemoOutputError, match="no block <!-- demo:c -->"):
        readme_demo.rewrite(TEXT, {"c": "x"})


def test_each_document_holds_its_blocks():
    for name, (document, _) in readme_demo.BLOCKS.items():
        assert readme_demo._pattern(name).search((ROOT / document).read_text(encoding="utf-8")), (document, name)


def test_check_without_demo_outputs_says_to_run_the_demo(tmp_path, capsys):
    assert readme_demo.main(["--check", "--root", str(tmp_path)]) == 2
    assert "run `make demo`" in capsys.readouterr().err
