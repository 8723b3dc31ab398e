"""Evaluation sets: CIFAR tarballs in the official format, the ImageNet folder check."""

from __future__ import annotations

import io
import pickle
import tarfile

import numpy as np
import pytest

from calibrepro import datasets
from calibrepro.datasets import DatasetError
from servers import cifar_tarball_bytes, random_cifar


@pytest.mark.parametrize("dataset, classes", [("cifar10", 10), ("cifar100", 100)])
def test_read_cifar_test_gives_pixels_and_labels_in_order(tmp_path, dataset, classes):
    images, labels = random_cifar(13, classes, seed=3)
    images[0] = 0
    images[0, 1, 2] = (10, 20, 30)  # row 1, column 2, RGB
    tarball = tmp_path / datasets.CIFAR[dataset].archive
    tarball.write_bytes(cifar_tarball_bytes(dataset, images, labels))
    got_images, got_labels = datasets.read_cifar_test(tarball, dataset)
    assert got_images.shape == (13, 32, 32, 3) and got_images.dtype == np.uint8
    assert got_labels.dtype == np.int64
    assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)
    assert tuple(got_images[0, 1, 2]) == (10, 20, 30) and got_images[0].sum() == 60


def test_the_pins_are_the_official_tarballs():
    cifar10, cifar100 = datasets.cifar_download("cifar10"), datasets.cifar_download("cifar100")
    assert cifar10.url == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert cifar10.checksum == "md5:c58f30108f718f92721af3b95e74349a"
    assert cifar100.url == "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
    assert cifar100.checksum == "md5:eb9058c3a382ffc7106e4002c42a8d85"
    with pytest.raises(DatasetError, match="not a CIFAR data set"):
        datasets.cifar_download("imagenet")


def test_unreadable_tarballs_fail_clearly(tmp_path):
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"this is not a tarball")
    with pytest.raises(DatasetError, match="not a readable CIFAR python tarball"):
        datasets.read_cifar_test(garbage, "cifar10")
    images, labels = random_cifar(2, 10)
    cifar10 = tmp_path / "cifar-10-python.tar.gz"
    cifar10.write_bytes(cifar_tarball_bytes("cifar10", images, labels))
    with pytest.raises(DatasetError, match="no member 'cifar-100-python/test'"):
        datasets.read_cifar_test(cifar10, "cifar100")


def test_pickles_with_arbitrary_objects_are_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    payload = pickle.dumps({b"data": Evil(), b"labels": [0]}, protocol=2)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    path = tmp_path / "evil.tar.gz"
    path.write_bytes(buffer.getvalue())
    with pytest.raises(DatasetError, match=r"unexpected object (__builtin__|builtins)\.print"):
        datasets.read_cifar_test(path, "cifar10")


# ------------------------------------------------------------------------------------------ ImageNet


def test_imagenet_class_order_is_the_sorted_wordnet_ids():
    wnids = datasets.imagenet_wnids()
    assert len(wnids) == 1000 and wnids == sorted(wnids)
    assert wnids[0] == "n01440764" and wnids[-1] == "n15075141"


def test_missing_or_unset_root_says_what_is_expected_and_where_to_get_it(tmp_path):
    with pytest.raises(DatasetError) as error:
        datasets.check_imagenet(None)
    assert "datasets.imagenet.root is not set" in str(error.value)
    assert "image-net.org" in str(error.value) and "ILSVRC2012_img_val.tar" in str(error.value)
    with pytest.raises(DatasetError, match=f"{tmp_path / 'absent'} does not exist"):
        datasets.check_imagenet(tmp_path / "absent")


def _class_folders(root, per_class=1, skip=()):
    for wnid in datasets.imagenet_wnids():
        if wnid in skip:
            continue
        (root / wnid).mkdir(parents=True)
        for j in range(per_class):
            (root / wnid / f"ILSVRC2012_val_{j:08d}.JPEG").write_bytes(b"")


def test_wrong_number_of_class_folders(tmp_path):
    for wnid in datasets.imagenet_wnids()[:3]:
        (tmp_path / wnid).mkdir()
    with pytest.raises(DatasetError) as error:
        datasets.check_imagenet(tmp_path)
    message = str(error.value)
    assert "has 3 class folders" in message and "997 of the 1,000 class folders are missing" in message
    (tmp_path / "n99999999").mkdir()
    with pytest.raises(DatasetError, match="1 folders are not ILSVRC-2012 classes"):
        datasets.check_imagenet(tmp_path)


def test_flat_folder_without_labels_file(tmp_path):
    (tmp_path / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"")
    with pytest.raises(DatasetError, match=r"no class folders .* datasets.imagenet.labels_file is not set"):
        datasets.check_imagenet(tmp_path)


def test_complete_and_incomplete_class_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "IMAGENET_NUM_VAL", 2000)  # 2 images per class keeps the test fast
    _class_folders(tmp_path, per_class=2)
    (tmp_path / "n01440764" / ".DS_Store").write_bytes(b"")
    (tmp_path / "README.txt").write_bytes(b"")
    paths, labels = datasets.imagenet_samples(tmp_path)
    assert len(paths) == 2000 and labels[0] == 0 and labels[-1] == 999
    assert np.all(np.diff(labels) >= 0)
    assert paths[:2] == [str(tmp_path / "n01440764" / f"ILSVRC2012_val_{j:08d}.JPEG") for j in range(2)]
    (tmp_path / "n15075141" / "ILSVRC2012_val_00000001.JPEG").unlink()
    with pytest.raises(DatasetError, match="holds 1,999 images, expected 2,000; the folder is incomplete"):
        datasets.check_imagenet(tmp_path)


def test_flat_layout_with_labels_file_gives_the_same_order(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "IMAGENET_NUM_VAL", 2000)
    wnids = datasets.imagenet_wnids()
    rng = np.random.default_rng(0)
    truth = rng.permutation(np.repeat(np.arange(1000), 2))
    flat = tmp_path / "val"
    flat.mkdir()
    for i in range(2000):
        (flat / f"ILSVRC2012_val_{i + 1:08d}.JPEG").write_bytes(b"")
    labels_file = tmp_path / "labels.txt"
    labels_file.write_text("\n".join(wnids[k] for k in truth) + "\n")
    paths, labels = datasets.imagenet_samples(flat, labels_file)
    assert np.array_equal(labels, np.sort(truth))
    first = [i for i in range(2000) if truth[i] == 0]
    assert paths[:2] == [str(flat / f"ILSVRC2012_val_{i + 1:08d}.JPEG") for i in first]
    labels_file.write_text("\n".join(wnids[k] for k in truth[:-1]) + "\n")
    with pytest.raises(DatasetError, match="1999 labels but .* holds 2000 images"):
        datasets.check_imagenet(flat, labels_file)
    labels_file.write_text("\n".join(["n00000000"] * 2000) + "\n")
    with pytest.raises(DatasetError, match="not ILSVRC-2012 WordNet ids"):
        datasets.check_imagenet(flat, labels_file)


def test_image_files_are_read_as_rgb(tmp_path):
    from PIL import Image

    path = tmp_path / "gray.JPEG"
    Image.fromarray(np.full((40, 50), 128, dtype=np.uint8), mode="L").save(path)
    data = datasets.ImageFiles([str(path)], np.array([7]), transform=lambda image: np.asarray(image))
    array, label = data[0]
    assert array.shape == (40, 50, 3) and label == 7 and len(data) == 1
