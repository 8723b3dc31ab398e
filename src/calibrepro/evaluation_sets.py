"""Evaluation sets by data set key: the samples, labels and class names a network is evaluated on.

A data set key of ``models`` is one of the built-in sets (``cifar10``, ``cifar100``: the official
test tarballs; ``imagenet``: the local ILSVRC-2012 validation folder, see :mod:`calibrepro.datasets`;
``cifar10_1``: CIFAR-10.1, new test images of CIFAR-10's classes) or an image folder the user
declares under ``datasets.<key>``::

    datasets:
      shapes: {source: imagefolder, root: data/shapes}                 # root/<class>/*.jpg|png
      scans:  {source: imagefolder, root: data/scans, csv: labels.csv,  # rows path,label (relative to root)
               classes: [benign, malignant], class_map: {benign: 0, malignant: 1}}

``classes`` fixes the label order (index = position; default: the sorted folder names or CSV labels);
``class_map`` maps a class to the network output it is read from, by index or by the network's
label name (default: the class's own name in the network's label set, or the identity when the
network has exactly one output per class). :func:`output_columns` applies and validates it.

A set with ``calibrate_on: <key>`` is a shifted test set of the models of ``<key>``; :func:`home`
names the set whose models (and pins) it is evaluated with.

Samples of a folder are ordered by class index, then by path (as ``torchvision.datasets.ImageFolder``).
A root holding ``train/`` and ``test/`` (the layout networks are trained on, :mod:`calibrepro.training.folders`)
is evaluated on ``test/``, so pretrained and trained models of one data set see the same images.
The sets are independent of the networks (:mod:`calibrepro.zoo.network`); one logits step joins them.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from calibrepro import datasets
from calibrepro.datasets import DatasetError
from calibrepro.download import Download
from calibrepro.training.folders import is_split

#: file name suffixes read as images (what PIL decodes; ImageFolder's usual extensions)
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".tif", ".tiff", ".webp"}
BUILT_IN = ("cifar10", "cifar100", "cifar10_1", "imagenet")

#: CIFAR-10.1 v6 (Recht, Roelofs, Schmidt & Shankar 2018, "Do CIFAR-10 classifiers generalize to
#: CIFAR-10?"): 2,000 images of CIFAR-10's ten classes in CIFAR-10's label order, from the authors'
#: repository at its last commit touching the files; the data file is pinned by its git blob id (the
#: repository's tree names it; no sha256 is published), the labels by sha256 (the file at that commit)
CIFAR10_1_URL = ("https://raw.githubusercontent.com/modestyachts/CIFAR-10.1/"
                 "d9982abb0bfc4846b8d13a11e66b887d946205d0/datasets")
CIFAR10_1 = {
    "data": Download(url=f"{CIFAR10_1_URL}/cifar10.1_v6_data.npy", path="datasets/cifar10.1/cifar10.1_v6_data.npy",
                     checksum="git-blob-sha1:24349cc5f3fb59648d75cd8015b5a184b1f5c250"),
    "labels": Download(url=f"{CIFAR10_1_URL}/cifar10.1_v6_labels.npy", path="datasets/cifar10.1/cifar10.1_v6_labels.npy",
                       checksum="sha256:ae40beda001693674edc94d925ee8268cfe68905f8f9aff800c8dcdfcd6c9448"),
}


@dataclass
class EvaluationSet:
    """Samples in memory (``images``, (N, H, W, C) uint8) or on disk (``paths``), with labels and class names."""

    name: str
    class_names: list[str]
    labels: np.ndarray
    images: np.ndarray | None = None
    paths: list[str] | None = None
    description: dict = field(default_factory=dict)  # what the logits' metadata records about the set

    def __len__(self) -> int:
        return len(self.labels)


def entry(dataset: str, config: Mapping) -> dict:
    """The ``datasets.<dataset>`` settings (empty when absent)."""
    return dict(((config.get("datasets") or {}).get(dataset)) or {})


def home(dataset: str, config: Mapping) -> str:
    """The data set whose models ``dataset`` is evaluated with: its ``calibrate_on`` (a shifted set), else itself."""
    return entry(dataset, config).get("calibrate_on") or dataset


def kind(dataset: str, config: Mapping) -> str:
    """``imagefolder`` for a declared folder, else the built-in set's own key; fail for an unknown key."""
    if entry(dataset, config).get("source") == "imagefolder":
        return "imagefolder"
    if dataset in BUILT_IN:
        return dataset
    raise DatasetError(
        f"data set {dataset!r} is not built in ({', '.join(BUILT_IN)}); declare it as a folder of images: "
        f"datasets: {{{dataset}: {{source: imagefolder, root: <folder with one sub-folder per class>}}}}"
    )


def downloads(dataset: str, config: Mapping) -> list[Download]:
    """Files the set needs from the network (the CIFAR tarballs, CIFAR-10.1's arrays); folders are local."""
    which = kind(dataset, config)
    if which == "cifar10_1":
        return list(CIFAR10_1.values())
    return [datasets.cifar_download(which)] if which in datasets.CIFAR else []


def check(dataset: str, config: Mapping) -> None:
    """Fail before any job starts when a folder set is missing, empty or inconsistent."""
    which = kind(dataset, config)
    if which == "imagenet":
        settings = entry(dataset, config)
        datasets.check_imagenet(settings.get("root"), settings.get("labels_file"))
    elif which == "imagefolder":
        folder_samples(dataset, entry(dataset, config))


def load(dataset: str, config: Mapping, files: Mapping[str, str]) -> EvaluationSet:
    """The evaluation set of ``dataset``; ``files`` maps a download's path to its local copy."""
    which = kind(dataset, config)
    if which in datasets.CIFAR:
        download = datasets.cifar_download(which)
        tarball = files.get(download.path)
        if tarball is None or not Path(tarball).is_file():
            raise DatasetError(f"{dataset}: the CIFAR tarball {download.path} has not been downloaded ({download.url})")
        images, labels = datasets.read_cifar_test(tarball, which)
        names = [str(i) for i in range(datasets.CIFAR[which].num_classes)]
        return EvaluationSet(dataset, names, labels, images=images, description={"kind": which, "url": download.url})
    if which == "cifar10_1":
        images, labels = read_cifar10_1(files)
        names = [str(i) for i in range(datasets.CIFAR["cifar10"].num_classes)]  # CIFAR-10's classes and order
        return EvaluationSet(dataset, names, labels, images=images,
                             description={"kind": which, "url": CIFAR10_1["data"].url})
    settings = entry(dataset, config)
    if which == "imagenet":
        paths, labels = datasets.imagenet_samples(settings.get("root"), settings.get("labels_file"))
        return EvaluationSet(dataset, datasets.imagenet_wnids(), labels, paths=paths, description={"kind": which})
    paths, labels, names = folder_samples(dataset, settings)
    description = {"kind": which, "root": str(settings["root"]), "csv": settings.get("csv"), "classes": names}
    return EvaluationSet(dataset, names, labels, paths=paths, description=description)


def read_cifar10_1(files: Mapping[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10.1's images ``(2000, 32, 32, 3)`` uint8 and labels int64, read without unpickling."""
    arrays = {}
    for part, download in CIFAR10_1.items():
        path = files.get(download.path)
        if path is None or not Path(path).is_file():
            raise DatasetError(f"cifar10_1: {download.path} has not been downloaded ({download.url})")
        try:
            arrays[part] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as error:
            raise DatasetError(f"cifar10_1: {path} is not a readable .npy array ({error}); delete it and run again") from None
    images, labels = arrays["data"], arrays["labels"]
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (32, 32, 3) or labels.shape != (len(images),):
        raise DatasetError(
            f"cifar10_1: expected (N, 32, 32, 3) uint8 images and N labels, got {images.shape} {images.dtype} and "
            f"{labels.shape}; delete {CIFAR10_1['data'].path} and {CIFAR10_1['labels'].path} and run again"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= datasets.CIFAR["cifar10"].num_classes):
        raise DatasetError(f"cifar10_1: labels outside CIFAR-10's 0..9 in {files[CIFAR10_1['labels'].path]}")
    return images, labels.astype(np.int64)


def _is_image(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES


def folder_samples(dataset: str, settings: Mapping) -> tuple[list[str], np.ndarray, list[str]]:
    """``(paths, labels, class names)`` of an image folder (class sub-folders, or a CSV of path,label)."""
    key = f"datasets.{dataset}"
    root = Path(str(settings.get("root") or "")).expanduser()
    if not settings.get("root") or not root.is_dir():
        raise DatasetError(f"{key}.root: {root} is not a folder; set it to the folder holding the images")
    if not settings.get("csv") and is_split(root):  # root/train/, root/test/ (source: train's layout): test/
        root = root / "test"
    if settings.get("csv"):
        pairs = _csv_pairs(key, root, Path(settings["csv"]).expanduser())
    else:
        pairs = []
        for folder in sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith(".")):
            for dirpath, _, names in os.walk(root / folder):
                pairs.extend((os.path.join(dirpath, name), folder) for name in names if _is_image(name))
        if not pairs:
            raise DatasetError(
                f"{key}.root: {root} holds no images in class sub-folders (<root>/<class>/*.jpg|png); "
                f"image suffixes read: {', '.join(sorted(IMAGE_SUFFIXES))}"
            )
    found = sorted({label for _, label in pairs})
    declared = settings.get("classes")
    names = [str(name) for name in declared] if declared else found
    if len(set(names)) != len(names):
        raise DatasetError(f"{key}.classes: names must be unique")
    unknown = sorted(set(found) - set(names))
    if unknown:
        raise DatasetError(
            f"{key}: {root} has images of classes not in {key}.classes: {', '.join(unknown[:5])}; add them to the "
            "list or remove their images"
        )
    index = {name: i for i, name in enumerate(names)}
    pairs.sort(key=lambda pair: (index[pair[1]], pair[0]))
    return [path for path, _ in pairs], np.array([index[label] for _, label in pairs], dtype=np.int64), names


def _csv_pairs(key: str, root: Path, table: Path) -> list[tuple[str, str]]:
    """Rows ``path,label`` of a CSV (a header row ``path,label`` is skipped); paths relative to ``root``."""
    if not table.is_absolute() and not table.is_file():
        table = root / table
    if not table.is_file():
        raise DatasetError(f"{key}.csv: {table} does not exist; give a CSV with rows path,label")
    pairs = []
    with open(table, newline="", encoding="utf-8") as handle:
        for number, row in enumerate(csv.reader(handle), start=1):
            if not row or (number == 1 and [cell.strip().lower() for cell in row[:2]] == ["path", "label"]):
                continue
            if len(row) < 2:
                raise DatasetError(f"{key}.csv: {table} line {number}: expected path,label, got {row!r}")
            path = Path(row[0].strip())
            path = path if path.is_absolute() else root / path
            if not path.is_file():
                raise DatasetError(f"{key}.csv: {table} line {number}: {path} does not exist")
            pairs.append((str(path), row[1].strip()))
    if not pairs:
        raise DatasetError(f"{key}.csv: {table} lists no images")
    return pairs


def output_columns(dataset: str, config: Mapping, classes: list[str], num_outputs: int,
                   label_names: list[str] | None) -> list[int]:
    """The network output each class is read from, in class order; fail naming what does not map.

    ``datasets.<dataset>.class_map`` first (an output index, or a name of the network's label set),
    then the class's own name in the label set; a network with exactly one output per class and no
    matching names reads class i from output i. A shifted set without a ``class_map`` of its own
    takes that of the set it is calibrated on.
    """
    key = f"datasets.{dataset}"
    mapping = entry(dataset, config).get("class_map") or entry(home(dataset, config), config).get("class_map") or {}
    extra = sorted(set(mapping) - set(classes))
    if extra:
        raise DatasetError(f"{key}.class_map: {', '.join(map(str, extra))} are not classes of the set ({', '.join(classes[:10])})")
    position = {name: i for i, name in enumerate(label_names or [])}
    identity = num_outputs == len(classes) and not mapping and not set(classes) <= set(position)
    columns, missing = [], []
    for i, name in enumerate(classes):
        target = mapping.get(name, i if identity else name)
        if isinstance(target, int) and not isinstance(target, bool):
            if not 0 <= target < num_outputs:
                raise DatasetError(f"{key}.class_map.{name}: output {target} is outside the network's 0..{num_outputs - 1}")
            columns.append(target)
        elif str(target) in position:
            columns.append(position[str(target)])
        else:
            missing.append(str(name))
    if missing:
        shown = ", ".join((label_names or [])[:5]) or "no names known"
        raise DatasetError(
            f"{key}: the classes {', '.join(missing[:5])} are not in the network's label set ({num_outputs} outputs; "
            f"names: {shown}, ...); map each class to an output index or label name with "
            f"{key}.class_map: {{<class>: <index or label name>}}"
        )
    if len(set(columns)) != len(columns):
        raise DatasetError(f"{key}: two classes are read from the same network output ({columns}); fix {key}.class_map")
    return columns
