"""The catalogue of pinned pretrained models: what ``calibrepro models`` prints, read from the pins.

Like ``timm.list_pretrained()`` for timm: one row per pin of every source in
:data:`calibrepro.zoo.PRETRAINED_SOURCES`, with its licence, the top-1 accuracy its source publishes
and how its weights are pinned. The tables of docs/model-sources.md between ``<!-- BEGIN name -->``
and ``<!-- END name -->`` are rendered here too (:func:`update_doc`), so the documentation cannot
drift from the pins (tests/test_zoo_catalogue.py checks it).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from calibrepro.download import parse_checksum
from calibrepro.io import write_text
from calibrepro.zoo import PRETRAINED_SOURCES, get_source


@dataclass(frozen=True)
class CatalogueRow:
    """One pinned model."""

    source: str
    dataset: str
    model: str
    licence: str
    published_top1: float | None  # %, None where the source publishes none
    checksum: str  # the weights' checksum form: sha256, sha256-prefix, unpinned
    dropout: float = 0.0  # rate of the network's dropout layers (0: none, so no MC-Dropout variant)


def _natural(name: str) -> list:
    """Sort key that puts resnet20 before resnet110."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def catalogue(source: str | None = None, dataset: str | None = None) -> list[CatalogueRow]:
    """Every pinned model, by source, data set and model name; optionally one source or data set only."""
    rows = []
    for name in PRETRAINED_SOURCES:
        if source not in (None, name):
            continue
        pins = get_source(name).PINS
        for (pin_dataset, model), pin in sorted(pins.items(), key=lambda item: (item[0][0], _natural(item[0][1]))):
            if dataset not in (None, pin_dataset):
                continue
            rows.append(
                CatalogueRow(
                    source=name,
                    dataset=pin_dataset,
                    model=model,
                    licence=pin.licence,
                    published_top1=pin.published_top1,
                    checksum=parse_checksum(pin.weights.checksum)[0],
                    dropout=pin.dropout,
                )
            )
    return rows


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table (also readable as plain text)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    """At least two decimals, as the sources print them (94.00, 77.328); "-" when none is published."""
    if value is None:
        return "-"
    return f"{value:.2f}" if round(value, 2) == value else repr(value)


def catalogue_table(rows: list[CatalogueRow]) -> str:
    """The catalogue as a Markdown table."""
    return markdown_table(
        ["source", "data set", "model", "licence", "published top-1 (%)", "weights pinned by", "dropout (mc_dropout)"],
        [
            [
                row.source, row.dataset, row.model, row.licence, _percent(row.published_top1), row.checksum,
                f"{row.dropout:g}" if row.dropout else "-",
            ]
            for row in rows
        ],
    )


def _job(resources) -> str:
    return f"{resources['mem_mb'] / 1000:g} GB, {resources['runtime']} min"


def resources_table() -> str:
    """Scheduler resources of the logits jobs: per source and data set, the models with their own job first."""
    rows = []
    for name in PRETRAINED_SOURCES:
        source = get_source(name)
        for dataset in source.supported_datasets:
            usual = source.RESOURCES[dataset]
            own = [
                [name, dataset, model, _job(job["gpu"]), _job(job["cpu"])]
                for (pin_dataset, model), pin in sorted(source.PINS.items(), key=lambda item: _natural(item[0][1]))
                if pin_dataset == dataset and (job := source.job_resources(pin)) != usual
            ]
            others = "every other model" if own else "every model"
            rows += [*own, [name, dataset, others, _job(usual["gpu"]), _job(usual["cpu"])]]
    return markdown_table(["source", "data set", "model", "GPU job", "CPU-only job"], rows)


#: the generated sections of docs/model-sources.md
DOC_SECTIONS = {"catalogue": lambda: catalogue_table(catalogue()), "resources": resources_table}


def update_doc(text: str) -> str:
    """``text`` with every generated section (``<!-- BEGIN name -->`` ... ``<!-- END name -->``) re-rendered."""
    for name, render in DOC_SECTIONS.items():
        pattern = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"no '<!-- BEGIN {name} -->' ... '<!-- END {name} -->' section to fill")
        text = pattern.sub(lambda match: match.group(1) + render() + match.group(2), text)
    return text


if __name__ == "__main__":  # python -m calibrepro.zoo.catalogue docs/model-sources.md
    for path in map(Path, sys.argv[1:]):
        write_text(path, update_doc(path.read_text(encoding="utf-8")))
