"""Source chenyaofo: pins, and (with the original code served on 127.0.0.1) every architecture.

The architectures are the repository's own code at the pinned commit, which cannot be downloaded
here: the build tests fetch the pinned files through the real download code from a local HTTP
server that serves ``$CALIBREPRO_ORIGINAL_CODE_DIR/chenyaofo/pytorch-cifar-models`` (a checkout of
that commit), verifying each file's pinned sha256, and skip when the variable is unset.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
import torch

from calibrepro import datasets
from calibrepro.download import fetch
from calibrepro.io import load_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from calibrepro.zoo import chenyaofo
from servers import cifar_tarball_bytes, random_cifar, serve_original_code

THESIS_CIFAR100 = [
    "mobilenetv2_x0_5", "mobilenetv2_x1_0", "mobilenetv2_x1_4", "resnet20", "resnet32", "resnet44", "resnet56",
    "shufflenetv2_x0_5", "shufflenetv2_x1_0", "shufflenetv2_x1_5", "shufflenetv2_x2_0",
    "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
]
SETTINGS = {"datasets": {}, "downloads": {"dir": "unused", "mirrors": {}},
            "inference": {"device": "cpu", "batch_size": 4, "workers": 0, "amp": False}}


def test_pins_are_data_and_cover_the_thesis_models():
    source = get_source("chenyaofo")
    assert set(THESIS_CIFAR100) <= set(source.models("cifar100"))
    assert len(source.models("cifar10")) == len(source.models("cifar100")) == 19
    for (dataset, name), pin in chenyaofo.PINS.items():
        assert pin.architecture == f"{dataset}_{name}"
        assert re.fullmatch(
            rf"https://github\.com/chenyaofo/pytorch-cifar-models/releases/download/\w+/{dataset}_{name}-[0-9a-f]{{8}}\.pt",
            pin.weights.url,
        )
        assert pin.weights.checksum == "sha256-prefix:" + pin.weights.url.rsplit("-", 1)[1][:8]
        assert pin.num_classes == {"cifar10": 10, "cifar100": 100}[dataset]
        assert all(item.url.startswith(f"https://raw.githubusercontent.com/{chenyaofo.REPO}/{chenyaofo.COMMIT}/")
                   and re.fullmatch(r"sha256:[0-9a-f]{64}", item.checksum) for item in pin.code)
    assert chenyaofo.NORMALIZATION["cifar100"] == {"mean": [0.507, 0.4865, 0.4409], "std": [0.2673, 0.2564, 0.2761]}
    assert chenyaofo.NORMALIZATION["cifar10"] == {"mean": [0.4914, 0.4822, 0.4465], "std": [0.2023, 0.1994, 0.201]}


def test_downloads_and_checks():
    source = get_source("chenyaofo")
    items = source.downloads("cifar100", "resnet20", {"source": "chenyaofo"}, SETTINGS)
    paths = [item.path for item in items]
    assert "weights/chenyaofo/cifar100_resnet20-23dac2f1.pt" in paths
    assert "datasets/cifar-100-python.tar.gz" in paths
    assert len([p for p in paths if p.startswith("code/")]) == len(chenyaofo.CODE_FILES)
    source.check("cifar100", "resnet20", {"source": "chenyaofo"}, SETTINGS)
    source.check("cifar100", "r20", {"source": "chenyaofo", "name": "resnet20"}, SETTINGS)
    with pytest.raises(ModelSourceError, match="no cifar100 model named 'resnet18'; known: mobilenetv2_x0_5"):
        source.check("cifar100", "resnet18", {"source": "chenyaofo"}, SETTINGS)
    with pytest.raises(ModelSourceError, match="no models for data set 'imagenet'; it provides models for cifar10, cifar100"):
        source.check("imagenet", "resnet20", {"source": "chenyaofo"}, SETTINGS)
    resources = source.resources("cifar100", "resnet20", {"source": "chenyaofo"}, SETTINGS)
    assert resources["gpu"] == 0 and resources["runtime"] >= 10
    on_gpu = {**SETTINGS, "inference": {"device": "auto", "workers": 2}}
    assert source.resources("cifar100", "resnet20", {"source": "chenyaofo"}, on_gpu)["gpu"] == 1


@pytest.fixture
def original_files(file_server, tmp_path):
    """Fetch the pinned code files through the real download code from 127.0.0.1 (checksums verified)."""
    mirrors = serve_original_code(file_server, chenyaofo.REPO, chenyaofo.COMMIT)
    downloads = tmp_path / "downloads"
    files = {}
    for item in chenyaofo.CODE:
        files[item.path] = str(fetch(item, downloads / item.path, mirrors=mirrors, backoff=0, progress=False))
    assert file_server.requests  # really served over HTTP
    return downloads, files


def test_every_architecture_builds_and_maps_a_cifar_batch_to_k_logits(original_files):
    _, files = original_files
    source = get_source("chenyaofo")
    x = torch.randn(2, 3, 32, 32)
    for (dataset, name), pin in sorted(chenyaofo.PINS.items()):
        model = source.build(pin, files, pretrained=False)
        with torch.inference_mode():
            logits = model(x)
        assert logits.shape == (2, pin.num_classes), (dataset, name)
        assert not model.training


def test_cache_logits_end_to_end_with_stand_in_weights(original_files):
    """Request -> hub code -> strict state_dict load -> inference -> archive, on 6 crafted CIFAR-100 images.

    The real weights cannot be downloaded here; a state_dict of the same architecture stands in for
    them at the download path (the file is not fetched, so its pinned checksum is not involved).
    """
    downloads, files = original_files
    source = get_source("chenyaofo")
    pin = chenyaofo.PINS[("cifar100", "resnet20")]
    stand_in = source.build(pin, files, pretrained=False)
    torch.manual_seed(0)
    for parameter in stand_in.parameters():
        parameter.data.normal_(0, 0.1)
    weights = downloads / pin.weights.path
    weights.parent.mkdir(parents=True)
    torch.save(stand_in.state_dict(), weights)
    images, labels = random_cifar(6, 100, seed=2)
    tarball = downloads / datasets.cifar_download("cifar100").path
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(cifar_tarball_bytes("cifar100", images, labels))
    files = {**files, pin.weights.path: str(weights), datasets.cifar_download("cifar100").path: str(tarball)}
    request = LogitsRequest("cifar100", "resnet20", {"source": "chenyaofo"}, SETTINGS, files)
    output = downloads.parent / "logits" / "cifar100" / "resnet20.npz"
    source.cache_logits(LogitsRequest.from_json(json.loads(json.dumps(request.to_json()))), output)
    archive = load_logits(output)
    assert archive.logits.shape == (6, 100) and np.array_equal(archive.labels, labels)
    mean = torch.tensor(chenyaofo.NORMALIZATION["cifar100"]["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(chenyaofo.NORMALIZATION["cifar100"]["std"]).view(1, 3, 1, 1)
    x = (torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255 - mean) / std
    with torch.inference_mode():
        expected = stand_in.eval()(x).numpy()
    np.testing.assert_allclose(archive.logits, expected, rtol=1e-5, atol=1e-5)
    meta = archive.metadata
    assert meta["source"] == "chenyaofo" and meta["architecture"] == "cifar100_resnet20"
    assert meta["weights"]["pin"] == "sha256-prefix:23dac2f1" and len(meta["weights"]["sha256"]) == 64
    assert meta["environment"]["torch"] == torch.__version__ and meta["environment"]["device"] == "cpu"
    buffer = io.BytesIO()
    torch.save({"not": "a state dict of this model"}, buffer)
    weights.write_bytes(buffer.getvalue())
    with pytest.raises(RuntimeError):
        source.cache_logits(request, output)
