"""Keep every demo number the documents quote, and the published sha256 list, equal to what ``make demo`` produced.

    python tools/readme_demo.py [--root DIR]           # rewrite the quoted blocks and docs/demo-sha256.json
    python tools/readme_demo.py --check [--root DIR]   # exit 1 naming each stale block (or the list)

README.md and docs/statistics.md mark each quote of the demo's output with ``<!-- demo:NAME -->`` ...
``<!-- /demo:NAME -->`` (:data:`BLOCKS` says which document holds which); everything between the two
markers is generated here from the demo's files under ``DIR`` (default: the current directory, where
``make demo`` writes ``results/demo/`` and ``reports/demo/``), printed as the pipeline's own tables print
it, so the comparison is at the printed digit. :data:`CHECKSUMS` lists the sha256 of every table and CSV
of the demo (:func:`checksums`), which ``make verify`` (tools/verify_demo.py) compares a fresh run with.
tests/test_workflow.py runs the check on the demo run of its end-to-end test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import textwrap
from pathlib import Path

import yaml

from calibrepro import fingerprint
from calibrepro.io import load_logits, save_logits, write_text
from calibrepro.layout import Layout
from calibrepro.report.labels import format_number, method_name, metric_spec
from calibrepro.report.metrics_file import Cell, summarise
from calibrepro.report.size_study import read_size_study
from calibrepro.report.tables import format_cell
from calibrepro.report.uncertainty_files import read_intervals

REPOSITORY = Path(__file__).resolve().parents[1]
#: the thesis's six columns of the demo's ECE table (its other methods stay in reports/demo/tables/ece.md)
ECE_METHODS = ["uncalibrated", "histogram_binning", "isotonic", "temperature_scaling", "vector_scaling",
               "vector_scaling_bias"]
#: the intervals quoted: ECE of every demo model before and after two calibrators
INTERVAL_METHODS = ["uncalibrated", "isotonic", "temperature_scaling"]
#: the published sha256 of the demo's tables and CSVs, relative to the repository
CHECKSUMS = "docs/demo-sha256.json"
#: the demo's logits as the published run computed them (``logits``, ``labels``): the fixed inputs on which
#: ``make verify`` checks the analysis alone, whatever this processor's trained networks give
PUBLISHED_LOGITS = "docs/demo-logits"
#: the files it covers: the CSVs the README lists (results/demo/*.csv and the regression part's; the
#: per-job CSVs in the folders below are parts of them) and every table and report under reports/demo/.
#: Not covered: the logs, and the figures, archives and weights caches, which record library versions.
CHECKED = (("{results}", "*.csv"), ("{results}/regression", "*.csv"), ("{reports}", "**/*.md"), ("{reports}", "**/*.tex"))


class DemoOutputError(Exception):
    """A demo output or a document's marker is missing or not as expected."""


def _read(path: Path) -> str:
    if not path.is_file():
        raise DemoOutputError(f"{path} does not exist: run `make demo` (or `snakemake --cores 2`) there first")
    return path.read_text(encoding="utf-8")


def ece_table(root: Path, layout: Layout) -> str:
    """The thesis's six columns of the demo's ``ece.md``, rows and cells exactly as printed there."""
    path = root / layout.table("ece", "md")
    rows = [line for line in _read(path).splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in rows]
    header = split[0]
    columns = ["Model"] + [method_name(method, "en") for method in ECE_METHODS]
    missing = [name for name in columns if name not in header]
    if missing:
        raise DemoOutputError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(header)})")
    keep = [header.index(name) for name in columns]
    return _markdown(columns, [[cells[i] for i in keep] for cells in split[2:]])


def _markdown(header: list[str], body: list[list[str]]) -> str:
    """A Markdown table, first column left-aligned, the others right-aligned, padded as pandas pads."""
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    rule = [":" + "-" * (widths[0] - 1)] + ["-" * (w - 1) + ":" for w in widths[1:]]
    return "\n".join("| " + " | ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                         for i, (cell, w) in enumerate(zip(line, widths))) + " |"
                     for line in [header, rule, *body])


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)


def _join(items: list[str]) -> str:
    return "no model" if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def intervals_table(root: Path, layout: Layout) -> str:
    """ECE with its 95 % interval per demo model, printed as a ``report.cells: interval`` table cell."""
    path = root / layout.intervals
    _read(path)
    intervals = read_intervals(path)
    models = list(dict.fromkeys(model for (_, model, _, metric) in intervals.cells if metric == "ece"))
    body = []
    for model in models:
        cells = []
        for method in INTERVAL_METHODS:
            key = next((k for k in intervals.cells if k[1:] == (model, method, "ece")), None)
            if key is None or len(intervals.cells[key]) != 1:
                raise DemoOutputError(f"{path}: expected one seed of {model}/{method}/ece")
            estimate, low, high, centre = next(iter(intervals.cells[key].values()))
            cells.append(format_cell(Cell(estimate, float("nan"), 1), "ece", "md", False, (low, high, centre)))
        body.append([model, *cells])
    header = ["Model"] + [method_name(method, "en") for method in INTERVAL_METHODS]
    methods = ", ".join(sorted(intervals.methods["ece"]))
    caption = (f"ECE % and its {100 * float(intervals.level):g} % bootstrap interval (B = {intervals.resamples}, "
               f"{methods}; † marks the bias-corrected estimate, see below), from `results/demo/intervals.csv`:")
    return _wrap(caption) + "\n\n" + _markdown(header, body)


def size_study_sentence(root: Path, layout: Layout) -> str:
    """Isotonic regression against no calibration, and temperature scaling's spread, by calibration-set size."""
    path = root / layout.size_study
    _read(path)
    study = read_size_study(path, "ece")
    spec = metric_spec("ece")

    def text(values, spread=True):
        mean, sd, n = summarise(values)
        out = format_number(spec.display(mean), spec.decimals)
        return f"{out} ± {format_number(spec.display(sd), spec.decimals)}" if spread and n > 1 else out

    sizes = sorted({size for methods in study.values() for by_size in methods.values() for size in by_size})
    seeds = sorted({seed for methods in study.values() for by_size in methods.values()
                    for by_seed in by_size.values() for seed in by_seed})
    small, full = sizes[0], sizes[-1]
    worse = {size: [] for size in (small, full)}
    for (_, model), methods in study.items():
        if "isotonic" not in methods or "uncalibrated" not in methods:
            raise DemoOutputError(f"{path}: {model} lacks the isotonic or uncalibrated rows")
        for size in worse:
            iso, base = summarise(methods["isotonic"][size])[0], summarise(methods["uncalibrated"][size])[0]
            if round(spec.display(iso), spec.decimals) > round(spec.display(base), spec.decimals):
                worse[size].append(f"`{model}` ({text(methods['isotonic'][size], spread=size != full)} vs "
                                   f"{text(methods['uncalibrated'][size], spread=False)})")
    named = {size: _join(items) for size, items in worse.items()}
    first = next(iter(study))
    ts = study[first]["temperature_scaling"]
    spreads = " → ".join(format_number(spec.display(summarise(ts[size])[1]), spec.decimals) for size in sizes[:-1])
    sentence = (
        f"In the demo's size study (`reports/demo/tables/size_study.md`, ECE %, mean ± sd over subset seeds "
        f"{seeds[0]}-{seeds[-1]}; the calibration half has {full} samples), isotonic regression is worse than no "
        f"calibration at n = {small} for {named[small]}, and with the whole calibration half for {named[full]}; "
        f"the sd of temperature scaling over the seeds is {spreads} points at n = "
        f"{', '.join(map(str, sizes[:-1]))} for `{first[1]}`."
    )
    return _wrap(sentence)


def line_digests(data: bytes) -> list[str]:
    """The first 8 hex digits of the sha256 of each line of ``data``: what the list keeps to find the lines that differ."""
    return [hashlib.sha256(line).hexdigest()[:8] for line in data.splitlines()]


def checksums(root: Path) -> dict[str, dict[str, str]]:
    """Per demo table and CSV (:data:`CHECKED`) under ``root``, by its path relative to ``root``: the file's
    sha256 and its :func:`line_digests`, space-separated."""
    layout = Layout.named("demo")
    folders = {"results": layout.results, "reports": layout.reports}
    files = sorted({path for folder, pattern in CHECKED for path in (Path(root) / folder.format(**folders)).glob(pattern)})
    if not files:
        raise DemoOutputError(f"{root}: no demo tables or CSVs: run `make demo` (or `snakemake --cores 2`) there first")
    out = {}
    for path in files:
        data = path.read_bytes()
        out[path.relative_to(root).as_posix()] = {"sha256": hashlib.sha256(data).hexdigest(),
                                                  "lines": " ".join(line_digests(data))}
    return out


def verdicts(root: Path) -> dict[str, dict[str, str]]:
    """Per reproduction report of the demo under ``root``: each finding's verdict, "holds" or "does not hold", by the
    cells of its table row before our numbers (data set, method or network, finding)."""
    out = {}
    for path in sorted((Path(root) / Layout.named("demo").reports).glob("**/reproduction.md")):
        rows = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
            verdict = next((i for i, cell in enumerate(cells) if cell.startswith(("holds", "does not hold"))), 0)
            if verdict > 1:  # keyed by the cells before "ours", the cell that precedes the verdict
                rows[" | ".join(cells[: verdict - 1])] = "does not hold" if cells[verdict].startswith("does") else "holds"
        out[path.relative_to(root).as_posix()] = rows
    return out


def checksums_text(root: Path, machine: str) -> str:
    """The published list's text for the demo outputs under ``root``, made on the processor ``machine``
    (its kernel fingerprint's name in docs/fingerprints/)."""
    return json.dumps({"about": "sha256 of the demo's tables and CSVs, written by `python tools/readme_demo.py` from a "
                                "`make demo` run; `make verify` compares a fresh run with it",
                       "machine": machine, "verdicts": verdicts(root), "files": checksums(root)}, indent=1) + "\n"


def is_analysis(name: str) -> bool:
    """Whether a listed file is the classification analysis's, which the published logits alone determine. Not: the
    regression part's and the training curves' files, which rest on networks trained on the machine, and the
    reproduction report, which holds the curves' findings beside the analysis's (:func:`verdicts` compares those)."""
    return not ("/regression/" in name or "curves" in Path(name).name or Path(name).name == "reproduction.md")


def demo_logits(root: Path) -> dict[str, Path]:
    """The demo's logits archives under ``root``, by model."""
    folder = Path(root) / Layout.named("demo").results / "logits" / "digits"
    return {path.stem: path for path in sorted(folder.glob("*.npz"))}


def write_published_logits(root: Path, repository: Path, machine: str) -> list[Path]:
    """Copy the logits and labels (not the run's metadata) of the demo under ``root`` to :data:`PUBLISHED_LOGITS`."""
    folder = Path(repository) / PUBLISHED_LOGITS
    written = []
    for model, path in demo_logits(root).items():
        archive = load_logits(path)
        target = folder / f"{model}.npz"
        save_logits(target, archive.logits, archive.labels,
                    {"about": f"the demo's logits of {model} as published (tools/readme_demo.py), made on {machine}"})
        written.append(target)
    return written


def logits_that_differ(root: Path, published_logits: Path = REPOSITORY / PUBLISHED_LOGITS) -> list[str]:
    """The demo models whose logits or labels under ``root`` are not, bit for bit, those in ``published_logits``."""
    published = {path.stem: path for path in sorted(Path(published_logits).glob("*.npz"))}
    ours = demo_logits(root)
    differ = sorted(published.keys() ^ ours.keys())
    for model in sorted(published.keys() & ours.keys()):
        a, b = load_logits(published[model]), load_logits(ours[model])
        if a.logits.tobytes() != b.logits.tobytes() or a.labels.tobytes() != b.labels.tobytes():
            differ.append(model)
    return differ


def published_inputs_config(path: Path, published_logits: Path = REPOSITORY / PUBLISHED_LOGITS) -> Path:
    """The demo's configuration with each classifier's logits read from :data:`PUBLISHED_LOGITS` (``source: logits``)
    and no regression part: the analysis alone, on the published inputs. Written to ``path``."""
    config = yaml.safe_load((REPOSITORY / "config" / "config.yaml").read_text(encoding="utf-8"))
    folder = Path(published_logits).resolve()
    config["models"] = {"digits": {model: {"source": "logits", "path": str(folder / f"{model}.npz")}
                                   for model in config["models"]["digits"]}}
    for key in ("datasets", "regression"):
        config.pop(key, None)
    write_text(path, yaml.safe_dump(config, sort_keys=False))
    return path


#: block name -> (the document that quotes it, relative to the repository; what generates it)
BLOCKS = {
    "ece-table": ("README.md", ece_table),
    "intervals": ("docs/statistics.md", intervals_table),
    "size-study": ("docs/statistics.md", size_study_sentence),
}


def generate(root: Path) -> dict[str, str]:
    """Every block's text, generated from the demo's outputs under ``root``."""
    layout = Layout.named("demo")
    return {name: build(Path(root), layout) for name, (_, build) in BLOCKS.items()}


def documents(blocks: dict[str, str]) -> dict[str, dict[str, str]]:
    """The generated blocks grouped by the document that quotes them."""
    grouped: dict[str, dict[str, str]] = {}
    for name, text in blocks.items():
        grouped.setdefault(BLOCKS[name][0], {})[name] = text
    return grouped


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- demo:{name} -->\n)(.*?)(<!-- /demo:{name} -->)", re.DOTALL)


def rewrite(text: str, blocks: dict[str, str]) -> tuple[str, list[str]]:
    """A document's ``text`` with each block replaced by its generated text, and the names of the blocks that changed."""
    stale = []
    for name, body in blocks.items():
        pattern = _pattern(name)
        found = pattern.search(text)
        if found is None:
            raise DemoOutputError(f"no block <!-- demo:{name} --> ... <!-- /demo:{name} --> in the document")
        quoted = f"\n{body}\n\n"  # blank lines around it: Markdown ends a table or paragraph there
        if found.group(2) != quoted:
            stale.append(name)
        text = text[: found.start(2)] + quoted + text[found.end(2):]
    return text, stale


def _updated(repository: Path, root: Path) -> dict[Path, tuple[str, list[str]]]:
    """Per document: its text with every block regenerated, and the names of its stale blocks."""
    out = {}
    for document, blocks in documents(generate(root)).items():
        path = repository / document
        try:
            out[path] = rewrite(path.read_text(encoding="utf-8"), blocks)
        except DemoOutputError as error:
            raise DemoOutputError(f"{path}: {error}") from None
    return out


def _checksums_stale(repository: Path, root: Path) -> tuple[Path, str, bool]:
    """The published list's path, its text for the demo outputs under ``root`` made on this processor, and whether
    the files it lists differ from the published ones."""
    path = Path(repository) / CHECKSUMS
    text = checksums_text(Path(root), fingerprint.machine_name())
    try:
        stale = json.loads(path.read_text(encoding="utf-8"))["files"] != json.loads(text)["files"]
    except (OSError, ValueError, KeyError):
        stale = True
    return path, text, stale


def check(root: Path, repository: Path = REPOSITORY) -> list[str]:
    """Names of the documents' demo blocks (and ``demo-sha256`` for the list) that differ from the demo's
    outputs under ``root``."""
    stale = [name for _, names in _updated(Path(repository), Path(root)).values() for name in names]
    return stale + ["demo-sha256"] * _checksums_stale(repository, root)[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="folder holding results/demo, reports/demo")
    parser.add_argument("--repository", type=Path, default=REPOSITORY, help="checkout whose documents quote the demo")
    args = parser.parse_args(argv)
    try:
        updated = _updated(args.repository, args.root)
        checksums_path, checksums_new, checksums_stale = _checksums_stale(args.repository, args.root)
    except DemoOutputError as error:
        print(f"readme_demo: {error}", file=sys.stderr)
        return 2
    if args.check and checksums_stale:
        print(f"readme_demo: {checksums_path} does not list the sha256 of the demo's outputs under {args.root}; "
              f"run `python tools/readme_demo.py` after `make demo` to rewrite it", file=sys.stderr)
    elif checksums_stale:
        write_text(checksums_path, checksums_new)
        written = write_published_logits(args.root, args.repository, fingerprint.machine_name())
        print(f"readme_demo: {checksums_path} and the {len(written)} archives of {PUBLISHED_LOGITS}/ rewritten")
    for path, (text, stale) in updated.items():
        if args.check:
            for name in stale:
                print(f"readme_demo: {path}: block demo:{name} does not match the demo's output under "
                      f"{args.root}; run `python tools/readme_demo.py` after `make demo` to rewrite it",
                      file=sys.stderr)
        elif stale:
            write_text(path, text)
            print(f"readme_demo: {', '.join(stale)} rewritten in {path}")
    stale = [name for _, names in updated.values() for name in names]
    if args.check:
        return 1 if stale or checksums_stale else 0
    if not stale and not checksums_stale:
        print("readme_demo: every block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
