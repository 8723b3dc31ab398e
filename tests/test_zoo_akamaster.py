"""Source akamaster: the architecture written from He et al. 2016, and the real weights when present.

The last test needs ``../shared/realdata`` (the four real weight files and the first 1,017 CIFAR-10
test images) and skips without it: it serves the weight files on 127.0.0.1 as a mirror of their
pinned raw.githubusercontent.com URLs, so the real download code fetches and verifies them (full
sha256), then runs the logits command on the real images and checks the accuracies.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
import torch

from calibrepro import cli, datasets
from calibrepro.download import fetch
from calibrepro.io import load_logits
from calibrepro.zoo import LogitsRequest, get_source
from calibrepro.zoo import akamaster
from servers import REALDATA, cifar_tarball_bytes, random_cifar, realdata_checksums

SETTINGS = {"datasets": {}, "downloads": {"dir": "unused", "mirrors": {}},
            "inference": {"device": "cpu", "batch_size": 256, "workers": 0, "amp": False}}
#: parameters of the CIFAR ResNets, He et al. 2016 table 6
PAPER_PARAMS_M = {"resnet20": 0.27, "resnet32": 0.46, "resnet44": 0.66, "resnet56": 0.85, "resnet110": 1.7, "resnet1202": 19.4}


@pytest.mark.parametrize("name", sorted(akamaster.MODELS))
def test_architecture_matches_the_paper(name):
    model = get_source("akamaster").build(akamaster.PINS[("cifar10", name)], pretrained=False)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    assert params == pytest.approx(PAPER_PARAMS_M[name], rel=0.05)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) + 1 == int(name.removeprefix("resnet"))  # depth = convolutions + the classifier
    assert all(m.kernel_size == (3, 3) for m in convs)  # option A: no 1x1 projection shortcuts
    if name != "resnet1202":
        with torch.inference_mode():
            assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_option_a_shortcut_subsamples_and_pads_with_zeros():
    shortcut = akamaster._ShortcutA(16)
    x = torch.arange(2 * 16 * 4 * 4, dtype=torch.float32).view(2, 16, 4, 4)
    y = shortcut(x)
    assert y.shape == (2, 32, 2, 2)
    assert torch.equal(y[:, 8:24], x[:, :, ::2, ::2])
    assert not y[:, :8].any() and not y[:, 24:].any()


def test_pins():
    for name, (_, filename, checksum, _) in akamaster.MODELS.items():
        pin = akamaster.PINS[("cifar10", name)]
        assert pin.weights.url == (
            f"https://raw.githubusercontent.com/akamaster/pytorch_resnet_cifar10/{akamaster.COMMIT}/pretrained_models/{filename}"
        )
        assert checksum.split(":")[1].startswith(filename.rsplit("-", 1)[1][:8])
        assert pin.preprocessing["mean"] == [0.485, 0.456, 0.406] and pin.preprocessing["std"] == [0.229, 0.224, 0.225]
    if (REALDATA / "SHA256SUMS").is_file():
        sums = realdata_checksums()
        for name in ("resnet20", "resnet32", "resnet44", "resnet56"):
            pin = akamaster.PINS[("cifar10", name)]
            assert pin.weights.checksum == "sha256:" + sums[f"akamaster/{pin.weights.path.rsplit('/', 1)[1]}"]


def _checkpoint(model) -> bytes:
    """A checkpoint in the repository's format: DataParallel keys, best_prec1 beside the state_dict."""
    state_dict = {f"module.{key}": value for key, value in model.state_dict().items() if "num_batches" not in key}
    buffer = io.BytesIO()
    torch.save({"best_prec1": 91.5, "state_dict": state_dict}, buffer)  # as the real files: a float
    return buffer.getvalue()


def test_cache_logits_with_a_checkpoint_in_the_original_format(tmp_path):
    source = get_source("akamaster")
    pin = akamaster.PINS[("cifar10", "resnet20")]
    torch.manual_seed(0)
    stand_in = source.build(pin, pretrained=False)
    for module in stand_in.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
    weights = tmp_path / pin.weights.path
    weights.parent.mkdir(parents=True)
    weights.write_bytes(_checkpoint(stand_in))
    images, labels = random_cifar(9, 10, seed=5)
    tarball = tmp_path / datasets.cifar_download("cifar10").path
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(cifar_tarball_bytes("cifar10", images, labels))
    files = {pin.weights.path: str(weights), datasets.cifar_download("cifar10").path: str(tarball)}
    output = tmp_path / "resnet20.npz"
    source.cache_logits(LogitsRequest("cifar10", "resnet20", {"source": "akamaster"}, SETTINGS, files), output)
    mean = torch.tensor(akamaster.MEAN).view(1, 3, 1, 1)
    std = torch.tensor(akamaster.STD).view(1, 3, 1, 1)
    with torch.inference_mode():
        expected = stand_in.eval()((torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255 - mean) / std)
    archive = load_logits(output)
    np.testing.assert_allclose(archive.logits, expected.numpy(), rtol=1e-5, atol=1e-5)
    assert archive.metadata["weights"]["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()


@pytest.mark.skipif(not (REALDATA / "akamaster").is_dir(), reason="needs ../shared/realdata (real akamaster weights)")
def test_real_weights_downloaded_from_127_0_0_1_reach_the_published_accuracy(file_server, tmp_path, capsys):
    """Real weights, real images: fetch (mirror on 127.0.0.1, full sha256) -> logits command -> accuracy.

    The first 1,017 CIFAR-10 test images are written as a CIFAR-format tarball at the tarball's
    download path (the official archive's checksum cannot match a partial copy, and the tarball is
    read from that path exactly as after a download); the weights go through the real download code.
    """
    images = np.load(REALDATA / "cifar10_test" / "images_first1017.npy")
    labels = np.load(REALDATA / "cifar10_test" / "labels.npy")[: len(images)]
    downloads = tmp_path / "downloads"
    tarball = downloads / datasets.cifar_download("cifar10").path
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(cifar_tarball_bytes("cifar10", images, labels))
    origin = f"https://raw.githubusercontent.com/{akamaster.REPO}/{akamaster.COMMIT}/pretrained_models"
    mirrors = {origin: file_server.mount("/akamaster", REALDATA / "akamaster")}
    source = get_source("akamaster")
    accuracies = {}
    for name in ("resnet20", "resnet32", "resnet44", "resnet56"):
        published = akamaster.PINS[("cifar10", name)].published_top1
        spec = {"source": "akamaster"}
        config = {**SETTINGS, "downloads": {"dir": str(downloads), "mirrors": mirrors}}
        source.check("cifar10", name, spec, config)
        files = {}
        for item in source.downloads("cifar10", name, spec, config):
            destination = downloads / item.path
            if not destination.exists():
                fetch(item, destination, mirrors=mirrors, backoff=0, progress=False)
            files[item.path] = str(destination)
        request = LogitsRequest("cifar10", name, spec, config, files)
        output = tmp_path / "logits" / "cifar10" / f"{name}.npz"
        assert cli.main(["logits", "--request", json.dumps(request.to_json()), "--output", str(output)]) == 0
        archive = load_logits(output)
        assert archive.logits.shape == (1017, 10) and np.array_equal(archive.labels, labels)
        accuracy = 100 * float(np.mean(archive.logits.argmax(axis=1) == labels))
        accuracies[name] = accuracy
        # 1,017 images: one standard error of the accuracy is about 0.85 points
        assert abs(accuracy - published) < 2.5, (name, accuracy, published)
        pinned = akamaster.PINS[("cifar10", name)].weights.checksum.removeprefix("sha256:")
        assert archive.metadata["weights"]["sha256"] == pinned
    assert file_server.count("/akamaster/resnet20-12fca82f.th") == 1
    with capsys.disabled():
        print("\nakamaster top-1 on the first 1,017 CIFAR-10 test images: "
              + ", ".join(f"{name} {acc:.2f} %" for name, acc in accuracies.items()))
