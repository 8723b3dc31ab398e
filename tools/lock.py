"""Write the locked environment that ``make`` installs: exact versions and sha256 hashes of every package.

    python tools/lock.py              # re-resolve requirements/, keeping the pinned versions where they still fit
    python tools/lock.py --upgrade    # move every package to its newest release (then regenerate the README's numbers)

Needs ``uv`` (``pip install uv``) and PyPI. It writes

* ``requirements/lock.txt``: pyproject.toml's dependencies with the ``workflow`` and ``test`` extras,
  plus pip and setuptools, for Linux, macOS and Windows, CPython >= 3.11.5 (``uv pip compile
  --universal``), every file's hash. torch from PyPI: the CUDA build on Linux x86-64, the CPU build elsewhere.
* ``requirements/lock-cpu.txt``: the same without torch, torchvision and the CUDA packages only they
  need (nvidia-*, triton, cuda-*), for ``make TORCH_INDEX=https://download.pytorch.org/whl/cpu``;
* ``requirements/torch-cpu.txt``: torch and torchvision of lock.txt's versions as PyTorch's CPU index
  names them (``+cpu``), with their hashes when that index answers (else without, and it says so).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "requirements"
PYTHON = "3.11.5"  # the oldest CPython that every locked release supports (numpy 2.4: 3.11; soupsieve 4.1: 3.11.5)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: packages that only the CUDA build of torch needs
CUDA_ONLY = re.compile(r"^(nvidia-[\w-]+|triton|cuda-[\w-]+)$")
#: what make installs besides the project's dependencies (the venv's own tools)
TOOLS = "pip\nsetuptools>=77\n"
HEADER = "# Written by tools/lock.py (docs/reproducibility.md, 'The locked environment'); do not edit by hand.\n"


def uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(found).exists():
        sys.exit("tools/lock.py needs uv: pip install uv")
    return found


def compile_lock(upgrade: bool) -> None:
    """requirements/lock.txt, universal, with hashes (uv keeps its existing pins unless ``upgrade``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".in", delete=False) as tools:
        tools.write(TOOLS)
    command = [
        uv(), "pip", "compile", str(ROOT / "pyproject.toml"), tools.name,
        "--extra", "workflow", "--extra", "test", "--universal", "--python-version", PYTHON,
        "--generate-hashes", "--no-header", "--no-annotate", "--output-file", str(FOLDER / "lock.txt"),
    ]  # fmt: skip
    subprocess.run(command + (["--upgrade"] if upgrade else []), check=True)
    Path(tools.name).unlink()
    path = FOLDER / "lock.txt"
    path.write_text(HEADER + path.read_text(encoding="utf-8"), encoding="utf-8")


def entries(text: str) -> list[tuple[str, str]]:
    """(name, entry with its hash lines) of each package of a lock file."""
    found = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", text.strip()):
        if not block.startswith("#"):
            found.append((re.match(r"[A-Za-z0-9_.-]+", block).group(0).lower(), block))
    return found


def write_cpu_locks() -> None:
    """lock-cpu.txt (lock.txt without torch, torchvision and the CUDA packages) and torch-cpu.txt."""
    lock = entries((FOLDER / "lock.txt").read_text(encoding="utf-8"))
    kept = [block for name, block in lock if name not in ("torch", "torchvision") and not CUDA_ONLY.match(name)]
    (FOLDER / "lock-cpu.txt").write_text(HEADER + "\n".join(kept) + "\n", encoding="utf-8")
    pins = {name: re.search(r"==([^\s;]+)", block).group(1) for name, block in lock if name in ("torch", "torchvision")}
    wanted = "".join(f"{name}=={pin}+cpu\n" for name, pin in pins.items())
    result = subprocess.run(
        [uv(), "pip", "compile", "-", "--no-deps", "--generate-hashes", "--no-header", "--no-annotate",
         "--index-url", TORCH_CPU_INDEX, "--python-platform", "x86_64-manylinux_2_28", "--python-version", PYTHON],
        input=wanted, capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode == 0:
        body = result.stdout
    else:
        print(f"tools/lock.py: {TORCH_CPU_INDEX} did not answer; torch-cpu.txt pins versions without hashes:\n"
              f"{result.stderr.strip()[-500:]}", file=sys.stderr)  # fmt: skip
        body = "# No hashes: PyTorch's CPU index could not be reached when this was written.\n" + wanted
    (FOLDER / "torch-cpu.txt").write_text(HEADER + body, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upgrade", action="store_true", help="newest releases instead of the current pins")
    args = parser.parse_args(argv)
    FOLDER.mkdir(exist_ok=True)
    compile_lock(args.upgrade)
    write_cpu_locks()
    print(f"tools/lock.py: wrote {', '.join(sorted(p.name for p in FOLDER.glob('*.txt')))} in {FOLDER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
