"""Model sources: where the logits of a configured model come from.

A model entry of the config names its ``source``; the source says which files must be
downloaded first (pinned URL + checksum) and writes the model's logits archive
``results/logits/{dataset}/{model}.npz``. Each source lives in its own module and is
registered in :data:`SOURCES` (the config schema's ``source`` enum is filled from it, see
:func:`calibrepro.config.load_schema`); adding a model family means adding one module and one
line here (see "Adding a model family" in docs/model-sources.md).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping

from calibrepro.download import Download

#: source name -> "module:class"; modules are imported on first use only.
SOURCES: dict[str, str] = {
    "logits": "calibrepro.zoo.byo:BringYourOwnLogits",
    "train": "calibrepro.zoo.train:TrainSource",
    "akamaster": "calibrepro.zoo.akamaster:AkamasterSource",
    "chenyaofo": "calibrepro.zoo.chenyaofo:ChenyaofoSource",
    "huyvnphan": "calibrepro.zoo.huyvnphan:HuyvnphanSource",
    "timm": "calibrepro.zoo.timm_models:TimmSource",
    "torchvision": "calibrepro.zoo.torchvision_models:TorchvisionSource",
    "checkpoint": "calibrepro.zoo.checkpoint:CheckpointSource",
    "ensemble": "calibrepro.zoo.ensemble:EnsembleSource",
}
#: the sources of pinned pretrained networks (subclasses of ``_pretrained.PretrainedSource``): they
#: take the model-entry options ``name`` and ``batch_size``, and ``calibrepro models`` lists their pins.
#: Kept here as names so that validating a config never imports torch.
PRETRAINED_SOURCES: tuple[str, ...] = ("akamaster", "chenyaofo", "huyvnphan", "timm")


@dataclass
class LogitsRequest:
    """Everything one logits job needs, serialisable to JSON for the command line."""

    dataset: str
    model: str
    spec: dict  # the model's config entry
    config: dict  # the settings sources may read: "datasets", "inference", "downloads"
    files: dict[str, str] = field(default_factory=dict)  # Download.path -> local file

    def to_json(self) -> dict:
        return {
            "dataset": self.dataset,
            "model": self.model,
            "spec": self.spec,
            "config": self.config,
            "files": self.files,
        }

    @classmethod
    def from_json(cls, data: dict) -> "LogitsRequest":
        return cls(**data)


class ModelSourceError(ValueError):
    """A model entry cannot be served by its source (unknown model, wrong data set, missing file)."""


def local_file(files: Mapping[str, str | Path], download: Download) -> Path:
    """The local copy of ``download`` named in a request's ``files``; fail clearly when it is absent."""
    try:
        path = Path(files[download.path])
    except KeyError:
        raise ModelSourceError(
            f"the logits request names no local file for {download.path} ({download.url}); "
            "run the job through the workflow, which downloads it first"
        ) from None
    if not path.is_file():
        raise ModelSourceError(f"{path} (downloaded from {download.url}) does not exist")
    return path


class Source(ABC):
    """A family of models whose logits the pipeline can produce."""

    name: ClassVar[str]
    #: whether producing logits runs a network that benefits from a GPU
    needs_gpu: ClassVar[bool] = False

    def downloads(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        """Files (weights, data sets, code archives) to fetch before :meth:`cache_logits`."""
        return []

    def logits_inputs(self, dataset: str, model: str, spec: dict, config: dict) -> dict[str, str]:
        """Local files the logits job reads, by key (:attr:`LogitsRequest.files`): the downloads by default."""
        root = config["downloads"]["dir"]
        return {item.path: f"{root}/{item.path}" for item in self.downloads(dataset, model, spec, config)}

    def resources(self, dataset: str, model: str, spec: dict, config: dict) -> dict:
        """Scheduler resources of one model's logits job: threads, gpu, mem_mb, runtime (minutes)."""
        return {"threads": 1, "gpu": 0, "mem_mb": 2000, "runtime": 10}

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        """Fail early, before any job starts, with a message saying what to fix."""

    @abstractmethod
    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        """Write the logits archive of one model (see :func:`calibrepro.io.save_logits`)."""


def produce_logits(request: LogitsRequest, output: str | Path) -> str:
    """Write one model's logits archive through its source, then read it back as the later steps will: the line
    ``calibrepro check-logits`` prints of it."""
    from calibrepro.io import load_logits, logits_summary

    get_source(request.spec["source"]).cache_logits(request, Path(output))
    return f"{output}: ok, {logits_summary(load_logits(output))}"


class UnknownSourceError(ValueError):
    """A model entry names a source the zoo does not know."""


def get_source(name: str) -> Source:
    """Instantiate the registered source ``name``."""
    try:
        target = SOURCES[name]
    except KeyError:
        raise UnknownSourceError(
            f"unknown model source {name!r}; known sources: {', '.join(sorted(SOURCES))}"
        ) from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)()
