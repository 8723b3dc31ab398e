"""What the pretrained model sources (akamaster, chenyaofo, huyvnphan, timm) have in common.

A source module holds its pins as data: one :class:`Pin` per (data set, model) with the weights'
URL and checksum, the licence, the top-1 accuracy the source publishes, the original code files (if
the architecture comes from the original repository), the architecture's entry point, the
preprocessing and, where a model needs more than its source's usual job, its own scheduler
resources. :class:`PretrainedSource` turns a pin into downloads, early checks, scheduler resources
and, in :meth:`PretrainedSource.cache_logits`, a logits archive. A subclass implements only
:meth:`PretrainedSource.build` (a network from the local files) and, for ImageNet, the eval
transform.

A pinned network also runs on a shifted test set (``datasets.<key>.calibrate_on``: CIFAR-10.1 for
CIFAR-10, an image folder): the pin is that of the set it is calibrated on, the samples those of the
shifted set (:mod:`calibrepro.evaluation_sets`), joined by the logits step of
:func:`calibrepro.zoo.network.write_logits`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Mapping

import numpy as np

from calibrepro import datasets, evaluation_sets
from calibrepro.download import Download, parse_checksum, sha256_of
from calibrepro.inference import environment, inference_settings, job_threads, predict, predict_array
from calibrepro.io import save_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, Source, local_file

#: {"gpu" | "cpu": {"mem_mb": ..., "runtime": minutes}}: one logits job on a GPU node or on CPUs only
JobResources = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True)
class Pin:
    """One pretrained model of a source, as data (like timm's ``pretrained_cfg``)."""

    dataset: str  # data set it was trained for and is evaluated on
    name: str  # the model's name in its source
    architecture: str  # entry point: hub function, builder name or timm "name.tag"
    weights: Download  # the pinned weights file: URL, checksum, local path
    num_classes: int
    preprocessing: dict  # mean/std (+ input size, crop_pct, interpolation for ImageNet)
    licence: str  # SPDX identifier of the weights' licence, as their publisher states it
    published_top1: float | None = None  # top-1 accuracy (%) on the evaluation set, as published
    published_in: str = ""  # where published_top1 is printed (document at a version)
    code: tuple[Download, ...] = ()  # original model definitions, fetched at the pinned commit
    member: str | None = None  # the weights inside an archive (huyvnphan's state_dicts.zip)
    reference: str = ""  # where the pin was read (repository at commit, release page)
    resources: JobResources | None = None  # this model's logits job, where the source's RESOURCES undersell it
    dropout: float = 0.0  # rate of the network's dropout layers, read from its code (0: none; mc_dropout needs > 0)

    def downloads(self) -> list[Download]:
        return [self.weights, *self.code]


def github_raw(repo: str, commit: str, path: str, sha256: str, prefix: str) -> Download:
    """A file of a GitHub repository at a commit, served byte-exact by raw.githubusercontent.com."""
    return Download(
        url=f"https://raw.githubusercontent.com/{repo}/{commit}/{path}",
        checksum=f"sha256:{sha256}",
        path=f"{prefix}/{path}",
    )


def code_root(files: Mapping[str, str | Path], code: tuple[Download, ...], prefix: str) -> Path:
    """The local folder holding the original code files (``prefix/<path in the repository>``).

    Every file must sit at the same relative place as in the repository, so that the code's own
    imports work; the folder is derived from the first file and checked against the others.
    """
    if not code:
        raise ModelSourceError(f"no code files pinned under {prefix}")
    root = None
    for item in code:
        relative = Path(item.path).relative_to(prefix)
        path = local_file(files, item).resolve()
        here = path.parents[len(relative.parts) - 1]
        if root is None:
            root = here
        if here != root or path != root / relative:
            raise ModelSourceError(f"the code files under {prefix} are not laid out as in their repository")
    return root


def cifar_transform(mean, std):
    """ToTensor + Normalize, the test-time preprocessing of every CIFAR model here."""
    from torchvision import transforms

    return transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean, std)])


class PretrainedSource(Source):
    """A source whose models are pretrained networks pinned in :attr:`PINS`."""

    needs_gpu = True
    #: (dataset, model name in the source) -> pin; filled by each source module
    PINS: ClassVar[dict[tuple[str, str], Pin]] = {}
    #: dataset -> the usual logits job of this source's models (a pin's ``resources`` overrides it)
    RESOURCES: ClassVar[dict[str, JobResources]] = {}

    # ------------------------------------------------------------------ what subclasses implement
    def build(self, pin: Pin, files: Mapping[str, str | Path], pretrained: bool = True):
        """The network of ``pin`` in eval mode, with its pinned weights when ``pretrained``."""
        raise NotImplementedError

    def weights_metadata(self, pin: Pin, weights: Path) -> dict:
        """Provenance of the weights for the logits archive's metadata."""
        return {"url": pin.weights.url, "pin": pin.weights.checksum, "sha256": sha256_of(weights)}

    def imagenet_transform(self, pin: Pin):  # pragma: no cover - only sources with ImageNet models
        raise ModelSourceError(f"source {self.name!r} has no ImageNet models")

    # ----------------------------------------------------------------------------- the interface
    @property
    def supported_datasets(self) -> list[str]:
        return sorted({dataset for dataset, _ in self.PINS})

    def models(self, dataset: str) -> list[str]:
        """Names of the models this source pins for ``dataset``."""
        return sorted(name for d, name in self.PINS if d == dataset)

    def pin(self, dataset: str, model: str, spec: dict) -> Pin:
        """The pin of a model entry (its config key, or ``name`` when given); fail with the known names."""
        name = spec.get("name") or model
        where = f"models.{dataset}.{model}"
        if dataset not in self.supported_datasets:
            raise ModelSourceError(
                f"{where}: source {self.name!r} has no models for data set {dataset!r}; it provides models for "
                f"{', '.join(self.supported_datasets)}"
            )
        try:
            return self.PINS[(dataset, name)]
        except KeyError:
            raise ModelSourceError(
                f"{where}: source {self.name!r} has no {dataset} model named {name!r}; known: "
                f"{', '.join(self.models(dataset))} (set 'name' when the config key differs)"
            ) from None

    def dataset_downloads(self, dataset: str) -> list[Download]:
        return [datasets.cifar_download(dataset)] if dataset in datasets.CIFAR else []

    def downloads(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        home = evaluation_sets.home(dataset, config)
        pin = self.pin(home, model, spec)
        data = self.dataset_downloads(dataset) if home == dataset else evaluation_sets.downloads(dataset, config)
        return [*pin.downloads(), *data]

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        home = evaluation_sets.home(dataset, config)
        pin = self.pin(home, model, spec)
        extra = sorted({"sha256", "file"} & set(spec))
        if extra:
            raise ModelSourceError(
                f"models.{dataset}.{model}: {', '.join(extra)} apply only to timm names without a pin; "
                f"{pin.name} is pinned by source {self.name!r} (remove the key)"
            )
        if "mc_seed" in spec and not spec.get("mc_dropout"):
            raise ModelSourceError(f"models.{dataset}.{model}.mc_seed: seeds MC-Dropout's masks; set mc_dropout or remove it")
        if spec.get("mc_dropout") and not pin.dropout:
            raise ModelSourceError(
                f"models.{dataset}.{model}.mc_dropout: {self.name}'s {pin.name} has no dropout layers; remove mc_dropout "
                "(`calibrepro models` lists which networks have them)"
            )
        for item in pin.downloads():
            parse_checksum(item.checksum)
        if home != dataset:  # a shifted test set
            evaluation_sets.check(dataset, config)
        elif dataset == "imagenet":
            settings = (config.get("datasets") or {}).get("imagenet") or {}
            datasets.check_imagenet(settings.get("root"), settings.get("labels_file"))

    def job_resources(self, pin: Pin) -> JobResources:
        """GPU and CPU-only resources of the pin's logits job: its own, else its data set's in :attr:`RESOURCES`."""
        return pin.resources or self.RESOURCES.get(pin.dataset, {})

    def resources(self, dataset: str, model: str, spec: dict, config: dict) -> dict:
        settings = inference_settings(config)
        on_gpu = settings["device"] != "cpu"
        pin = self.pin(evaluation_sets.home(dataset, config), model, spec)
        table = self.job_resources(pin).get("gpu" if on_gpu else "cpu", {})
        return {
            "threads": job_threads(settings),
            "gpu": 1 if on_gpu and self.needs_gpu else 0,
            "mem_mb": int(table.get("mem_mb", 8000)),
            "runtime": int(table.get("runtime", 60)),
        }

    def evaluation_set(self, pin: Pin, files: Mapping[str, str | Path], config: dict):
        """``(torch dataset, labels)`` of the pin's data set with the pin's preprocessing."""
        if pin.dataset in datasets.CIFAR:
            tarball = local_file(files, datasets.cifar_download(pin.dataset))
            images, labels = datasets.read_cifar_test(tarball, pin.dataset)
            transform = cifar_transform(pin.preprocessing["mean"], pin.preprocessing["std"])
            return datasets.ArrayImages(images, labels, transform), labels
        if pin.dataset == "imagenet":
            settings = (config.get("datasets") or {}).get("imagenet") or {}
            paths, labels = datasets.imagenet_samples(settings.get("root"), settings.get("labels_file"))
            return datasets.ImageFiles(paths, labels, self.imagenet_transform(pin)), labels
        raise ModelSourceError(f"no evaluation set for data set {pin.dataset!r}")  # pragma: no cover

    def pinned_network(self, pin: Pin, files: Mapping[str, str | Path]):
        """The pinned network as a :class:`calibrepro.zoo.network.Network`, to run on another evaluation set."""
        from calibrepro.zoo.network import Network

        mean, std = pin.preprocessing["mean"], pin.preprocessing["std"]
        if pin.dataset in datasets.CIFAR:
            transform, normalization = cifar_transform(mean, std), (mean, std)
            names = [str(i) for i in range(pin.num_classes)]  # the class names of the CIFAR evaluation sets
        else:
            transform, normalization, names = self.imagenet_transform(pin), None, datasets.imagenet_wnids()
        weights = local_file(files, pin.weights)
        return Network(
            module=self.build(pin, files, pretrained=True),
            transform=transform,
            preprocessing=pin.preprocessing,
            num_outputs=pin.num_classes,
            label_names=names,
            provenance={"name": pin.name, "architecture": pin.architecture, "reference": pin.reference,
                        "weights": self.weights_metadata(pin, weights),
                        "code": [{"url": item.url, "pin": item.checksum} for item in pin.code],
                        "licence": pin.licence, "calibrated_on": pin.dataset},
            normalization=normalization,
        )

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        home = evaluation_sets.home(request.dataset, request.config)
        pin = self.pin(home, request.model, request.spec)
        if home != request.dataset:  # a shifted test set: the pinned network on its samples
            from calibrepro.zoo.network import write_logits

            data = evaluation_sets.load(request.dataset, request.config, request.files)
            write_logits(request, data, self.pinned_network(pin, request.files), self.name, output)
            return
        weights = local_file(request.files, pin.weights)
        model = self.build(pin, request.files, pretrained=True)
        from calibrepro.zoo.network import logits_run

        settings, run, variant = logits_run(request, model, f"{self.name}'s {pin.name}")
        device = run["device"]
        if pin.dataset in datasets.CIFAR and settings["preprocessing"] == "batched":
            tarball = local_file(request.files, datasets.cifar_download(pin.dataset))
            images, labels = datasets.read_cifar_test(tarball, pin.dataset)
            logits = predict_array(model, images, pin.preprocessing["mean"], pin.preprocessing["std"], **run)
        else:
            data, labels = self.evaluation_set(pin, request.files, request.config)
            logits = predict(model, data, workers=settings["workers"], **run)
        if logits.shape[1] != pin.num_classes:
            raise ModelSourceError(
                f"{request.dataset}/{request.model}: {logits.shape[1]} logits per image, expected {pin.num_classes}"
            )
        metadata = {
            "source": self.name,
            "dataset": request.dataset,
            "model": request.model,
            "name": pin.name,
            "architecture": pin.architecture,
            "reference": pin.reference,
            "weights": self.weights_metadata(pin, weights),
            "code": [{"url": item.url, "pin": item.checksum} for item in pin.code],
            "preprocessing": pin.preprocessing,
            "licence": pin.licence,
            "published_top1_percent": pin.published_top1,
            "num_samples": int(len(labels)),
            "top1_accuracy": float(np.mean(logits.argmax(axis=1) == labels)),
            "inference": {**settings, "amp": bool(settings["amp"]) and device.type == "cuda"},
            "variant": variant,
            "environment": environment(device),
        }
        save_logits(output, logits, labels, metadata)
