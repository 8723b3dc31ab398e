"""A folder of images as the training and evaluation sets of the networks the pipeline trains.

``datasets.<key>: {source: imagefolder, root: <folder>}`` under a data set whose models have
``source: train`` (for instance ``cifar10``, replacing the official archive). Two layouts:

* ``root/train/<class>/*`` and ``root/test/<class>/*``: trained on ``train/``, logits on ``test/``;
  every class of ``test/`` must be one of ``train/``'s;
* ``root/<class>/*`` only: a seeded split, stratified by class, holds out ``evaluation_fraction``
  (default 0.5) of the images for the logits (``seed``, default 0), as for the bundled digits.

``calibration_pool: N`` (default 0) holds N more images out of the training images
(:func:`calibrepro.training.data.pool_from_training`, seeded with ``seed``).

Classes and sample order as the folders of pretrained models use them
(:func:`calibrepro.evaluation_sets.folder_samples`, ``torchvision.datasets.ImageFolder``): class
index = position among the sorted class folder names, samples by class, then by path. Every file
in a class folder must be an image of the same size (``resize: S`` or ``[H, W]`` resizes them,
bilinear); grayscale folders give one channel, any colour image makes them all RGB. The pixels are
standardised per channel by the training images' mean and standard deviation
(:func:`calibrepro.training.data.standardise`). The provenance, and so the weights cache's key,
holds the sha256 of the decoded pixels and labels: a changed, added or removed image trains again;
a moved folder does not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from calibrepro.datasets import DatasetError

#: the two sub-folders of a root that is already split
SPLIT_FOLDERS = ("train", "test")
#: defaults of the split of a root with class folders only
DEFAULT_EVALUATION_FRACTION = 0.5
DEFAULT_SEED = 0


def is_folder(settings: Mapping) -> bool:
    """Whether a data set's settings (``datasets.<key>``) declare a folder of images."""
    return settings.get("source") == "imagefolder"


def is_split(root: Path) -> bool:
    """Whether ``root`` holds ``train/`` and ``test/`` (else its sub-folders are the classes)."""
    return all((root / name).is_dir() for name in SPLIT_FOLDERS)


def class_files(key: str, folder: Path) -> dict[str, list[str]]:
    """Class name -> its files (sorted paths, hidden files left out) of the class folders under ``folder``."""
    classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir() and not entry.name.startswith("."))
    if len(classes) < 2:
        found = f"only the class {classes[0]!r}" if classes else "no class folders"
        raise DatasetError(f"{key}.root: {folder} has {found}; a classifier needs at least two class sub-folders")
    files = {}
    for name in classes:
        paths = []
        for dirpath, dirnames, names in os.walk(folder / name):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            paths.extend(os.path.join(dirpath, n) for n in names if not n.startswith("."))
        if not paths:
            raise DatasetError(f"{key}.root: the class folder {folder / name} holds no images; add images or remove it")
        files[name] = sorted(paths)
    return files


def _size(resize) -> tuple[int, int] | None:
    """``resize`` as (height, width): an integer is a square side."""
    if resize is None:
        return None
    return (int(resize), int(resize)) if isinstance(resize, int) else (int(resize[0]), int(resize[1]))


def read_images(key: str, paths: list[str], resize) -> np.ndarray:
    """uint8 ``(N, H, W, C)`` pixels of ``paths``; one line naming the file when one is not an image or differs in size."""
    from PIL import Image, UnidentifiedImageError

    size, pixels, first = _size(resize), [], None
    for path in paths:
        try:
            with Image.open(path) as image:
                image = image.convert("L" if image.mode in ("1", "L", "I;16") else "RGB")
                if size is not None and image.size != (size[1], size[0]):
                    image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
                array = np.asarray(image, dtype=np.uint8)
        except (UnidentifiedImageError, OSError) as error:
            raise DatasetError(f"{key}.root: {path} is not an image ({type(error).__name__}); remove it") from None
        if first is None:
            first = (path, array.shape[:2])
        elif array.shape[:2] != first[1]:
            (h, w), (h0, w0) = array.shape[:2], first[1]
            raise DatasetError(
                f"{key}.root: {path} is {w}x{h} pixels, {first[0]} is {w0}x{h0}; set {key}.resize "
                "(a side, or [height, width]) to train on images of different sizes"
            )
        pixels.append(array)
    if all(array.ndim == 2 for array in pixels):
        return np.stack(pixels)[..., None]
    return np.stack([np.repeat(a[..., None], 3, axis=2) if a.ndim == 2 else a for a in pixels])


def _samples(files: dict[str, list[str]], index: dict[str, int]) -> tuple[list[str], np.ndarray]:
    paths = [path for name in files for path in files[name]]
    labels = np.array([index[name] for name in files for _ in files[name]], dtype=np.int64)
    return paths, labels


def content_digest(names: list[str], parts: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """sha256 of the class names and of each part's pixels (shape and bytes) and labels."""
    digest = hashlib.sha256("\n".join(names).encode())
    for pixels, labels in parts:
        digest.update(repr(pixels.shape).encode())
        digest.update(np.ascontiguousarray(pixels).tobytes())
        digest.update(labels.astype("<i8").tobytes())
    return digest.hexdigest()


def hold_out(labels: np.ndarray, count: int | float, seed: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(kept, held out)`` sorted indices: ``count`` samples (a share when a float) held out, seeded and
    stratified by class; ``where`` names the config key when the classes are too small for that."""
    from sklearn.model_selection import train_test_split

    try:
        kept, held = train_test_split(np.arange(len(labels)), test_size=count, random_state=seed, stratify=labels)
    except ValueError as error:  # too few samples of a class for both parts
        raise DatasetError(f"{where}: cannot hold out {count} images stratified by class ({error})") from None
    return np.sort(kept), np.sort(held)


def folder_files(dataset: str, settings: Mapping) -> tuple[Path, list[dict[str, list[str]]]]:
    """``(root, [train files, test files])`` of a split root, ``(root, [files])`` of class folders (class ->
    paths); the folder's layout checked without reading an image, so that a job-free check can run it."""
    key = f"datasets.{dataset}"
    root = Path(str(settings.get("root") or "")).expanduser()
    if not settings.get("root") or not root.is_dir():
        raise DatasetError(f"{key}.root: {root} is not a folder; set it to the folder holding the images")
    if not is_split(root):
        return root, [class_files(key, root)]
    train_files, test_files = (class_files(key, root / name) for name in SPLIT_FOLDERS)
    missing = sorted(set(test_files) - set(train_files))
    if missing:
        raise DatasetError(
            f"{key}.root: {root / 'test'} has classes that {root / 'train'} lacks: {', '.join(missing[:5])}; "
            "a network cannot learn a class it is not trained on"
        )
    return root, [train_files, test_files]


def read_folder(dataset: str, settings: Mapping) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """``(training images, labels, evaluation images, labels, provenance)`` of the image folder
    ``datasets.<dataset>``: uint8 ``(N, H, W, C)`` pixels (module docstring); the calibration pool and the
    standardisation are :func:`calibrepro.training.data.load`'s."""
    key = f"datasets.{dataset}"
    resize, seed = settings.get("resize"), settings.get("seed", DEFAULT_SEED)
    root, layout = folder_files(dataset, settings)
    if len(layout) == 2:
        train_files, test_files = layout
        names = list(train_files)
        index = {name: i for i, name in enumerate(names)}
        train_paths, y_train = _samples(train_files, index)
        eval_paths, y_eval = _samples(test_files, index)
        train_images, eval_images = read_images(key, train_paths, resize), read_images(key, eval_paths, resize)
        split = {"layout": "train/ and test/"}
    else:
        [files] = layout
        names = list(files)
        paths, labels = _samples(files, {name: i for i, name in enumerate(names)})
        fraction = settings.get("evaluation_fraction", DEFAULT_EVALUATION_FRACTION)
        train, evaluation = hold_out(labels, fraction, seed, f"{key}.evaluation_fraction")  # folder order in each
        images = read_images(key, paths, resize)
        train_images, y_train, eval_images, y_eval = images[train], labels[train], images[evaluation], labels[evaluation]
        split = {"layout": "class folders", "evaluation_fraction": fraction, "seed": seed}
    if train_images.shape[1:] != eval_images.shape[1:]:
        raise DatasetError(
            f"{key}.root: the training images are {train_images.shape[1:3]}, the test images {eval_images.shape[1:3]} "
            f"(height, width); set {key}.resize"
        )
    digest = content_digest(names, [(train_images, y_train), (eval_images, y_eval)])
    provenance = {**split, "classes": names, "resize": resize, "content_sha256": digest}
    return train_images, y_train, eval_images, y_eval, provenance
