"""Source timm: the four thesis models with the weights timm served for their names in early 2021."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from calibrepro import datasets
from calibrepro.datasets import DatasetError
from calibrepro.io import load_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from calibrepro.zoo import timm_models
from servers import original_code_dir

timm = pytest.importorskip("timm")

SETTINGS = {"datasets": {"imagenet": {"root": None, "labels_file": None}}, "downloads": {"dir": "x", "mirrors": {}},
            "inference": {"device": "cpu", "batch_size": 2, "workers": 0, "amp": False}}
#: thesis name -> (timm name.tag, 2021 URL) as read from timm v0.4.5's default_cfgs
EXPECTED = {
    "mobilenetv2_120d": ("mobilenetv2_120d.ra_in1k",
                         "https://github.com/rwightman/pytorch-image-models/releases/download/v0.1-weights/mobilenetv2_120d_ra-5987e2ed.pth"),
    "repvgg_b3": ("repvgg_b3.rvgg_in1k",
                  "https://github.com/rwightman/pytorch-image-models/releases/download/v0.1-repvgg-weights/repvgg_b3-199bc50d.pth"),
    "tf_efficientnet_b8": ("tf_efficientnet_b8.ra_in1k",
                           "https://github.com/rwightman/pytorch-image-models/releases/download/v0.1-weights/tf_efficientnet_b8_ra-572d5dd9.pth"),
    "vgg19_bn": ("vgg19_bn.tv_in1k", "https://download.pytorch.org/models/vgg19_bn-c79401a0.pth"),
}


def test_pins_are_the_2021_weights_under_their_timm_tags():
    source = get_source("timm")
    assert source.models("imagenet") == sorted(EXPECTED)
    for name, (tag, url) in EXPECTED.items():
        pin = timm_models.PINS[("imagenet", name)]
        assert (pin.architecture, pin.weights.url) == (tag, url)
        assert pin.weights.checksum == "sha256-prefix:" + url.rsplit("-", 1)[1][:8]
        assert pin.num_classes == 1000
        installed = timm.models.get_pretrained_cfg(tag)
        assert installed is not None, f"timm {timm.__version__} does not know {tag}"
        if installed.url:  # timm >= 0.9 serves some tags from the HF hub only
            assert installed.url == url
        assert pin.licence.lower() == installed.license  # the licence timm states for these weights


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_architecture_builds_without_weights_and_maps_a_batch_to_1000_logits(name):
    source = get_source("timm")
    pin = timm_models.PINS[("imagenet", name)]
    torch.manual_seed(0)
    model = source.build(pin, pretrained=False)  # also checks timm's data config against the pin
    with torch.inference_mode():
        logits = model(torch.randn(1, 3, 96, 96))  # a small input keeps tf_efficientnet_b8 fast
    assert logits.shape == (1, 1000)
    assert timm_models.resolved_data_config(pin, model) == pin.preprocessing
    assert timm_models.resolved_data_config(pin) == pin.preprocessing  # from the tag's pretrained_cfg alone


def test_pinned_preprocessing_is_the_2021_data_config():
    configs = {name: timm_models.PINS[("imagenet", name)].preprocessing for name in EXPECTED}
    assert configs["tf_efficientnet_b8"]["input_size"] == [3, 672, 672]
    assert configs["tf_efficientnet_b8"]["crop_pct"] == 0.954
    assert {c["interpolation"] for n, c in configs.items() if n in ("repvgg_b3", "vgg19_bn")} == {"bilinear"}
    assert {c["interpolation"] for n, c in configs.items() if n in ("mobilenetv2_120d", "tf_efficientnet_b8")} == {"bicubic"}
    for config in configs.values():
        assert config["mean"] == [0.485, 0.456, 0.406] and config["std"] == [0.229, 0.224, 0.225]


@pytest.mark.parametrize("name", ["tf_efficientnet_b8", "repvgg_b3"])
def test_transform_is_resize_floor_size_over_crop_pct_then_center_crop(name):
    from PIL import Image
    from torchvision import transforms

    pin = timm_models.PINS[("imagenet", name)]
    config = pin.preprocessing
    size = config["input_size"][1]
    reference = transforms.Compose([
        transforms.Resize(math.floor(size / config["crop_pct"]), interpolation=getattr(
            transforms.InterpolationMode, config["interpolation"].upper())),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize(config["mean"], config["std"]),
    ])
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8))
    ours = get_source("timm").imagenet_transform(pin)(image)
    assert ours.shape == (3, size, size)
    assert torch.equal(ours, reference(image))


def test_weights_in_the_torchvision_2017_layout_load_into_timm_vgg19_bn(tmp_path):
    """vgg19_bn-c79401a0.pth is a torchvision state_dict (features.*, classifier.0/3/6): timm's filter maps it."""
    import torchvision

    torch.manual_seed(0)
    reference = torchvision.models.vgg19_bn().eval()
    pin = timm_models.PINS[("imagenet", "vgg19_bn")]
    weights = tmp_path / pin.weights.path
    weights.parent.mkdir(parents=True)
    torch.save(reference.state_dict(), weights)
    model = get_source("timm").build(pin, {pin.weights.path: str(weights)}, pretrained=True)
    x = torch.randn(2, 3, 224, 224)
    with torch.inference_mode():
        np.testing.assert_allclose(model(x).numpy(), reference(x).numpy(), rtol=1e-4, atol=1e-5)


def test_cache_logits_on_image_files(tmp_path, monkeypatch):
    """Request -> timm model with stand-in weights from the download path -> transform -> archive.

    ``imagenet_samples`` is replaced by three JPEGs (the folder check itself is tested in
    test_datasets.py); the stand-in weights are mobilenetv2_120d's own random initialisation.
    """
    from PIL import Image

    source = get_source("timm")
    pin = timm_models.PINS[("imagenet", "mobilenetv2_120d")]
    torch.manual_seed(0)
    stand_in = source.build(pin, pretrained=False)
    weights = tmp_path / pin.weights.path
    weights.parent.mkdir(parents=True)
    torch.save(stand_in.state_dict(), weights)
    rng = np.random.default_rng(1)
    paths = []
    for i, shape in enumerate([(300, 400), (256, 256), (500, 333)]):
        path = tmp_path / f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        Image.fromarray(rng.integers(0, 256, (*shape, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    labels = np.array([0, 5, 999])
    monkeypatch.setattr(datasets, "imagenet_samples", lambda root, labels_file=None: (paths, labels))
    output = tmp_path / "logits.npz"
    request = LogitsRequest("imagenet", "mobilenetv2_120d", {"source": "timm"}, SETTINGS, {pin.weights.path: str(weights)})
    source.cache_logits(request, output)
    archive = load_logits(output)
    transform = source.imagenet_transform(pin)
    batch = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])
    with torch.inference_mode():
        expected = stand_in.eval()(batch).numpy()
    np.testing.assert_allclose(archive.logits, expected, rtol=1e-4, atol=1e-4)
    assert np.array_equal(archive.labels, labels)
    assert archive.metadata["architecture"] == "mobilenetv2_120d.ra_in1k"
    assert (archive.metadata["licence"], archive.metadata["published_top1_percent"]) == ("Apache-2.0", 77.328)
    assert archive.metadata["environment"]["timm"] == timm.__version__


def test_check_fails_early_without_imagenet_and_for_unknown_names(tmp_path, monkeypatch):
    source = get_source("timm")
    pin = timm_models.PINS[("imagenet", "tf_efficientnet_b8")]
    monkeypatch.setitem(pin.preprocessing, "mean", [0.5, 0.5, 0.5])  # as if timm resolved the .ap_in1k config
    with pytest.raises(ModelSourceError, match="refusing to compute logits with another preprocessing"):
        source.check("imagenet", "tf_efficientnet_b8", {"source": "timm"}, SETTINGS)
    monkeypatch.undo()
    with pytest.raises(DatasetError, match="datasets.imagenet.root is not set.*image-net.org"):
        source.check("imagenet", "repvgg_b3", {"source": "timm"}, SETTINGS)
    settings = {**SETTINGS, "datasets": {"imagenet": {"root": str(tmp_path / "nowhere")}}}
    with pytest.raises(DatasetError, match="nowhere does not exist"):
        source.check("imagenet", "repvgg_b3", {"source": "timm"}, settings)
    # a name without a pin is any timm tag (calibrepro.zoo.timm_hub); an unknown one says the closest
    with pytest.raises(ModelSourceError, match="lists no pretrained model 'resnt50'; closest: .*resnet50"):
        source.check("imagenet", "resnt50", {"source": "timm"}, SETTINGS)
    with pytest.raises(ModelSourceError, match="sha256 apply only to timm names without a pin"):
        source.check("imagenet", "repvgg_b3", {"source": "timm", "sha256": "0" * 64}, SETTINGS)



def test_resources_are_per_model():
    """tf_efficientnet_b8 at 672 px asks for its own job; the 224-px models for far less time."""
    source = get_source("timm")
    on_gpu = {**SETTINGS, "inference": {"device": "cuda", "workers": 8}}
    spec = {"source": "timm"}
    assert source.resources("imagenet", "repvgg_b3", spec, SETTINGS)["gpu"] == 0
    assert source.resources("imagenet", "tf_efficientnet_b8", spec, on_gpu) == {
        "threads": 9, "gpu": 1, "mem_mb": 16000, "runtime": 120}
    assert source.resources("imagenet", "b8", {"source": "timm", "name": "tf_efficientnet_b8"}, SETTINGS)["runtime"] == 2880
    for model in ("mobilenetv2_120d", "repvgg_b3", "vgg19_bn"):
        assert source.resources("imagenet", model, spec, on_gpu) == {"threads": 9, "gpu": 1, "mem_mb": 8000, "runtime": 30}
        assert source.resources("imagenet", model, spec, SETTINGS)["runtime"] == 720


_LAYOUT_SCRIPT = textwrap.dedent(
    """
    import sys, torch, torchvision
    sys.path.insert(0, sys.argv[1])
    import timm as old
    assert old.__version__ == "0.4.5", old.__version__
    for name in list(sys.modules):
        if name == "timm" or name.startswith("timm."):
            del sys.modules[name]
    sys.path.pop(0)
    from calibrepro.zoo import get_source, timm_models
    out = sys.argv[2]
    source = get_source("timm")
    for name, size in [("mobilenetv2_120d", 224), ("repvgg_b3", 224), ("vgg19_bn", 224), ("tf_efficientnet_b8", 160)]:
        torch.manual_seed(0)
        reference = torchvision.models.vgg19_bn() if name == "vgg19_bn" else old.create_model(name)
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        reference.eval()
        pin = timm_models.PINS[("imagenet", name)]
        torch.save(reference.state_dict(), out)
        model = source.build(pin, {pin.weights.path: out}, pretrained=True)
        x = torch.randn(2, 3, size, size)
        with torch.inference_mode():
            diff = (model(x) - reference(x)).abs().max().item()
        print(name, diff)
        assert diff < 1e-4, (name, diff)
    """
)


def test_2021_checkpoint_layouts_give_the_same_logits_in_the_installed_timm(tmp_path):
    """With timm v0.4.5 (2021-03) at hand: its models' state_dicts load into today's timm with equal outputs."""
    root = original_code_dir()
    old = root / "rwightman" / "pytorch-image-models" if root else None
    if old is None or not (old / "timm" / "version.py").is_file():
        pytest.skip("needs timm v0.4.5's source in $CALIBREPRO_ORIGINAL_CODE_DIR/rwightman/pytorch-image-models")
    result = subprocess.run(
        [sys.executable, "-c", _LAYOUT_SCRIPT, str(old), str(tmp_path / "weights.pth")],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("\n") == 4
