"""Every output path the documents and the reports name is one a run writes (src/calibrepro/layout.py).

The paths are read out of README.md, docs/*.md, config/README.md, the report templates and the
report modules' texts: any `results/...` or `reports/...` word. Placeholders (`<name>`, `{dataset}`,
`seed{seed}`) stand for any one folder or file-name part; a path ending in `/` or `...` names a folder,
which must hold some output; a file must be one. They are checked against the paths of every method of
:class:`calibrepro.layout.Layout`, called with placeholders, so a document that still names a path of
an older layout (e.g. `results/metrics.csv` from before the per-configuration folders) fails here.
"""

from __future__ import annotations

import inspect
import re
import subprocess

import pytest

from calibrepro.layout import Layout
from workflow_helpers import ROOT

SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "config" / "README.md",
    *sorted((ROOT / "src" / "calibrepro" / "report" / "templates").glob("*")),
    *sorted((ROOT / "src" / "calibrepro" / "report").glob("*.py")),
    *sorted((ROOT / "src" / "calibrepro" / "regression").glob("report*.py")),
    ROOT / "src" / "calibrepro" / "regression" / "claims.py",
]
#: a path word: results/ or reports/ at the start of a word (not inside a URL or another repository's path)
WORD = re.compile(r"(?<![\w./-])(?:results|reports)/[\w<>{}.*/-]*")
PLACEHOLDER = re.compile(r"<[^>]*>|\{[^}]*\}|\*")
#: paths of other projects that the documents quote as such
FOREIGN = {"results/results-imagenet.csv"}  # timm's table of published top-1 (docs/model-sources.md)
#: folders a run writes besides the layout's (settings with these defaults)
FOLDERS = ["results/downloads/"]
ANY = "\x00"  # one folder or file-name part
MORE = "\x01"  # one or more folders (a log's "what": dataset/model)


def layout_paths() -> list[str]:
    """Every path of :class:`Layout`, with :data:`ANY` for each argument and for the configuration's name."""
    layout, paths = Layout.named(ANY), []
    for name, member in inspect.getmembers(Layout):
        if name.startswith("_") or name in ("named", "stale"):
            continue
        if isinstance(member, property):
            paths.append(getattr(layout, name))
        elif name == "log":
            paths += [layout.log(ANY), layout.log(ANY, MORE)]
        elif callable(member):
            count = len(inspect.signature(member).parameters) - 1  # without self
            paths.append(getattr(layout, name)(*[ANY] * count))
    return paths + FOLDERS


def _regex(path: str) -> str:
    """A documented or layout path as a regex: a placeholder is one folder's characters, ``...`` any folders."""
    out = []
    for piece in re.split(f"({PLACEHOLDER.pattern}|{ANY}|{MORE}|\\.\\.\\.)", path):
        if piece in (MORE, "..."):
            out.append(".+")
        elif piece == ANY or PLACEHOLDER.fullmatch(piece or "-"):
            out.append("[^/]+")
        else:
            out.append(re.escape(piece))
    return "".join(out)


def _concrete(path: str) -> str:
    """A path with every placeholder replaced by a plain name."""
    return PLACEHOLDER.sub("x", path.replace("...", "x/x")).replace(ANY, "x").replace(MORE, "x/x")


def names_output(path: str, known: str) -> bool:
    """Whether the documented ``path`` is the layout path ``known`` (a file) or a folder above it."""
    if path.endswith(("/", "...")) or "." not in path.rsplit("/", 1)[-1]:  # a folder: some output lies below it
        folder = path.removesuffix("...").rstrip("/")
        parts = known.rstrip("/").split("/")
        prefixes = ["/".join(parts[:depth]) for depth in range(1, len(parts) + (known.endswith("/")))]
        return any(re.fullmatch(_regex(prefix), _concrete(folder)) or re.fullmatch(_regex(folder), _concrete(prefix))
                   for prefix in prefixes)
    return bool(re.fullmatch(_regex(known), _concrete(path)) or re.fullmatch(_regex(path), _concrete(known)))


def configuration_names() -> set[str]:
    """The folder names of the configurations the documents can mean: config/*.yaml and their examples."""
    import yaml

    names = {"downloads", "my", "their"}  # the shared downloads; README's my.yaml, model-sources.md's their.yaml
    for path in (ROOT / "config").glob("*.yaml"):
        names |= {path.stem, (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("name", path.stem)}
    return names


def documented_paths() -> list[tuple[str, str]]:
    found = []
    for source in SOURCES:
        for word in WORD.findall(source.read_text(encoding="utf-8")):
            word = word.rstrip(".,:;`)")
            if word not in FOREIGN and (source.name, word) not in found:
                found.append((source.relative_to(ROOT).as_posix(), word))
    return found


PATHS = documented_paths()
KNOWN = layout_paths()
NAMES = configuration_names()


def test_the_documents_name_paths():
    names = {path for _, path in PATHS}
    assert "results/<name>/metrics.csv" in names and "reports/<name>/reproduction.md" in names


@pytest.mark.parametrize("source,path", PATHS, ids=[f"{source}:{path}" for source, path in PATHS])
def test_a_documented_path_is_one_a_run_writes(source, path):
    name = path.split("/")[1] if path.count("/") else ""
    if name and not PLACEHOLDER.fullmatch(name) and name not in NAMES:
        pytest.fail(f"{source} names {path}: {name!r} is no configuration's folder (results/<name>/, reports/<name>/)")
    if not any(names_output(path, known) for known in KNOWN):
        pytest.fail(f"{source} names {path}, which no run writes (the paths are in src/calibrepro/layout.py)")


def test_an_outdated_path_is_caught():
    assert not any(names_output("results/metrics.csv", known) for known in KNOWN)
    assert "regression" not in NAMES  # reports/regression/ of the old layout is no configuration's folder
    assert any(names_output("results/demo/metrics.csv", known) for known in KNOWN)
    assert any(names_output("reports/<name>/regression/", known) for known in KNOWN)


def test_every_document_is_one_click_from_the_readme():
    """Each Markdown document the repository keeps (tests' fixtures apart) is linked from README.md."""
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    documents = {name for name in tracked.stdout.split() if not name.startswith("tests/")} - {"README.md"}
    links = set(re.findall(r"\]\(([^)#\s]+\.md)", (ROOT / "README.md").read_text(encoding="utf-8")))
    assert documents and sorted(documents - links) == []
