"""Source ``timm``: ImageNet classifiers of PyTorch Image Models (thesis ref. [13]).

The thesis names its ImageNet models by their timm names of early 2021, before timm had tags:
``mobilenetv2_120d``, ``repvgg_b3``, ``tf_efficientnet_b8`` and ``vgg19_bn``. A name then meant one
weights file, given by ``default_cfgs[name]['url']`` (timm v0.3.3 2021-01-03 ... v0.4.12 2021-06-30,
unchanged until v0.6.x). Since timm 0.8 every weights file has a ``name.tag``; each pin below is the
tag whose ``url`` is that 2021 file. Beware: in timm >= 0.8.17 the untagged ``tf_efficientnet_b8``
resolves to ``tf_efficientnet_b8.ap_in1k`` (AdvProp weights, other mean/std), not to the 2021 weights,
which are ``tf_efficientnet_b8.ra_in1k``.

Pins (all data, below): the 2021 URL (GitHub release assets of rwightman/pytorch-image-models, whose
file names carry the first 8 hex digits of their sha256 written by timm's clean_checkpoint.py, and
torchvision's ``vgg19_bn-c79401a0.pth``, named by the same convention) pinned as ``sha256-prefix``;
the ``name.tag``; the eval preprocessing of timm's data config for that tag (resize to
``floor(size / crop_pct)`` with the given interpolation, center crop, ToTensor, Normalize), equal to
the 2021 ``default_cfgs`` entries.

The network is built by the installed timm, ``timm.create_model(name.tag, pretrained=True,
pretrained_cfg_overlay={"file": <the downloaded file>})``, so timm's own checkpoint filter adapts the
2021 key layout where its modules changed (vgg19_bn: torchvision's ``classifier.*`` -> ``pre_logits``
and ``head``). Checked here: with identical weights, timm 1.0.31 gives the same logits as timm
v0.4.5 (and as torchvision for vgg19_bn), and the same preprocessed tensors.

Licences of the weights (timm's pretrained_cfg): Apache-2.0 (mobilenetv2_120d, tf_efficientnet_b8),
MIT (repvgg_b3), BSD-3-Clause (vgg19_bn, torchvision); ImageNet's terms of access apply to models
trained on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from calibrepro.download import Download
from calibrepro.evaluation_sets import home
from calibrepro.zoo import ModelSourceError, local_file, timm_hub
from calibrepro.zoo._pretrained import Pin, PretrainedSource
from calibrepro.zoo.network import NetworkSource

RELEASES = "https://github.com/rwightman/pytorch-image-models/releases/download"
IMAGENET_DEFAULT_MEAN = [0.485, 0.456, 0.406]
IMAGENET_DEFAULT_STD = [0.229, 0.224, 0.225]

#: one logits job on the 50,000 validation images of a 224x224 model (GMACs per image in timm's model
#: cards: vgg19_bn 19.7, repvgg_b3 29.2, mobilenetv2_120d 0.7): GPU: data loading bound, minutes; CPU:
#: vgg19_bn ≈ 2 h on 14 cores, repvgg_b3 ≈ 3 h by its MACs; margins of 4x (CPU) to 10x (GPU)
JOB_224 = {"gpu": {"mem_mb": 8000, "runtime": 30}, "cpu": {"mem_mb": 16000, "runtime": 720}}
#: tf_efficientnet_b8 at 672x672 (63.5 GMACs per image): GPU: one A100/H100-class device, fp32, 8
#: loader workers, est. 15-30 min; CPU: ≈ 3 images/s on 14 cores, 4-5 h; margins of 4x and 10x
JOB_B8 = {"gpu": {"mem_mb": 16000, "runtime": 120}, "cpu": {"mem_mb": 16000, "runtime": 2880}}

#: thesis name -> timm name.tag, 2021 weights URL, the data config of that tag, the top-1 (%) on the
#: 50,000 validation images in timm v0.4.5's results/results-imagenet.csv, the licence of the weights
#: (timm's pretrained_cfg) and, where JOB_224 is too small, the model's own logits job
MODELS = {
    "mobilenetv2_120d": {
        "tag": "mobilenetv2_120d.ra_in1k",
        "url": f"{RELEASES}/v0.1-weights/mobilenetv2_120d_ra-5987e2ed.pth",
        "data_config": {"input_size": [3, 224, 224], "interpolation": "bicubic", "crop_pct": 0.875,
                        "crop_mode": "center", "mean": IMAGENET_DEFAULT_MEAN, "std": IMAGENET_DEFAULT_STD},
        "published_top1": 77.328,
        "licence": "Apache-2.0",
    },
    "repvgg_b3": {
        "tag": "repvgg_b3.rvgg_in1k",
        "url": f"{RELEASES}/v0.1-repvgg-weights/repvgg_b3-199bc50d.pth",
        "data_config": {"input_size": [3, 224, 224], "interpolation": "bilinear", "crop_pct": 0.875,
                        "crop_mode": "center", "mean": IMAGENET_DEFAULT_MEAN, "std": IMAGENET_DEFAULT_STD},
        "published_top1": 80.440,
        "licence": "MIT",
    },
    "tf_efficientnet_b8": {
        "tag": "tf_efficientnet_b8.ra_in1k",
        "url": f"{RELEASES}/v0.1-weights/tf_efficientnet_b8_ra-572d5dd9.pth",
        "data_config": {"input_size": [3, 672, 672], "interpolation": "bicubic", "crop_pct": 0.954,
                        "crop_mode": "center", "mean": IMAGENET_DEFAULT_MEAN, "std": IMAGENET_DEFAULT_STD},
        "published_top1": 85.384,
        "licence": "Apache-2.0",
        "resources": JOB_B8,
    },
    "vgg19_bn": {
        "tag": "vgg19_bn.tv_in1k",
        "url": "https://download.pytorch.org/models/vgg19_bn-c79401a0.pth",
        "data_config": {"input_size": [3, 224, 224], "interpolation": "bilinear", "crop_pct": 0.875,
                        "crop_mode": "center", "mean": IMAGENET_DEFAULT_MEAN, "std": IMAGENET_DEFAULT_STD},
        "published_top1": 74.216,
        "licence": "BSD-3-Clause",
    },
}


def _pin(name: str, entry: dict) -> Pin:
    filename = entry["url"].rsplit("/", 1)[1]
    prefix = filename.rsplit("-", 1)[1].split(".")[0]
    return Pin(
        dataset="imagenet",
        name=name,
        architecture=entry["tag"],
        weights=Download(url=entry["url"], checksum=f"sha256-prefix:{prefix}", path=f"weights/timm/{filename}"),
        num_classes=1000,
        preprocessing=dict(entry["data_config"]),
        licence=entry["licence"],
        published_top1=entry["published_top1"],
        published_in="results/results-imagenet.csv of timm v0.4.5",
        reference="timm default_cfgs of v0.4.5 (2021-03-07) and pretrained_cfg of " + entry["tag"],
        resources=entry.get("resources"),
    )


PINS = {("imagenet", name): _pin(name, entry) for name, entry in MODELS.items()}


def resolved_data_config(pin: Pin, model=None) -> dict:
    """timm's data config of the pinned tag, as plain lists (what :func:`timm.data.create_transform` gets)."""
    from timm.data import resolve_data_config
    from timm.models import get_pretrained_cfg

    if model is None:  # the tag's pretrained_cfg alone, without building the network
        config = resolve_data_config({}, pretrained_cfg=get_pretrained_cfg(pin.architecture).to_dict())
    else:
        config = resolve_data_config({}, model=model)
    return {key: (list(value) if isinstance(value, tuple) else value) for key, value in config.items()}


def _check_data_config(pin: Pin, config: dict) -> None:
    if config != pin.preprocessing:
        import timm

        raise ModelSourceError(
            f"timm {timm.__version__} resolves the data config of {pin.architecture} to {config}, but the pinned "
            f"2021 preprocessing is {pin.preprocessing}; refusing to compute logits with another preprocessing"
        )


class TimmByName(NetworkSource):
    """Any timm ``name.tag`` or ``hf-hub:`` id on any evaluation set (:mod:`calibrepro.zoo.timm_hub`)."""

    name = "timm"

    def weights(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        return timm_hub.weights_downloads(spec.get("name") or model, spec, f"models.{dataset}.{model}")

    def check_network(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        self.weights(dataset, model, spec, config)

    def network(self, request, data):
        return timm_hub.network(request.spec.get("name") or request.model, request, request.spec)


class TimmSource(PretrainedSource):
    """ImageNet models of timm with the weights timm served for their names in early 2021 (the thesis's
    pins), and any other timm name by :class:`TimmByName`: a (data set, name) without a pin goes there.
    A shifted test set of a pinned model (``calibrate_on: imagenet``) runs the pinned file, not the hub's tag."""

    name = "timm"
    PINS = PINS
    #: the usual logits job; tf_efficientnet_b8 has its own (JOB_B8)
    RESOURCES = {"imagenet": JOB_224}

    def _by_name(self, dataset: str, model: str, spec: dict, config: dict) -> bool:
        """Whether no pin covers the model: pins are looked up under the set a shifted set is calibrated on."""
        return (home(dataset, config), spec.get("name") or model) not in self.PINS

    def downloads(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        if self._by_name(dataset, model, spec, config):
            return TimmByName().downloads(dataset, model, spec, config)
        return super().downloads(dataset, model, spec, config)

    def resources(self, dataset: str, model: str, spec: dict, config: dict) -> dict:
        if self._by_name(dataset, model, spec, config):
            return TimmByName().resources(dataset, model, spec, config)
        return super().resources(dataset, model, spec, config)

    def cache_logits(self, request, output: Path) -> None:
        if self._by_name(request.dataset, request.model, request.spec, request.config):
            return TimmByName().cache_logits(request, output)
        return super().cache_logits(request, output)

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        if self._by_name(dataset, model, spec, config):
            return TimmByName().check(dataset, model, spec, config)
        pin = self.pin(home(dataset, config), model, spec)
        import timm

        if pin.architecture not in timm.list_pretrained(pin.architecture):
            raise ModelSourceError(
                f"models.{dataset}.{model}: the installed timm {timm.__version__} does not know {pin.architecture}"
            )
        _check_data_config(pin, resolved_data_config(pin))
        super().check(dataset, model, spec, config)

    def build(self, pin: Pin, files: Mapping[str, str | Path] | None = None, pretrained: bool = True):
        import timm

        kwargs = {"num_classes": pin.num_classes}
        if pretrained:
            weights = local_file(files or {}, pin.weights)
            kwargs.update(pretrained=True, pretrained_cfg_overlay={"file": str(weights)})
        model = timm.create_model(pin.architecture, **kwargs)
        _check_data_config(pin, resolved_data_config(pin, model))
        return model.eval()

    def imagenet_transform(self, pin: Pin):
        from timm.data import create_transform

        config = dict(pin.preprocessing)
        config["input_size"] = tuple(config["input_size"])
        config["mean"], config["std"] = tuple(config["mean"]), tuple(config["std"])
        return create_transform(**config, is_training=False)
