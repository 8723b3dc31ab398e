"""Source huyvnphan: pins, and (with the original code served on 127.0.0.1) every architecture.

The model definitions are the repository's own files at tag v3.0.1, fetched through the real
download code from a local HTTP server serving ``$CALIBREPRO_ORIGINAL_CODE_DIR/huyvnphan/PyTorch_CIFAR10``
(each file's pinned sha256 verified); the tests needing them skip when the variable is unset.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
import torch

from calibrepro import datasets
from calibrepro.download import fetch, parse_checksum
from calibrepro.io import load_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from calibrepro.zoo import huyvnphan
from servers import cifar_tarball_bytes, random_cifar, serve_original_code, sha256_hex

THESIS_CIFAR10 = [
    "densenet121", "densenet161", "densenet169", "googlenet", "inception_v3", "mobilenet_v2",
    "resnet18", "resnet34", "resnet50", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
]
SETTINGS = {"datasets": {}, "downloads": {"dir": "unused", "mirrors": {}},
            "inference": {"device": "cpu", "batch_size": 3, "workers": 0, "amp": False}}


def test_pins():
    source = get_source("huyvnphan")
    assert source.models("cifar10") == sorted(THESIS_CIFAR10)
    assert huyvnphan.MEAN == [0.4914, 0.4822, 0.4465] and huyvnphan.STD == [0.2471, 0.2435, 0.2616]
    assert huyvnphan.WEIGHTS.url.startswith("https://drive.google.com/uc?id=17fmN8eQdLpq2jIMQ_X0IXDPXfI9oVWgq")
    assert parse_checksum(huyvnphan.WEIGHTS.checksum)[0] == "unpinned"
    for (dataset, name), pin in huyvnphan.PINS.items():
        assert dataset == "cifar10" and pin.member == f"state_dicts/{name}.pt" and pin.num_classes == 10
        (code,) = pin.code
        assert code.url.startswith(f"https://raw.githubusercontent.com/{huyvnphan.REPO}/{huyvnphan.COMMIT}/cifar10_models/")
    items = source.downloads("cifar10", "googlenet", {"source": "huyvnphan"}, SETTINGS)
    assert [i.path for i in items] == [
        "weights/huyvnphan/state_dicts.zip",
        f"{huyvnphan.CODE_PREFIX}/cifar10_models/googlenet.py",
        "datasets/cifar-10-python.tar.gz",
    ]
    with pytest.raises(ModelSourceError, match="no cifar10 model named 'resnet20'"):
        source.check("cifar10", "resnet20", {"source": "huyvnphan"}, SETTINGS)
    with pytest.raises(ModelSourceError, match="no models for data set 'cifar100'"):
        source.check("cifar100", "resnet18", {"source": "huyvnphan"}, SETTINGS)


@pytest.fixture
def original_files(file_server, tmp_path):
    mirrors = serve_original_code(file_server, huyvnphan.REPO, huyvnphan.COMMIT)
    downloads = tmp_path / "downloads"
    files = {}
    for item in huyvnphan.CODE.values():
        files[item.path] = str(fetch(item, downloads / item.path, mirrors=mirrors, backoff=0, progress=False))
    return downloads, files


def test_every_architecture_builds_and_maps_a_cifar_batch_to_10_logits(original_files):
    _, files = original_files
    source = get_source("huyvnphan")
    x = torch.randn(2, 3, 32, 32)
    for name in THESIS_CIFAR10:
        model = source.build(huyvnphan.PINS[("cifar10", name)], files, pretrained=False)
        with torch.inference_mode():
            logits = model(x)
        assert isinstance(logits, torch.Tensor) and logits.shape == (2, 10), name


def _state_dicts_zip(models: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, model in models.items():
            blob = io.BytesIO()
            torch.save(model.state_dict(), blob)
            archive.writestr(f"state_dicts/{name}.pt", blob.getvalue())
        archive.writestr("__MACOSX/state_dicts/._googlenet.pt", b"resource fork")
    return buffer.getvalue()


def test_cache_logits_reads_the_member_of_the_archive(original_files):
    """Request -> v3.0.1 code -> member of state_dicts.zip -> strict load -> inference -> archive.

    A zip of stand-in state_dicts with the official member names replaces the real 933 MB archive
    (placed at its download path, so no download and no checksum are involved).
    """
    downloads, files = original_files
    source = get_source("huyvnphan")
    pin = huyvnphan.PINS[("cifar10", "googlenet")]
    torch.manual_seed(0)
    stand_in = source.build(pin, files, pretrained=False)
    archive_path = downloads / huyvnphan.WEIGHTS.path
    archive_path.parent.mkdir(parents=True)
    archive_path.write_bytes(_state_dicts_zip({"googlenet": stand_in}))
    images, labels = random_cifar(5, 10, seed=4)
    tarball = downloads / datasets.cifar_download("cifar10").path
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(cifar_tarball_bytes("cifar10", images, labels))
    files = {**files, huyvnphan.WEIGHTS.path: str(archive_path), datasets.cifar_download("cifar10").path: str(tarball)}
    output = downloads.parent / "googlenet.npz"
    source.cache_logits(LogitsRequest("cifar10", "googlenet", {"source": "huyvnphan"}, SETTINGS, files), output)
    archive = load_logits(output)
    mean = torch.tensor(huyvnphan.MEAN).view(1, 3, 1, 1)
    std = torch.tensor(huyvnphan.STD).view(1, 3, 1, 1)
    with torch.inference_mode():
        expected = stand_in.eval()((torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255 - mean) / std)
    np.testing.assert_allclose(archive.logits, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert np.array_equal(archive.labels, labels)
    weights = archive.metadata["weights"]
    assert weights["member"] == "state_dicts/googlenet.pt" and weights["sha256"] == sha256_hex(archive_path.read_bytes())
    assert len(weights["member_sha256"]) == 64

    # the content check that replaces a checksum: a wrong archive fails with a clear message
    with pytest.raises(ModelSourceError, match="no member 'state_dicts/googlenet.pt'"):
        archive_path.write_bytes(_state_dicts_zip({"resnet18": torch.nn.Linear(1, 1)}))
        source.build(pin, files)
    with pytest.raises(ModelSourceError, match="does not load into cifar10_models/googlenet.py:googlenet"):
        archive_path.write_bytes(_state_dicts_zip({"googlenet": torch.nn.Linear(1, 1)}))
        source.build(pin, files)
    with pytest.raises(ModelSourceError, match="not a zip archive"):
        archive_path.write_bytes(b"<html>Google Drive quota exceeded</html>")
        source.build(pin, files)
