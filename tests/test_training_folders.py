"""Training on a folder of images (``datasets.<key>: {source: imagefolder}`` under ``source: train`` models)."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from calibrepro.calibrators.base import softmax
from calibrepro.datasets import DatasetError
from calibrepro.io import load_logits
from calibrepro.training import data, trainer
from calibrepro.training.networks import build
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from calibrepro.zoo.train import check_entry
from servers import REALDATA

CPU = torch.device("cpu")
CLASSES = ("circle", "square", "stripe")


def picture(label: int, rng, size=(32, 32), mode="RGB") -> Image.Image:
    """Noise with a bright band whose row depends on the class (learnable in one epoch)."""
    pixels = rng.integers(0, 80, (*size, 3 if mode == "RGB" else 1), dtype=np.uint8)
    pixels[6 * label + 4 : 6 * label + 9] = 240
    return Image.fromarray(pixels if mode == "RGB" else pixels[..., 0], mode=mode)


def write_folder(root, per_class: int, seed: int = 0, classes=CLASSES, size=(32, 32), mode="RGB") -> None:
    """``root/<class>/<i>.png`` for each class."""
    rng = np.random.default_rng(seed)
    for label, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            picture(label, rng, size, mode).save(root / name / f"{i:03d}.png")


def split_folder(root, train: int = 30, test: int = 10):
    write_folder(root / "train", train, seed=0)
    write_folder(root / "test", test, seed=1)
    return root


def request(tmp_path, root, spec, dataset="shapes", **settings):
    config = {"datasets": {dataset: {"source": "imagefolder", "root": str(root), **settings}},
              "downloads": {"dir": str(tmp_path / "downloads")}, "inference": {"device": "cpu"}}
    return LogitsRequest(dataset, "m", {"source": "train", **spec}, config, {})


def load_folder(dataset, settings):
    return data.load(dataset, {}, {"source": "imagefolder", **settings})


SPEC = {"network": "lenet5", "epochs": 2, "batch_size": 16, "optimiser": "sgd", "learning_rate": 0.05}


def test_trains_on_train_and_caches_the_logits_of_test_in_folder_order(tmp_path, capfd):
    root = split_folder(tmp_path / "shapes")
    source = get_source("train")
    source.check("shapes", "m", SPEC, request(tmp_path, root, SPEC).config)
    assert source.downloads("shapes", "m", SPEC, request(tmp_path, root, SPEC).config) == []
    source.cache_logits(request(tmp_path, root, SPEC), tmp_path / "a.npz")
    first = load_logits(tmp_path / "a.npz")
    assert first.labels.tolist() == [0] * 10 + [1] * 10 + [2] * 10  # class order, then path order
    assert first.metadata["train_size"] == 90 and first.logits.shape == (30, 3)
    assert first.metadata["top1_accuracy"] > 0.9  # the band is learnt in two epochs
    data = first.metadata["data"]
    assert data["classes"] == list(CLASSES) and data["layout"] == "train/ and test/" and len(data["content_sha256"]) == 64
    # the training images' own per-channel mean and sd standardise them
    pixels = np.stack([np.asarray(Image.open(p)) for p in sorted((root / "train").glob("*/*.png"))]) / 255.0
    assert data["standardisation"]["mean"] == pytest.approx(pixels.mean(axis=(0, 1, 2)).tolist())
    # a moved folder with the same images: the cached weights, the same logits
    moved = root.rename(tmp_path / "moved")
    capfd.readouterr()
    source.cache_logits(request(tmp_path, moved, SPEC), tmp_path / "b.npz")
    assert "weights from the cache" in capfd.readouterr().err
    assert load_logits(tmp_path / "b.npz").logits.tobytes() == first.logits.tobytes()
    # a changed image trains again, into another weights file
    rng = np.random.default_rng(9)
    picture(2, rng).save(moved / "train" / "circle" / "000.png")
    source.cache_logits(request(tmp_path, moved, SPEC), tmp_path / "c.npz")
    assert "epoch 2/2" in capfd.readouterr().err
    changed = load_logits(tmp_path / "c.npz").metadata
    assert changed["training"][0]["weights"] != first.metadata["training"][0]["weights"]
    # an ensemble says which network of how many it is training
    source.cache_logits(request(tmp_path, moved, {**SPEC, "epochs": 1, "ensemble": 2}), tmp_path / "e.npz")
    assert "shapes/m (network 2 of 2): epoch 1/1" in capfd.readouterr().err
    # an added image too
    picture(0, rng).save(moved / "train" / "circle" / "999.png")
    assert load_folder("shapes", {"root": str(moved)}).provenance["content_sha256"] != changed["data"]["content_sha256"]


def test_a_root_of_class_folders_is_split_seeded_and_stratified(tmp_path):
    write_folder(tmp_path / "flat", 20)
    settings = {"root": str(tmp_path / "flat"), "evaluation_fraction": 0.25, "seed": 3}
    parts = load_folder("flat", settings)
    assert np.bincount(parts.y_eval).tolist() == [5, 5, 5] and np.bincount(parts.y_train).tolist() == [15, 15, 15]
    again, other = load_folder("flat", settings), load_folder("flat", {**settings, "seed": 4})
    assert again.x_eval.tobytes() == parts.x_eval.tobytes()
    assert other.x_eval.tobytes() != parts.x_eval.tobytes()
    assert parts.provenance["evaluation_fraction"] == 0.25 and parts.provenance["seed"] == 3


def test_a_calibration_pool_moves_training_images_after_the_evaluation_ones(tmp_path):
    root = split_folder(tmp_path / "shapes")
    plain = load_folder("shapes", {"root": str(root)})
    pooled = load_folder("shapes", {"root": str(root), "calibration_pool": 6})
    assert len(pooled.y_train) == 84 and np.bincount(pooled.y_eval[30:]).tolist() == [2, 2, 2]
    assert pooled.y_eval[:30].tolist() == plain.y_eval.tolist() and pooled.provenance["calibration_pool"] == 6
    assert pooled.provenance["standardisation"] != plain.provenance["standardisation"]  # from the 84 images only
    with pytest.raises(DatasetError, match="datasets.shapes.calibration_pool: cannot hold out 89 images"):
        load_folder("shapes", {"root": str(root), "calibration_pool": 89})


def test_grayscale_gives_one_channel_and_resize_makes_sizes_equal(tmp_path):
    write_folder(tmp_path / "gray" / "train", 4, mode="L", size=(28, 28))
    write_folder(tmp_path / "gray" / "test", 2, seed=1, mode="L", size=(40, 36))
    parts = load_folder("gray", {"root": str(tmp_path / "gray"), "resize": 28})
    assert parts.input_shape == (1, 28, 28) and parts.x_eval.shape == (6, 1, 28, 28)
    rectangular = load_folder("gray", {"root": str(tmp_path / "gray"), "resize": [32, 30]})
    assert rectangular.input_shape == (1, 32, 30)


def bad_folder(tmp_path, case):
    root = split_folder(tmp_path / "bad", train=3, test=2)
    if case == "empty class":
        for path in (root / "train" / "square").iterdir():
            path.unlink()
        return root, f"{root / 'train' / 'square'} holds no images"
    if case == "not an image":
        (root / "train" / "circle" / "notes.txt").write_text("not a picture")
        return root, f"{root / 'train' / 'circle' / 'notes.txt'} is not an image"
    if case == "sizes":
        picture(0, np.random.default_rng(0), size=(28, 28)).save(root / "train" / "circle" / "001.png")
        return root, f"{root / 'train' / 'circle' / '001.png'} is 28x28 pixels, .* is 32x32; set datasets.bad.resize"
    if case == "test class":
        write_folder(root / "test", 2, classes=("triangle",))
        return root, f"{root / 'test'} has classes that {root / 'train'} lacks: triangle"
    write_folder(tmp_path / "one", 3, classes=("circle",))
    return tmp_path / "one", f"datasets.bad.root: {tmp_path / 'one'} has only the class 'circle'"


@pytest.mark.parametrize("case", ["empty class", "not an image", "sizes", "test class", "one class"])
def test_bad_folders_stop_with_one_line_naming_the_path(tmp_path, case):
    root, message = bad_folder(tmp_path, case)
    with pytest.raises(DatasetError, match=message) as caught:
        load_folder("bad", {"root": str(root)})
    assert "\n" not in str(caught.value)
    config = {"datasets": {"bad": {"source": "imagefolder", "root": str(root)}}}
    if case in ("empty class", "test class", "one class"):  # the layout: caught before any job starts
        with pytest.raises(DatasetError, match=message):
            get_source("train").check("bad", "m", SPEC, config)
    else:  # the pixels: read in the job
        get_source("train").check("bad", "m", SPEC, config)


def test_any_declared_folder_trains_and_cifar10_takes_a_folder_in_the_config(tmp_path):
    import yaml

    from calibrepro.config import load_schema, validate_config
    from servers import REPO_ROOT

    check_entry("shapes", "m", SPEC, {"datasets": {"shapes": {"source": "imagefolder", "root": "x"}}})
    with pytest.raises(ModelSourceError, match="models.shapes.m: source 'train' trains on .* or on a folder of images"):
        check_entry("shapes", "m", SPEC, {})
    config = yaml.safe_load((REPO_ROOT / "config/blog.yaml").read_text())
    config["datasets"] = {"cifar10": {"source": "imagefolder", "root": str(tmp_path), "resize": 32}}
    config = validate_config(config, load_schema(REPO_ROOT / "workflow/schemas/config.schema.yaml"))
    assert get_source("train").downloads("cifar10", "lenet5", config["models"]["cifar10"]["lenet5"], config) == []


def test_width_and_flip_options():
    one, two = (build("lenet5", (3, 32, 32), 10, {"width": w}) for w in (1, 2))
    assert sum(p.numel() for p in one.parameters()) == 62_006  # LeNet-5 on 32x32x3, 10 classes
    assert two[0].out_channels == 12 and two[3].out_channels == 32 and two[-1].in_features == 168
    batch = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    flipped = trainer.flip(batch, torch.Generator().manual_seed(0))
    assert all(torch.equal(f, b) or torch.equal(f, b.flip(-1)) for f, b in zip(flipped, batch))
    drawn = [trainer.flip(batch, torch.Generator().manual_seed(s)) for s in range(8)]
    assert any(not torch.equal(d, batch) for d in drawn) and any(torch.equal(d[0], batch[0]) for d in drawn)


@pytest.mark.skipif(not (REALDATA / "cifar10-jpg").is_dir(), reason="needs ../shared/realdata/cifar10-jpg")
def test_one_epoch_of_lenet5_on_a_subset_of_the_jpeg_cifar10(tmp_path):
    """200 training and 50 test images per class, unpacked here; one epoch beats chance (10 %) clearly."""
    for part, keep in (("train", 200), ("test", 50)):
        with tarfile.open(REALDATA / "cifar10-jpg" / f"{part}.tar.gz") as archive:
            members = [m for m in archive if m.isfile() and int(m.name.rsplit("/", 1)[1].split(".")[0]) < keep]
            archive.extractall(tmp_path / "jpg", members=members, filter="data")
    parts = load_folder("cifar10", {"root": str(tmp_path / "jpg")})
    assert parts.input_shape == (3, 32, 32) and len(parts.y_train) == 2000 and len(parts.y_eval) == 500
    assert parts.provenance["classes"][:3] == ["airplane", "automobile", "bird"]  # the official label order
    options = trainer.training_options({"network": "lenet5", "epochs": 1, "batch_size": 32, "optimiser": "adam"})
    network, history = trainer.train(parts, options, CPU, desc="jpeg subset")
    accuracy = float(np.mean(softmax(trainer.forward(network, parts.x_eval, CPU)).argmax(1) == parts.y_eval))
    assert history[0]["train_accuracy"] > 0.1 and accuracy > 0.18


def test_pretrained_networks_on_a_split_root_are_evaluated_on_its_test_folder(tmp_path):
    from calibrepro.evaluation_sets import folder_samples

    root = split_folder(tmp_path / "shapes", train=4, test=2)
    paths, labels, names = folder_samples("shapes", {"root": str(root)})
    assert names == list(CLASSES) and labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert all("/test/" in path for path in paths)
