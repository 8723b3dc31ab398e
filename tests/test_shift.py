"""Calibrated on one data set, tested on another (``datasets.<key>.calibrate_on``).

The configuration checks; pinned networks on a shifted set (a thesis timm pin on a folder, a CIFAR-10
pin on CIFAR-10.1 and CIFAR-10.1's pinned download through a mirror). The whole Snakemake run of
named networks on two folders is tests/test_networks_workflow.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from calibrepro.config import ConfigError, load_schema, shift_sets, validate_config
from calibrepro.io import load_logits
from servers import REPO_ROOT
from test_zoo_network import write_folder

CLASSES = ["n01440764", "n01443537", "n01484850"]  # ImageNet WordNet ids: the timm tag reads them by name


def test_shift_config_is_checked():
    schema = load_schema(REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml")
    base = {"models": {"shapes": {"m": {"source": "checkpoint", "architecture": "resnet18", "path": "w.pth"}}},
            "datasets": {"shapes": {"source": "imagefolder", "root": "a"},
                         "night": {"source": "imagefolder", "root": "b", "calibrate_on": "shapes"}}}
    assert validate_config(base, schema)["datasets"]["night"]["calibrate_on"] == "shapes"
    with pytest.raises(ConfigError, match="datasets.night.calibrate_on: 'shape' has no models"):
        validate_config({**base, "datasets": {**base["datasets"], "night": {**base["datasets"]["night"], "calibrate_on": "shape"}}}, schema)
    pinned = {"models": {"cifar10": {"r20": {"source": "akamaster", "name": "resnet20"}}},
              "datasets": {"cifar10_1": {"calibrate_on": "cifar10"}}}  # the thesis's pinned CIFAR sources shift too
    assert shift_sets(validate_config(pinned, schema)) == {"cifar10_1": "cifar10"}
    logits_models = {"shapes": {"m": {"source": "logits", "path": "m.npz"}}}
    with pytest.raises(ConfigError, match=r"models.shapes.m \(source logits\) cannot run on another data set"):
        validate_config({**base, "models": logits_models}, schema)


# ------------------------------------------------------------------ pinned networks on a shifted set


def _settings(tmp_path, datasets, mirrors=None):
    return {
        "datasets": datasets,
        "downloads": {"dir": str(tmp_path / "downloads"), "mirrors": mirrors or {}, "timeout": 10, "retries": 0},
        "inference": {"device": "cpu", "batch_size": 4, "workers": 0, "amp": False, "preprocessing": "batched"},
    }


def test_a_pinned_timm_model_on_a_shifted_folder_runs_its_pinned_file(tmp_path):
    """The thesis's timm pin, not the hub's tag for the name, runs on the shifted set (the 2021 file, its preprocessing)."""
    from PIL import Image

    from calibrepro.zoo import LogitsRequest, get_source
    from calibrepro.zoo import timm_models

    source = get_source("timm")
    pin = timm_models.PINS[("imagenet", "mobilenetv2_120d")]
    folder = write_folder(tmp_path / "v2", dict(zip(CLASSES, [2, 1, 2])), seed=3, size=30)
    config = _settings(tmp_path, {"imagenet": {"root": None, "labels_file": None},
                                  "v2": {"source": "imagefolder", "root": str(folder), "calibrate_on": "imagenet"}})
    spec = {"source": "timm"}
    assert [item.url for item in source.downloads("v2", "mobilenetv2_120d", spec, config)] == [pin.weights.url]
    source.check("v2", "mobilenetv2_120d", spec, config)  # the folder, not the ImageNet root, is checked
    files = source.logits_inputs("v2", "mobilenetv2_120d", spec, config)
    torch.manual_seed(0)
    stand_in = source.build(pin, pretrained=False)
    weights = tmp_path / "downloads" / pin.weights.path
    weights.parent.mkdir(parents=True)
    torch.save(stand_in.state_dict(), weights)
    source.cache_logits(LogitsRequest("v2", "mobilenetv2_120d", spec, config, files), tmp_path / "v2.npz")

    archive = load_logits(tmp_path / "v2.npz")
    meta = archive.metadata
    assert (meta["architecture"], meta["weights"]["url"]) == ("mobilenetv2_120d.ra_in1k", pin.weights.url)
    assert meta["preprocessing"] == pin.preprocessing and meta["calibrated_on"] == "imagenet"
    assert meta["classes"] == CLASSES and meta["output_columns"] == [0, 1, 2]  # the WordNet ids' outputs
    paths = sorted(str(p) for p in folder.rglob("*.*"))
    batch = torch.stack([source.imagenet_transform(pin)(Image.open(p).convert("RGB")) for p in paths])
    with torch.inference_mode():
        expected = stand_in.eval()(batch).numpy()[:, :3]
    np.testing.assert_allclose(archive.logits, expected, rtol=1e-4, atol=1e-4)


def npy_bytes(array) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def test_cifar10_1_through_a_mirror_pinned_and_read_without_pickle(tmp_path, file_server):
    """The v6 arrays come through downloads.mirrors; a file other than the pinned one is refused; np.load without pickle."""
    from dataclasses import replace

    from calibrepro import evaluation_sets
    from calibrepro.datasets import DatasetError
    from calibrepro.download import ChecksumError, fetch, git_blob_sha1
    from servers import sha256_hex

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(30, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=30).astype(np.int32)  # the published labels file is int32
    file_server.add_file("/c101/cifar10.1_v6_data.npy", npy_bytes(images))
    file_server.add_file("/c101/cifar10.1_v6_labels.npy", npy_bytes(labels))
    mirrors = {evaluation_sets.CIFAR10_1_URL: file_server.url("/c101")}
    config = _settings(tmp_path, {"cifar10_1": {"calibrate_on": "cifar10"}}, mirrors)
    assert evaluation_sets.downloads("cifar10_1", config) == list(evaluation_sets.CIFAR10_1.values())
    data, label_file = evaluation_sets.CIFAR10_1["data"], evaluation_sets.CIFAR10_1["labels"]
    with pytest.raises(ChecksumError, match="expected git-blob-sha1:24349cc5"):  # generated bytes, not the published file
        fetch(data, tmp_path / "refused.npy", mirrors=mirrors, retries=0, progress=False)
    assert not (tmp_path / "refused.npy").exists()

    files = {}
    for item, payload in ((data, npy_bytes(images)), (label_file, npy_bytes(labels))):
        target = tmp_path / "downloads" / item.path
        files[item.path] = str(target)
        (tmp_path / "probe").write_bytes(payload)
        pin = f"git-blob-sha1:{git_blob_sha1(tmp_path / 'probe')}" if item is data else f"sha256:{sha256_hex(payload)}"
        fetch(replace(item, checksum=pin), target, mirrors=mirrors, retries=0, progress=False)
    loaded = evaluation_sets.load("cifar10_1", config, files)
    assert np.array_equal(loaded.images, images) and loaded.labels.dtype == np.int64
    assert np.array_equal(loaded.labels, labels) and loaded.class_names == [str(i) for i in range(10)]

    np.save(files[data.path], np.array([{"a": 1}], dtype=object), allow_pickle=True)  # a pickled array is refused
    with pytest.raises(DatasetError, match="cifar10.1_v6_data.npy is not a readable .npy array"):
        evaluation_sets.load("cifar10_1", config, files)


def test_a_pinned_cifar10_model_on_cifar10_1(tmp_path):
    """akamaster's pinned ResNet-20 (stand-in weights at its download path) on CIFAR-10.1: the pinned network's
    logits on every CIFAR-10.1 image, by the batched preprocessing of the pin's mean/std; no CIFAR-10 tarball needed."""
    from calibrepro import evaluation_sets
    from calibrepro.inference import predict_array
    from calibrepro.zoo import LogitsRequest, get_source
    from calibrepro.zoo.akamaster import PINS

    source, pin = get_source("akamaster"), PINS[("cifar10", "resnet20")]
    config = _settings(tmp_path, {"cifar10_1": {"calibrate_on": "cifar10"}})
    spec = {"source": "akamaster"}
    downloads = source.downloads("cifar10_1", "resnet20", spec, config)
    assert downloads == [pin.weights, *evaluation_sets.CIFAR10_1.values()]
    files = source.logits_inputs("cifar10_1", "resnet20", spec, config)
    torch.manual_seed(0)
    stand_in = source.build(pin, pretrained=False)
    for item in downloads:
        Path(files[item.path]).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": stand_in.state_dict()}, files[pin.weights.path])
    rng = np.random.default_rng(1)
    images, labels = rng.integers(0, 256, size=(12, 32, 32, 3), dtype=np.uint8), np.arange(12) % 10
    np.save(files[evaluation_sets.CIFAR10_1["data"].path], images)
    np.save(files[evaluation_sets.CIFAR10_1["labels"].path], labels.astype(np.int32))
    source.cache_logits(LogitsRequest("cifar10_1", "resnet20", spec, config, files), tmp_path / "c.npz")

    archive = load_logits(tmp_path / "c.npz")
    expected = predict_array(stand_in, images, pin.preprocessing["mean"], pin.preprocessing["std"], batch_size=4,
                             progress=False)  # the run's batches: another batch size may take another kernel
    assert np.array_equal(archive.logits, expected) and np.array_equal(archive.labels, labels)
    assert archive.metadata["output_columns"] == list(range(10)) and archive.metadata["calibrated_on"] == "cifar10"
    assert archive.metadata["evaluation_set"]["kind"] == "cifar10_1"
