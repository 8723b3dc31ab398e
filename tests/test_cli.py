"""The `calibrepro` command as a user runs it: help, version, one-line errors, --debug tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest

from calibrepro import cli

SRC = Path(__file__).resolve().parents[1] / "src"


def run(*args, env=None):
    """Run ``python -m calibrepro.cli`` in a new process, with this checkout's code first on the path."""
    environment = {key: value for key, value in os.environ.items() if key != cli.DEBUG_ENV}
    environment.update(PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {}))
    return subprocess.run([sys.executable, "-m", "calibrepro.cli", *args], capture_output=True, text=True, env=environment)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"calibrepro {version('calibrepro')}"


def test_help_says_what_each_command_is_for_with_an_example(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for command in cli.build_parser()._subparsers._group_actions[0].choices:
        assert f"\n    {command}" in text  # listed with its summary
        assert f"\n  calibrepro {command} " in text  # and one example
    assert "snakemake --cores 4" in text and "--debug" in text


#: what no command may import before it runs: about 3 s of start-up (scikit-learn, SciPy, torch, matplotlib)
HEAVY = ("sklearn", "scipy", "torch", "matplotlib")


def heavy_imports(*args) -> list[str]:
    """The heavy libraries in ``sys.modules`` after ``calibrepro ARGS`` in a fresh interpreter (this checkout)."""
    code = (f"import sys\nfrom calibrepro import cli\ntry:\n    code = cli.main({list(args)!r})\n"
            f"except SystemExit as end:\n    code = end.code\nassert code == 0, code\n"
            f"print(*[m for m in {HEAVY!r} if m in sys.modules])")
    environment = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[-1].split()


def test_the_parser_and_check_logits_import_no_heavy_library(tmp_path):
    """Building the parser (every command's start, --help included) and checking a logits file import none of
    scikit-learn, SciPy, torch or matplotlib: each command imports what it uses when it runs."""
    assert heavy_imports("--help") == []
    assert heavy_imports("conformal", "fit", "--help") == []
    path = tmp_path / "model.npz"
    np.savez(path, logits=np.eye(10, dtype=np.float32), labels=np.arange(10))
    assert heavy_imports("check-logits", str(path)) == []
    assert heavy_imports("fit", "--method", "isotonic", str(path), "-o", str(tmp_path / "iso.json")) != []  # the probe sees imports where there are some


def test_an_error_is_one_line_without_traceback_and_exits_non_zero(tmp_path):
    path = tmp_path / "model.npz"
    with open(path, "wb") as handle:
        np.save(handle, np.zeros((4, 2)))
    result = run("check-logits", str(path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"calibrepro: error: {path}: this is a single NumPy array (.npy)")


def test_logits_command_error_is_one_line_and_debug_shows_the_traceback(tmp_path):
    request = '{"dataset": "mydata", "model": "m", "spec": {"source": "logits", "path": "%s"}, "config": {}, "files": {}}'
    text = tmp_path / "m.npz"
    text.write_text("not an archive")
    plain = run("logits", "--request", request % text, "--output", str(tmp_path / "out.npz"))
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert plain.stderr.strip() == (
        f"calibrepro: error: {text}: not a NumPy archive (.npz is a zip file of arrays); "
        "write it with numpy.savez(path, logits=logits, labels=labels)"
    )
    for extra, env in [(["--debug"], None), ([], {"CALIBREPRO_DEBUG": "1"})]:
        debug = run(*extra, "logits", "--request", request % text, "--output", str(tmp_path / "out.npz"), env=env)
        assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
        assert "LogitsFileError" in debug.stderr
    assert not (tmp_path / "out.npz").exists()


def test_unexpected_errors_say_how_to_get_the_details(monkeypatch, capsys):
    def broken(args):
        raise TypeError("boom")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["check-logits"].set_defaults(handler=broken)
    assert cli.main(["check-logits", "x.npz"]) == 1
    assert capsys.readouterr().err.strip() == (
        "calibrepro: internal error (TypeError: boom); run again with --debug for the traceback and report it"
    )
