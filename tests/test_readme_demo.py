"""tools/readme_demo.py without a demo run: which block or sha256 list is stale, and messages (the demo run's check: test_workflow)."""

from __future__ import annotations

import hashlib
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


def test_the_checksum_list_covers_the_published_tables_and_csvs_only(tmp_path):
    files = {"results/demo/metrics.csv": b"a,b\n1,2\n", "results/demo/regression/metrics.csv": b"x\n",
             "reports/demo/tables/ece.md": b"| a |\n", "reports/demo/regression/tables/crps.tex": b"\\t\n",
             "reports/demo/reproduction.md": b"# r\n"}
    ignored = {"results/demo/evaluations/digits/m/seed0.csv": b"part\n", "results/demo/logs/metrics.log": b"log\n",
               "reports/demo/figures/reliability/digits/m.png": b"png", "results/demo/logits/digits/m.npz": b"npz"}
    for name, data in {**files, **ignored}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    listed = readme_demo.checksums(tmp_path)
    assert sorted(listed) == sorted(files)
    assert listed["results/demo/metrics.csv"] == {
        "sha256": hashlib.sha256(b"a,b\n1,2\n").hexdigest(),
        "lines": " ".join(hashlib.sha256(line).hexdigest()[:8] for line in (b"a,b", b"1,2"))}
    # the list the repository publishes is stale until rewritten from these outputs
    repository = tmp_path / "repository"
    assert readme_demo._checksums_stale(repository, tmp_path)[2]
    path, text, _ = readme_demo._checksums_stale(repository, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    assert not readme_demo._checksums_stale(repository, tmp_path)[2]
    (tmp_path / "reports/demo/tables/ece.md").write_bytes(b"| b |\n")
    assert readme_demo._checksums_stale(repository, tmp_path)[2]


def test_a_folder_without_demo_outputs_has_no_checksums(tmp_path):
    with pytest.raises(readme_demo.DemoOutputError, match="no demo tables or CSVs: run `make demo`"):
        readme_demo.checksums(tmp_path)
