"""The shared inference engine of the pretrained sources."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from calibrepro.inference import environment, inference_settings, load_weights, predict, select_device, strip_prefix


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
    assert inference_settings({}) == {"device": "auto", "batch_size": 256, "workers": 2, "amp": False}
    assert inference_settings({"inference": {"batch_size": 8}})["batch_size"] == 8
    info = environment(torch.device("cpu"))
    assert info["torch"] == torch.__version__ and {"torchvision", "timm", "numpy", "device_name"} <= set(info)


def test_load_weights_falls_back_for_old_checkpoints(tmp_path):
    state = {"module.w": torch.ones(2)}
    path = tmp_path / "plain.pth"
    torch.save(state, path)
    assert torch.equal(load_weights(path)["module.w"], torch.ones(2))
    buffer = io.BytesIO()
    torch.save({"best_prec1": np.float64(91.7), "state_dict": state}, buffer)  # numpy scalar: not weights-only
    loaded = load_weights(buffer.getvalue())
    assert float(loaded["best_prec1"]) == pytest.approx(91.7)
    assert list(strip_prefix(loaded["state_dict"])) == ["w"]
