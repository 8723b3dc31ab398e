"""The shared inference engine of the pretrained sources."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch

from calibrepro import determinism
from calibrepro.download import fetch
from calibrepro.checkpoints import CheckpointError, UnsafeCheckpointError, load_weights, strip_prefix
from calibrepro.inference import environment, inference_settings, predict, predict_array, select_device
from calibrepro.zoo import Download, akamaster, get_source
from servers import REALDATA


class _Items(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.x = torch.arange(n, dtype=torch.float32).view(n, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], i


class _TwoOutputs(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x, -x], dim=1), None


@pytest.mark.parametrize("workers", [0, 2])
def test_predict_keeps_dataset_order_and_returns_float32(workers):
    logits = predict(_TwoOutputs(), _Items(23), batch_size=5, workers=workers, progress=False)
    assert logits.dtype == np.float32 and logits.shape == (23, 2)
    assert np.array_equal(logits[:, 0], np.arange(23, dtype=np.float32))


def test_amp_is_ignored_on_the_cpu():
    model = torch.nn.Linear(1, 3)
    a = predict(model, _Items(8), batch_size=3, amp=True, progress=False)
    b = predict(model, _Items(8), batch_size=8, amp=False, progress=False)
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_device_selection():
    assert select_device("cpu") == torch.device("cpu")
    assert select_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            select_device("cuda:0")
    with pytest.raises(RuntimeError):
        select_device("mps")


def test_settings_and_environment():
    assert inference_settings({}) == {"device": "auto", "batch_size": 256, "workers": 2, "amp": False,
                                     "preprocessing": "batched", "threads": 2}
    assert inference_settings({"inference": {"batch_size": 8}})["batch_size"] == 8
    info = environment(torch.device("cpu"))
    assert info["torch"] == torch.__version__ and {"torchvision", "timm", "numpy", "device_name"} <= set(info)
    # the kernels the logits were computed on (calibrepro.determinism)
    assert info["kernels"]["pinned"] == dict(sorted(determinism.pin_kernels().items()))


def test_cpu_logits_run_on_the_configured_thread_count():
    """inference.threads, not the machine's cores, sets torch's threads of a forward pass (the logits depend on it)."""
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(torch.get_num_threads())
            return x.flatten(1)[:, :3]

    images = np.zeros((4, 2, 2, 3), dtype=np.uint8)
    before = torch.get_num_threads()
    predict_array(Probe(), images, [0.0] * 3, [1.0] * 3, threads=3, progress=False)
    assert seen == [3] and torch.get_num_threads() == before


def test_load_weights_reads_plain_and_akamaster_style_checkpoints(tmp_path):
    state = {"module.w": torch.ones(2)}
    path = tmp_path / "plain.pth"
    torch.save(state, path)
    assert torch.equal(load_weights(path)["module.w"], torch.ones(2))
    buffer = io.BytesIO()
    torch.save({"best_prec1": 91.7, "state_dict": state}, buffer)  # akamaster's format: a float beside the weights
    loaded = load_weights(buffer.getvalue(), name="resnet20.th")
    assert loaded["best_prec1"] == pytest.approx(91.7)
    assert list(strip_prefix(loaded["state_dict"])) == ["w"]


@pytest.mark.skipif(not (REALDATA / "akamaster").is_dir(), reason="needs ../shared/realdata (real akamaster weights)")
def test_the_real_akamaster_checkpoints_load_weights_only():
    for path in sorted((REALDATA / "akamaster").glob("*.th")):
        checkpoint = load_weights(path)
        assert isinstance(checkpoint["best_prec1"], float) and len(checkpoint["state_dict"]) > 50


class _RunsAShellCommand:
    """Unpickling this object runs ``touch <marker>``: the attack a crafted checkpoint can carry."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_checkpoint_fetched_over_http_is_refused_and_never_run(file_server, tmp_path):
    marker = tmp_path / "pwned"
    buffer = io.BytesIO()
    torch.save({"state_dict": {}, "best_prec1": _RunsAShellCommand(marker)}, buffer)
    payload = buffer.getvalue()
    # a weak pin (as for unpinned archives or hash prefixes) lets the substituted file through the download
    pin = akamaster.PINS[("cifar10", "resnet20")]
    origin = pin.weights.url.rsplit("/", 1)[0]
    file_server.add_file(f"/evil/{pin.weights.url.rsplit('/', 1)[1]}", payload)
    weak = Download(pin.weights.url, "unpinned:test of a substituted file", pin.weights.path)
    weights = fetch(weak, tmp_path / "downloads" / pin.weights.path, mirrors={origin: file_server.url("/evil")},
                    backoff=0, progress=False)
    with pytest.raises(UnsafeCheckpointError) as error:
        get_source("akamaster").build(pin, files={pin.weights.path: str(weights)})
    message = str(error.value)
    assert str(weights) in message and "refusing to unpickle" in message and "posix.system" in message
    assert not marker.exists()
    with pytest.raises(UnsafeCheckpointError, match="member.pt: refusing to unpickle"):
        load_weights(payload, name="member.pt")
    assert not marker.exists()


def test_a_file_that_is_no_checkpoint_is_named(tmp_path):
    path = tmp_path / "weights.pth"
    path.write_text("<html>quota exceeded</html>")
    with pytest.raises(CheckpointError, match=f"{path}: not a readable PyTorch checkpoint"):
        load_weights(path)


ON_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", ON_DEVICES)
def test_predict_array_gives_the_reference_path_inputs_and_logits(device):
    """Batched on-device preprocessing equals ToTensor + Normalize image by image, bit for bit (CPU, and a GPU
    where one is present: the reference path's ToTensor runs on the CPU, the batched one on the GPU)."""
    from calibrepro.datasets import ArrayImages
    from calibrepro.inference import predict_array
    from calibrepro.zoo._pretrained import cifar_transform

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(37, 8, 8, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=37)
    mean, std = [0.4914, 0.4822, 0.4465], [0.247, 0.243, 0.261]
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 36, 10))
    dataset = ArrayImages(images, labels, cifar_transform(mean, std))
    reference = predict(model, dataset, batch_size=10, progress=False, device=device)
    batched = predict_array(model, images, mean, std, batch_size=10, progress=False, device=device)
    assert batched.dtype == np.float32 and np.array_equal(batched, reference)
    identity = torch.nn.Flatten()  # the inputs themselves
    inputs = predict_array(identity, images, mean, std, batch_size=7, progress=False, device=device)
    expected = np.stack([cifar_transform(mean, std)(image).numpy().ravel() for image in images])
    assert np.array_equal(inputs, expected)
    with pytest.raises(ValueError, match="uint8"):
        predict_array(model, images.astype(np.float32), mean, std, progress=False)
