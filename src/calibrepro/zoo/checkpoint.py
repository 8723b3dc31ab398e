"""Source ``checkpoint``: a timm or torchvision architecture by name with a state dict of your own.

Model entry: ``architecture`` (a name of ``timm.list_models()`` or ``torchvision.models.list_models()``;
timm's wins when both know it), ``path`` (a local file) or ``url`` (downloaded; pinned by ``sha256``
when given, else its sha256 is recorded on first use), ``num_classes`` (default: the evaluation set's
class count) and ``preprocessing`` (``mean``, ``std`` and, to resize, ``input_size``, ``crop_pct``,
``interpolation``; default: the architecture's timm data config, or torchvision's ImageNet preset).
Only ``mean``/``std`` means the images are used at their own size (``ToTensor`` + ``Normalize``).
The file is read with ``torch.load(weights_only=True)`` or as safetensors and loaded strictly: a
checkpoint of another architecture fails naming the missing and unexpected keys.
"""

from __future__ import annotations

from pathlib import Path

from calibrepro.download import Download, sha256_of
from calibrepro.suggestions import closest
from calibrepro.zoo import LogitsRequest, ModelSourceError
from calibrepro.zoo.network import Network, NetworkSource, built_with, describe_weights, weights_file
from calibrepro.zoo.timm_hub import data_config, transform_of, url_download

IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
#: the preprocessing of torchvision's ImageNet weights (resize 256, centre crop 224, bilinear)
TORCHVISION_DEFAULT = {"input_size": [3, 224, 224], "crop_pct": 0.875, "interpolation": "bilinear",
                       "crop_mode": "center", "mean": IMAGENET_MEAN, "std": IMAGENET_STD}


def library_of(architecture: str, where: str) -> str:
    """``timm`` or ``torchvision``: which library builds ``architecture``; fail with the closest names."""
    import timm
    import torchvision

    if architecture in timm.list_models():
        return "timm"
    if architecture in torchvision.models.list_models():
        return "torchvision"
    known = [*timm.list_models(), *torchvision.models.list_models()]
    raise ModelSourceError(
        f"{where}.architecture: neither timm nor torchvision has an architecture {architecture!r}; closest: "
        f"{closest(architecture, known)}"
    )


class CheckpointSource(NetworkSource):
    """An architecture of timm/torchvision with the user's weights file."""

    name = "checkpoint"

    def weights(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        return [url_download(spec["url"], "checkpoint", spec.get("sha256"))] if spec.get("url") else []

    def logits_inputs(self, dataset: str, model: str, spec: dict, config: dict) -> dict[str, str]:
        inputs = super().logits_inputs(dataset, model, spec, config)
        if spec.get("path"):
            inputs["checkpoint"] = str(spec["path"])
        return inputs

    def check_network(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        where = f"models.{dataset}.{model}"
        library_of(spec["architecture"], where)
        if bool(spec.get("path")) == bool(spec.get("url")):
            raise ModelSourceError(f"{where}: give the weights as exactly one of path (a local file) or url")
        if spec.get("path") and not Path(spec["path"]).expanduser().is_file():
            raise ModelSourceError(f"{where}.path: {spec['path']} does not exist")

    def network(self, request: LogitsRequest, data) -> Network:
        spec, where = request.spec, f"models.{request.dataset}.{request.model}"
        architecture = spec["architecture"]
        library = library_of(architecture, where)
        num_classes = int(spec.get("num_classes") or len(data.class_names))
        if spec.get("url"):
            download = self.weights(request.dataset, request.model, spec, request.config)[0]
            path = weights_file(request, download)
            provenance = describe_weights(download, path)
        else:
            path = Path(request.files.get("checkpoint") or spec["path"]).expanduser()
            if not path.is_file():
                raise ModelSourceError(f"{where}.path: {path} does not exist")
            provenance = {"path": str(spec["path"]), "sha256": sha256_of(path)}
        module = built_with(library, architecture, path, where, num_classes=num_classes)
        given = dict(spec.get("preprocessing") or {})
        if given and "input_size" not in given:  # the images' own size: ToTensor + Normalize
            from calibrepro.zoo._pretrained import cifar_transform

            mean, std = list(given.get("mean", IMAGENET_MEAN)), list(given.get("std", IMAGENET_STD))
            transform, config, normalization = cifar_transform(mean, std), {"mean": mean, "std": std}, (mean, std)
        else:
            if library == "timm":
                from timm.data import resolve_data_config

                base = {key: (list(v) if isinstance(v, tuple) else v)
                        for key, v in resolve_data_config({}, model=module).items()}
            else:
                base = dict(TORCHVISION_DEFAULT)
            config = data_config({**base, **given})
            transform, normalization = transform_of(config), None
        return Network(
            module=module,
            transform=transform,
            preprocessing={"data_config": config},
            num_outputs=num_classes,
            label_names=None,
            provenance={"architecture": architecture, "library": library, "weights": provenance},
            normalization=normalization,
        )
