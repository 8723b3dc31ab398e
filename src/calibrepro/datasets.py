"""Evaluation sets of the pretrained models: CIFAR-10/100 test sets and ILSVRC-2012 validation.

CIFAR-10/100 are read from the official python tarballs of https://www.cs.toronto.edu/~kriz/cifar.html
(pinned by the MD5 checksums published there), straight from the archive: only the test member is
decompressed, in memory. Sample order is the official one (test_batch / test).

ImageNet validation images cannot be downloaded automatically (the ImageNet terms of access must be
accepted by each user): ``datasets.imagenet.root`` names a local folder, checked by
:func:`check_imagenet` before any job starts. Two layouts are accepted:

* **class folders** (what ``torchvision.datasets.ImageFolder`` and timm's validation script read):
  ``root/<wnid>/<image>.JPEG``, 1,000 folders named by WordNet id (n01440764 ... n15075141), 50,000
  images;
* **flat**, as unpacked from ``ILSVRC2012_img_val.tar``: ``root/ILSVRC2012_val_00000001.JPEG`` ...
  ``ILSVRC2012_val_00050000.JPEG`` plus ``datasets.imagenet.labels_file``, a text file with one WordNet
  id per line in file-name order (e.g. ``imagenet_2012_validation_synset_labels.txt`` of the
  tensorflow/models repository, derived from the official devkit's ground truth).

Class index = position of the WordNet id in the sorted list of the 1,000 ids, which is the order of
the 1,000 outputs of every ImageNet classifier in timm and torchvision. Sample order, for both
layouts, is that of ``ImageFolder``: by class index, then by file name.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrepro.download import Download


class DatasetError(ValueError):
    """A data set is missing, incomplete or not in the expected format; the message says how to fix it."""


# --------------------------------------------------------------------------------------------- CIFAR


@dataclass(frozen=True)
class CifarSpec:
    """Where a CIFAR test set comes from and how its archive is laid out."""

    url: str
    md5: str  # published on https://www.cs.toronto.edu/~kriz/cifar.html
    archive: str  # file name of the tarball
    member: str  # the test batch inside the tarball
    label_key: bytes  # key of the labels in the unpickled test batch
    num_classes: int
    train_members: tuple[str, ...]  # the training batches inside the tarball, in order
    num_test: int = 10_000

    def download(self) -> Download:
        return Download(url=self.url, checksum=f"md5:{self.md5}", path=f"datasets/{self.archive}")


CIFAR: dict[str, CifarSpec] = {
    "cifar10": CifarSpec(
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        md5="c58f30108f718f92721af3b95e74349a",
        archive="cifar-10-python.tar.gz",
        member="cifar-10-batches-py/test_batch",
        label_key=b"labels",
        num_classes=10,
        train_members=tuple(f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)),
    ),
    "cifar100": CifarSpec(
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        md5="eb9058c3a382ffc7106e4002c42a8d85",
        archive="cifar-100-python.tar.gz",
        member="cifar-100-python/test",
        label_key=b"fine_labels",
        num_classes=100,
        train_members=("cifar-100-python/train",),
    ),
}


def cifar_download(dataset: str) -> Download:
    """The pinned tarball of ``dataset`` ("cifar10" or "cifar100")."""
    try:
        return CIFAR[dataset].download()
    except KeyError:
        raise DatasetError(f"{dataset!r} is not a CIFAR data set (known: {', '.join(CIFAR)})") from None


class _BatchUnpickler(pickle.Unpickler):
    """Unpickle a CIFAR batch (dicts, lists, bytes and numpy arrays) and refuse anything else."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),  # how Python 3 writes bytes into protocol-2 pickles
    }

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR batch")


def read_cifar_test(tarball: str | os.PathLike, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 32, 32, 3)`` uint8 (RGB, HWC) and labels ``(N,)`` int64 of the CIFAR test set.

    Reads only the test member of the official ``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz``.
    """
    return read_cifar_batches(tarball, dataset, (CIFAR[dataset].member,))


def read_cifar_train(tarball: str | os.PathLike, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels of the CIFAR training set (50,000; the batches in their official order)."""
    return read_cifar_batches(tarball, dataset, CIFAR[dataset].train_members)


def read_cifar_batches(tarball: str | os.PathLike, dataset: str, members) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 32, 32, 3)`` uint8 (RGB, HWC) and labels ``(N,)`` int64 of the named batches, concatenated."""
    spec = CIFAR[dataset]
    tarball = Path(tarball)
    batches = []
    try:
        with tarfile.open(tarball, "r:*") as archive:
            for member in members:
                try:
                    handle = archive.extractfile(member)
                except KeyError:
                    raise DatasetError(
                        f"{tarball}: no member {member!r}; expected the official {spec.archive} from {spec.url}"
                    ) from None
                if handle is None:
                    raise DatasetError(f"{tarball}: {member!r} is not a regular file")
                batches.append((member, _BatchUnpickler(io.BytesIO(handle.read()), encoding="bytes").load()))
    except (tarfile.TarError, EOFError, pickle.UnpicklingError) as error:
        raise DatasetError(f"{tarball}: not a readable CIFAR python tarball ({error})") from error
    images, labels = zip(*(_batch_arrays(tarball, spec, member, batch) for member, batch in batches))
    return np.concatenate(images), np.concatenate(labels)


def _batch_arrays(tarball: Path, spec: CifarSpec, member: str, batch: dict) -> tuple[np.ndarray, np.ndarray]:
    try:
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[spec.label_key], dtype=np.int64)
    except KeyError as error:
        raise DatasetError(f"{tarball}:{member}: missing key {error.args[0]!r}") from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise DatasetError(
            f"{tarball}:{member}: expected data (N, 3072) and N labels, got {data.shape} and {labels.shape}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= spec.num_classes):
        raise DatasetError(f"{tarball}:{member}: labels outside [0, {spec.num_classes - 1}]")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # rows are R, G, B planes of 32x32
    return np.ascontiguousarray(images), labels


# ------------------------------------------------------------------------------------------ ImageNet

IMAGENET_NUM_CLASSES = 1000
IMAGENET_NUM_VAL = 50_000
IMAGENET_IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
IMAGENET_HELP = (
    "It must hold the 50,000 ILSVRC-2012 validation images, either in class folders "
    "<root>/<wnid>/*.JPEG (1,000 folders n01440764 ... n15075141, 50 images each) or flat "
    "(<root>/ILSVRC2012_val_00000001.JPEG ...) together with datasets.imagenet.labels_file (one WordNet id "
    "per line, in file-name order). The images cannot be downloaded automatically: register at "
    "https://image-net.org, accept its terms of access (non-commercial research and education only), "
    "download ILSVRC2012_img_val.tar (6.3 GB) from https://image-net.org/challenges/LSVRC/2012/2012-downloads.php "
    "and unpack it; see docs/model-sources.md for how to sort it into class folders."
)
_WNID = re.compile(r"^n\d{8}$")


def imagenet_wnids() -> list[str]:
    """The 1,000 ILSVRC-2012 WordNet ids, sorted: index = output unit of ImageNet classifiers."""
    from timm.data import ImageNetInfo

    wnids = list(ImageNetInfo().label_names())
    if len(wnids) != IMAGENET_NUM_CLASSES or wnids != sorted(wnids):  # pragma: no cover - timm invariant
        raise RuntimeError("timm's ImageNet-1k synset list is not the 1,000 sorted WordNet ids")
    return wnids


def _is_image(name: str) -> bool:
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGENET_IMAGE_SUFFIXES


def _scan_images(folder: str) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(entry.name for entry in entries if entry.is_file() and _is_image(entry.name))


def imagenet_samples(root: str | os.PathLike | None, labels_file: str | os.PathLike | None = None):
    """``(paths, labels)`` of the validation set in ImageFolder order, after checking it is complete.

    Raises :class:`DatasetError` saying what is expected and where to get it.
    """
    if root in (None, ""):
        raise DatasetError(f"datasets.imagenet.root is not set. {IMAGENET_HELP}")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetError(f"datasets.imagenet.root: {root} does not exist or is not a folder. {IMAGENET_HELP}")
    wnids = imagenet_wnids()
    index = {wnid: i for i, wnid in enumerate(wnids)}
    with os.scandir(root) as entries:
        folders = sorted(entry.name for entry in entries if entry.is_dir() and _WNID.match(entry.name))
    samples: list[tuple[int, str]] = []
    if folders:
        missing = sorted(set(wnids) - set(folders))
        unknown = sorted(set(folders) - set(wnids))
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"{len(missing)} of the 1,000 class folders are missing (first: {', '.join(missing[:3])})")
            if unknown:
                parts.append(f"{len(unknown)} folders are not ILSVRC-2012 classes (first: {', '.join(unknown[:3])})")
            raise DatasetError(
                f"datasets.imagenet.root: {root} has {len(folders)} class folders; {'; '.join(parts)}. {IMAGENET_HELP}"
            )
        for wnid in wnids:
            samples.extend((index[wnid], str(root / wnid / name)) for name in _scan_images(str(root / wnid)))
        layout = "class folders"
    else:
        if labels_file in (None, ""):
            raise DatasetError(
                f"datasets.imagenet.root: {root} has no class folders (n01440764 ...) and "
                f"datasets.imagenet.labels_file is not set. {IMAGENET_HELP}"
            )
        labels_path = Path(labels_file).expanduser()
        if not labels_path.is_file():
            raise DatasetError(f"datasets.imagenet.labels_file: {labels_path} does not exist. {IMAGENET_HELP}")
        wnid_per_line = labels_path.read_text(encoding="utf-8").split()
        names = _scan_images(str(root))
        if len(wnid_per_line) != len(names):
            raise DatasetError(
                f"datasets.imagenet.labels_file: {labels_path} has {len(wnid_per_line)} labels but {root} holds "
                f"{len(names)} images; they must correspond one to one, in file-name order. {IMAGENET_HELP}"
            )
        bad = [w for w in wnid_per_line if w not in index]
        if bad:
            raise DatasetError(
                f"datasets.imagenet.labels_file: {labels_path}: {len(bad)} entries are not ILSVRC-2012 WordNet ids "
                f"(first: {bad[0]!r})"
            )
        samples = sorted((index[wnid], str(root / name)) for wnid, name in zip(wnid_per_line, names, strict=True))
        layout = "flat folder + labels_file"
    if len(samples) != IMAGENET_NUM_VAL:
        raise DatasetError(
            f"datasets.imagenet.root: {root} ({layout}) holds {len(samples):,} images, expected "
            f"{IMAGENET_NUM_VAL:,}; the folder is incomplete. {IMAGENET_HELP}"
        )
    paths = [path for _, path in samples]
    labels = np.array([label for label, _ in samples], dtype=np.int64)
    return paths, labels


def check_imagenet(root: str | os.PathLike | None, labels_file: str | os.PathLike | None = None) -> None:
    """Fail with a :class:`DatasetError` unless ``root`` holds the complete validation set."""
    imagenet_samples(root, labels_file)


# ----------------------------------------------------------------------------------- torch datasets


class ArrayImages:
    """A map-style dataset of HWC uint8 images in memory: ``(transform(image), label)``."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), int(self.labels[i])


class ImageFiles:
    """A map-style dataset of image files, read with PIL and converted to RGB (as timm and torchvision do)."""

    def __init__(self, paths: list[str], labels: np.ndarray, transform):
        self.paths, self.labels, self.transform = paths, labels, transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        from PIL import Image

        try:
            with open(self.paths[i], "rb") as handle:
                image = Image.open(handle).convert("RGB")
        except OSError as error:  # PIL's UnidentifiedImageError and truncated files are OSErrors
            raise DatasetError(f"{self.paths[i]}: not a readable image ({error}); replace or remove the file") from None
        return self.transform(image), int(self.labels[i])
