"""Training and evaluation sets of the networks the pipeline trains: digits, MNIST, CIFAR-10, image folders.

* ``digits``: scikit-learn's bundled 8x8 digits (1,797, no download), scaled to [0, 1] and split,
  stratified and seeded, into a training part and an evaluation part (``datasets.digits``).
* ``mnist``: the four IDX files of LeCun, Cortes & Burges's MNIST page, pinned by the MD5 checksums
  published with them (torchvision checks the same); trained on the 60,000 training images, logits on
  the 10,000 test images in their official order.
* ``cifar10``, ``cifar100``: the official python tarball (:data:`calibrepro.datasets.CIFAR`, the
  archive of the thesis's pretrained CIFAR models); trained on its training images (50,000), logits
  on its test images (10,000; CIFAR-100's fine labels).
* any data set declared ``{source: imagefolder, root: ...}`` (also ``cifar10``, in place of the
  archive): the folder's images, :mod:`calibrepro.training.folders`.

Images are float32 ``(N, C, H, W)`` in [0, 1], standardised per channel by the mean and standard
deviation of the training images (computed here in float64, not copied from elsewhere).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from calibrepro import datasets
from calibrepro.datasets import DatasetError
from calibrepro.download import Download
from calibrepro.training.folders import hold_out, is_folder, read_folder

MNIST_URL = "http://yann.lecun.com/exdb/mnist/"
#: file -> published MD5 (the MNIST page's files, as torchvision pins them)
MNIST_FILES: dict[str, str] = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
#: the official CIFAR archives the networks train on -> their number of classes
CIFAR_CLASSES = {"cifar10": 10, "cifar100": 100}
#: element type codes of the IDX format (third byte of the magic number) -> big-endian numpy dtype
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass
class Parts:
    """A training set and the evaluation set whose logits are cached."""

    x_train: np.ndarray  # float32 (N, F) or (N, C, H, W)
    y_train: np.ndarray  # int64 (N,)
    x_eval: np.ndarray
    y_eval: np.ndarray
    num_classes: int
    provenance: dict = field(default_factory=dict)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def downloads(dataset: str, settings: Mapping | None = None) -> list[Download]:
    """The pinned files of ``dataset``'s training and evaluation sets (none for a folder of images)."""
    if is_folder(settings or {}):
        return []
    if dataset == "mnist":
        return [Download(MNIST_URL + name, f"md5:{md5}", f"datasets/mnist/{name}") for name, md5 in MNIST_FILES.items()]
    if dataset in CIFAR_CLASSES:
        return [datasets.cifar_download(dataset)]
    return []


def read_idx(path: str | Path) -> np.ndarray:
    """The array of an IDX file (gzip-compressed or not), as LeCun et al. define the format.

    Magic number: two zero bytes, the element type code, the number of dimensions; then one
    big-endian uint32 per dimension, then the data in C order, big-endian.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:
        raise DatasetError(f"{path}: not a readable IDX file ({error})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DatasetError(f"{path}: not an IDX file (magic number {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    shape = tuple(int(v) for v in np.frombuffer(raw[4:header], dtype=">u4"))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise DatasetError(f"{path}: {len(raw)} bytes, expected {expected} for an IDX array of shape {shape}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def read_mnist(images: str | Path, labels: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 28, 28)`` uint8 and labels ``(N,)`` int64 from a pair of MNIST IDX files."""
    pixels, targets = read_idx(images), read_idx(labels).astype(np.int64)
    if pixels.ndim != 3 or pixels.dtype != np.uint8 or targets.ndim != 1 or len(targets) != len(pixels):
        raise DatasetError(f"{images}, {labels}: expected uint8 images (N, 28, 28) and N labels, got {pixels.shape}, {targets.shape}")
    if targets.size and (targets.min() < 0 or targets.max() > 9):
        raise DatasetError(f"{labels}: labels outside [0, 9]")
    return pixels, targets


def digits_parts(evaluation_fraction: float = 0.5, seed: int = 0):
    """Return ``(x_train, y_train, x_eval, y_eval)``: the digits scaled to [0, 1], split stratified by class."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    features = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    train, evaluation = train_test_split(
        np.arange(len(labels)), test_size=evaluation_fraction, random_state=seed, stratify=labels
    )
    return features[train], labels[train], features[evaluation], labels[evaluation]


def standardise(train: np.ndarray, evaluation: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """uint8 images ``(N, C, H, W)`` -> float32 ``(x / 255 - mean_c) / sd_c``, mean and sd of the training images.

    Computed channel by channel in float64, so that CIFAR-10 needs no 1.2 GB float64 copy.
    """
    channels = range(train.shape[1])
    mean = np.array([train[:, c].mean(dtype=np.float64) / 255.0 for c in channels])
    sd = np.array([train[:, c].std(dtype=np.float64) / 255.0 for c in channels])

    def scale(images: np.ndarray) -> np.ndarray:
        out = np.empty(images.shape, dtype=np.float32)
        for c in channels:
            out[:, c] = (images[:, c] / 255.0 - mean[c]) / sd[c]
        return out

    return scale(train), scale(evaluation), {"mean": mean.tolist(), "sd": sd.tolist()}


def pool_from_training(train: tuple, evaluation: tuple, count: int, seed: int, where: str):
    """``(train images, labels, evaluation images, labels)`` with ``count`` training images moved after the evaluation ones.

    The calibration pool (``datasets.<key>.calibration_pool``): images the network never trains on,
    held out seeded and stratified (:func:`hold_out`), whose logits follow the evaluation set's in
    the logits file; the split keeps them out of both halves and the calibration-set-size study
    draws from them only for sizes beyond the calibration half (:mod:`calibrepro.splits`). Applied
    to the uint8 images, before the standardisation, which the kept training images alone define.
    """
    (images, labels), (eval_images, eval_labels) = train, evaluation
    kept, held = hold_out(labels, count, seed, where)
    return (images[kept], labels[kept], np.concatenate([eval_images, images[held]]),
            np.concatenate([eval_labels, labels[held]]))


def _images_parts(train_images, y_train, test_images, y_eval, classes: int, provenance: dict, settings: Mapping,
                  key: str) -> Parts:
    """uint8 ``(N, H, W, C)`` images -> :class:`Parts`: the calibration pool moved (``settings``'
    ``calibration_pool``, ``seed``), then the standardisation by the remaining training images."""
    pool = int(settings.get("calibration_pool", 0))
    if pool:
        seed = settings.get("seed", 0)
        train_images, y_train, test_images, y_eval = pool_from_training(
            (train_images, y_train), (test_images, y_eval), pool, seed, f"{key}.calibration_pool"
        )
        provenance = {**provenance, "calibration_pool": pool, "seed": seed}
    nchw = (0, 3, 1, 2)
    x_train, x_eval, scaling = standardise(train_images.transpose(nchw), test_images.transpose(nchw))
    return Parts(x_train, y_train, x_eval, y_eval, classes, {**provenance, "standardisation": scaling})


def _file(files: Mapping[str, str], download: Download) -> str:
    try:
        return files[download.path]
    except KeyError:
        raise DatasetError(
            f"no local file for {download.path} ({download.url}); run the job through the workflow, which downloads it"
        ) from None


def load(dataset: str, files: Mapping[str, str], settings: Mapping) -> Parts:
    """The training and evaluation sets of ``dataset`` from its downloaded files (``files``: path -> local file),
    or from the folder of images its settings declare."""
    if is_folder(settings):
        train_images, y_train, test_images, y_eval, provenance = read_folder(dataset, settings)
        classes = len(provenance["classes"])
        return _images_parts(train_images, y_train, test_images, y_eval, classes, provenance, settings, f"datasets.{dataset}")
    if dataset == "digits":
        fraction, seed = settings.get("evaluation_fraction", 0.5), settings.get("seed", 0)
        x_train, y_train, x_eval, y_eval = digits_parts(fraction, seed)
        return Parts(x_train, y_train, x_eval, y_eval, 10, {"evaluation_fraction": fraction, "seed": seed})
    if dataset == "mnist":
        paths = {d.path.rsplit("/", 1)[1]: _file(files, d) for d in downloads("mnist")}
        train_images, y_train = read_mnist(paths["train-images-idx3-ubyte.gz"], paths["train-labels-idx1-ubyte.gz"])
        test_images, y_eval = read_mnist(paths["t10k-images-idx3-ubyte.gz"], paths["t10k-labels-idx1-ubyte.gz"])
        x_train, x_eval, scaling = standardise(train_images[:, None], test_images[:, None])
        return Parts(x_train, y_train, x_eval, y_eval, 10, {"standardisation": scaling, "evaluation": "test set"})
    if dataset in CIFAR_CLASSES:
        tarball = _file(files, datasets.cifar_download(dataset))
        train_images, y_train = datasets.read_cifar_train(tarball, dataset)
        test_images, y_eval = datasets.read_cifar_test(tarball, dataset)
        provenance = {"evaluation": "test set"}
        classes = CIFAR_CLASSES[dataset]
        return _images_parts(train_images, y_train, test_images, y_eval, classes, provenance, settings, f"datasets.{dataset}")
    raise DatasetError(f"no training set for data set {dataset!r}")  # checked earlier by the source
