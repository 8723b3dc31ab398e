"""Source ``torchvision``: any weights enum of ``torchvision.models`` by name, e.g. ``resnet50.IMAGENET1K_V2``.

``name`` is ``<builder>.<weights>`` (``<builder>`` alone means its ``DEFAULT`` weights). The weights
file is ``weights.url``, fetched by the pipeline's downloader (``downloads.mirrors`` applies) and
pinned by the sha256 prefix in its file name (the torch.hub convention torchvision itself checks),
or by the full ``sha256`` the model entry gives. The network is built without weights
(``torchvision.models.get_model``, with the class count the weights declare) and loaded strictly with
``torch.load(weights_only=True)``; preprocessing is ``weights.transforms()``; the output names are
``weights.meta["categories"]``.
"""

from __future__ import annotations

from calibrepro.download import Download
from calibrepro.suggestions import closest
from calibrepro.zoo import LogitsRequest, ModelSourceError
from calibrepro.zoo.network import Network, NetworkSource, built_with, describe_weights, weights_file
from calibrepro.zoo.timm_hub import url_download


def split_name(name: str) -> tuple[str, str]:
    builder, _, tag = name.partition(".")
    return builder, tag or "DEFAULT"


def weights_enum(name: str, where: str):
    """The weights enum member named ``builder.TAG``; fail with the closest builders or the builder's tags."""
    import torchvision

    builder, tag = split_name(name)
    builders = torchvision.models.list_models()
    if builder not in builders:
        raise ModelSourceError(
            f"{where}: torchvision {torchvision.__version__} has no model {builder!r}; closest: {closest(builder, builders)}"
        )
    enum = torchvision.models.get_model_weights(builder)
    try:
        return enum[tag]
    except KeyError:
        tags = [member.name for member in enum]
        raise ModelSourceError(f"{where}: {builder} has no weights {tag!r}; known: {', '.join(tags)}, DEFAULT") from None


def build_kwargs(builder: str, weights) -> dict:
    """The builder arguments torchvision sets itself when it loads these weights."""
    kwargs = {"num_classes": len(weights.meta["categories"])}
    if builder in {"inception_v3", "googlenet"}:
        kwargs.update(transform_input=True, aux_logits=True, init_weights=False)
    if builder.startswith("vit_") and "min_size" in weights.meta:
        kwargs["image_size"] = weights.meta["min_size"][0]
    return kwargs


def weights_download(name: str, spec: dict, where: str) -> Download:
    return url_download(weights_enum(name, where).url, "torchvision", spec.get("sha256"))


def preprocessing_of(transform) -> dict:
    """The parameters of an ``ImageClassification`` preset, for the metadata."""
    keys = ("crop_size", "resize_size", "mean", "std", "interpolation", "antialias")
    return {key: (str(value) if key == "interpolation" else value) for key in keys
            if (value := getattr(transform, key, None)) is not None}


class TorchvisionSource(NetworkSource):
    """torchvision classifiers by weights enum name."""

    name = "torchvision"

    def weights(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        return [weights_download(spec.get("name") or model, spec, f"models.{dataset}.{model}")]

    def check_network(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        weights_enum(spec.get("name") or model, f"models.{dataset}.{model}")

    def network(self, request: LogitsRequest, data) -> Network:
        name = request.spec.get("name") or request.model
        where = f"models.{request.dataset}.{request.model}"
        weights = weights_enum(name, where)
        builder, _ = split_name(name)
        download = weights_download(name, request.spec, where)
        path = weights_file(request, download)
        module = built_with("torchvision", builder, path, where, **build_kwargs(builder, weights))
        transform = weights.transforms()
        return Network(
            module=module,
            transform=transform,
            preprocessing={"torchvision_transforms": preprocessing_of(transform)},
            num_outputs=len(weights.meta["categories"]),
            label_names=list(weights.meta["categories"]),
            provenance={"name": f"{builder}.{weights.name}", "architecture": builder,
                        "weights": describe_weights(download, path)},
        )
