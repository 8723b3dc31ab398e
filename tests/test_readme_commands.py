"""Every `snakemake` and `calibrepro` command of README.md and docs/*.md works as written.

The commands are taken from the documents themselves (```bash blocks and inline `code`), and run
in a copy of the repository's tracked files, as a user would in a fresh clone: `snakemake` commands
as dry runs (`-n`: the demo, the thesis and the cluster commands all plan without internet or
Slurm), `--unlock` and `--summary` as they are, `--report` after the run it documents (checked by
test_workflow's demo test, here only planned as the run before it), `calibrepro` commands on the
files the README's own example config names. Other shell lines (make, pip, mamba, sudo, the
benchmarks) are set-up or long runs that CI exercises by other means and are not run here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_helpers import ROOT, synthetic_logits

pytestmark = pytest.mark.slow

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(?:bash|sh|console)\n(.*?)^\s*```", re.M | re.S)
INLINE = re.compile(r"`((?:snakemake|calibrepro) [^`]+)`")
PLACEHOLDERS = {"N": "2"}  # `snakemake --cores N` in prose


def documented_commands() -> list[tuple[str, str]]:
    """(document, command) for every snakemake/calibrepro command line, comments stripped."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        lines = [line for block in FENCE.findall(text) for line in block.splitlines()]
        lines += INLINE.findall(text)
        for line in lines:
            command = line.split(" #", 1)[0].strip()
            if command.split(" ", 1)[0] in ("snakemake", "calibrepro") and "..." not in command:
                if command not in {known for _, known in found}:
                    found.append((document.name, command))
    return found


COMMANDS = documented_commands()


def test_the_documents_have_commands_to_check():
    names = [command for _, command in COMMANDS]
    assert "snakemake --cores 4" in names  # the card's command
    assert any("reports/thesis/tables/ece.tex --profile workflow/profiles/slurm" in name for name in names)
    assert any(name.startswith("calibrepro ") for name in names)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """The repository's tracked files, plus the example configs of README and docs/model-sources.md and their files."""
    root = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        if (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```yaml\n# my.yaml\n(.*?)```", readme, re.S).group(1)
    (root / "my.yaml").write_text(example)
    _, labels = synthetic_logits(root / "logits/my_resnet.npz", seed=1)
    synthetic_logits(root / "logits/my_vit.npz", seed=2, labels=labels)
    synthetic_logits(root / "new/my_resnet.npz", seed=3)  # README, "Use as a library": new logits to calibrate
    # docs/model-sources.md's "One run": its config saved as their.yaml, with the checkpoint file it names
    guide = (ROOT / "docs/model-sources.md").read_text(encoding="utf-8")
    (root / "their.yaml").write_text(re.search(r"<!-- BEGIN one-run config.*?-->\n```yaml\n(.*?)```", guide, re.S).group(1))
    (root / "weights").mkdir()
    (root / "weights/r18.pth").write_bytes(b"")
    # docs/blog.md's extra file for the JPEG CIFAR-10, pointed at a small folder of the same layout
    image_folder(root / "cifar10-jpg")
    (root / "cifar-local.yaml").write_text(f"datasets: {{cifar10: {{source: imagefolder, root: {root / 'cifar10-jpg'}}}}}\n")
    # docs/curves.md's extra file: the same folder, without the networks that need a download
    (root / "curves-local.yaml").write_text(f"datasets: {{cifar10: {{source: imagefolder, root: {root / 'cifar10-jpg'}}}}}\n"
                                            "models: {cifar100: null, cifar10: {resnet20: null}}\n")
    return root


def image_folder(root: Path) -> None:
    """``train/<class>/`` with a few 32x32 images of CIFAR-10's ten classes, and ``test/<class>/`` with 1,000 each
    as the JPEG CIFAR-10 has (links to two images: the configuration's sizes are checked against the count)."""
    import numpy as np
    from PIL import Image

    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    rng = np.random.default_rng(0)
    for part, count in (("train", 3), ("test", 2)):
        for name in classes:
            (root / part / name).mkdir(parents=True)
            for index in range(count):
                pixels = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / part / name / f"{index:04d}.jpg")
            if part == "test":
                for index in range(count, 1000):
                    os.link(root / part / name / f"{index % count:04d}.jpg", root / part / name / f"{index:04d}.jpg")


def as_run(command: str) -> list[str]:
    """The command line as the test runs it: dry run, with this test's interpreter."""
    words = [PLACEHOLDERS.get(word, word) for word in shlex.split(command)]
    if words[0] == "calibrepro":
        return [sys.executable, "-m", "calibrepro.cli", *words[1:]]
    if not {"--unlock", "--summary", "--lint"} & set(words):
        words = [word for word in words if word not in ("--report", "report.html")] + ["-n"]
    return [sys.executable, "-m", "snakemake", *words[1:]]


@pytest.mark.parametrize("document, command", COMMANDS, ids=[f"{d}: {c}" for d, c in COMMANDS])
def test_documented_command_works_as_written(clone, document, command):
    words = as_run(command)
    # shell globs, expanded as the user's shell does
    words = [match for word in words for match in (sorted(map(str, Path(clone).glob(word))) if "*" in word else [word])]
    result = subprocess.run(words, cwd=clone, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{document}: `{command}` failed:\n{output[-3000:]}"
    assert "Traceback" not in output
    for word in shlex.split(command):
        if word.startswith(("reports/", "results/")):  # a target: planned, not taken for a config file
            assert word in output, f"{document}: `{command}` did not plan {word}:\n{output[-3000:]}"
