"""timm networks by name: any ``name.tag`` of ``timm.list_pretrained()`` and ``hf-hub:org/name`` ids.

The weights are fetched by the pipeline's own downloader (atomic, mirrors, a record of the sha256 on
first use: :mod:`calibrepro.zoo.recorded`), not by timm: a tag's hub file is
``<hub>/<hf_hub_id>/resolve/main/model.safetensors`` (or the tag's ``url``), where ``<hub>`` is
``$HF_ENDPOINT`` when set, else https://huggingface.co (as huggingface_hub reads it). An
``hf-hub:`` id also needs its ``config.json`` (architecture, classes, data config), fetched the same
way. The network is built by timm without weights and the state dict loaded strictly
(:func:`calibrepro.zoo.network.built_with`: safetensors, or ``torch.load(weights_only=True)``); the preprocessing is timm's ``resolve_data_config`` of the tag
and ``create_transform(is_training=False)``.
"""

from __future__ import annotations

import json
import os
import re

from calibrepro.download import Download
from calibrepro.suggestions import closest
from calibrepro.zoo import LogitsRequest, ModelSourceError
from calibrepro.zoo.network import Network, built_with, describe_weights, weights_file

HUB = "https://huggingface.co"
_PREFIX = re.compile(r"-([0-9a-f]{8,64})\.[A-Za-z]+$")


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or HUB


def _hub_file(repo: str, filename: str) -> Download:
    return Download(
        url=f"{hub_endpoint()}/{repo}/resolve/main/{filename}",
        checksum="unpinned:the hub publishes no checksum we pin; sha256 recorded on first use",
        path=f"weights/hf-hub/{repo}/{filename}",
    )


def url_download(url: str, folder: str, sha256: str | None = None) -> Download:
    """A weights URL: pinned by ``sha256`` when given, by the torch.hub file-name prefix, else recorded on first use."""
    filename = url.rsplit("/", 1)[-1].split("?")[0]
    found = _PREFIX.search(filename)
    if sha256:
        checksum = f"sha256:{sha256}"
    elif found:
        checksum = f"sha256-prefix:{found.group(1)}"
    else:
        checksum = "unpinned:no checksum published; sha256 recorded on first use"
    return Download(url=url, checksum=checksum, path=f"weights/{folder}/{filename}")


def pretrained_cfg(name: str, where: str) -> dict:
    """timm's pretrained_cfg of ``name`` (``arch`` or ``arch.tag``); fail with the closest known names."""
    import timm
    from timm.models import get_pretrained_cfg

    known = timm.list_pretrained()
    full = name if "." in name else next((tag for tag in known if tag.split(".")[0] == name), name)
    if full not in known:
        raise ModelSourceError(
            f"{where}: timm {timm.__version__} lists no pretrained model {name!r}; closest: {closest(name, known)} "
            "(`calibrepro models --source timm --filter <part of the name>` lists them)"
        )
    return get_pretrained_cfg(full).to_dict()


def weights_downloads(name: str, spec: dict, where: str) -> list[Download]:
    """The files of a timm name: ``[weights]``, or ``[config.json, weights]`` for an ``hf-hub:`` id."""
    if name.startswith("hf-hub:"):
        repo = name.removeprefix("hf-hub:")
        return [_hub_file(repo, "config.json"), _hub_file(repo, spec.get("file") or "model.safetensors")]
    cfg = pretrained_cfg(name, where)
    if cfg.get("hf_hub_id"):
        return [_hub_file(cfg["hf_hub_id"], cfg.get("hf_hub_filename") or "model.safetensors")]
    if cfg.get("url"):
        return [url_download(cfg["url"], "timm", spec.get("sha256"))]
    raise ModelSourceError(f"{where}: timm's {name} has neither a hub id nor a URL for its weights")


def data_config(cfg: dict) -> dict:
    """timm's eval data config of a pretrained_cfg, as plain lists."""
    from timm.data import resolve_data_config

    config = resolve_data_config({}, pretrained_cfg=cfg)
    return {key: (list(value) if isinstance(value, tuple) else value) for key, value in config.items()}


def transform_of(config: dict):
    from timm.data import create_transform

    args = {key: (tuple(value) if isinstance(value, list) else value) for key, value in config.items()}
    return create_transform(**args, is_training=False)


def label_names(cfg: dict, num_classes: int) -> list[str] | None:
    """The outputs' names: the config's own, or the WordNet ids of ImageNet-1k/22k classifiers."""
    if cfg.get("label_names"):
        return list(cfg["label_names"])
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset(cfg)
    names = list(ImageNetInfo(subset).label_names()) if subset else None
    return names if names and len(names) == num_classes else None


def network(name: str, request: LogitsRequest, spec: dict) -> Network:
    """The timm network ``name`` with its downloaded weights."""
    import timm

    where = f"models.{request.dataset}.{request.model}"
    files = weights_downloads(name, spec, where)
    paths = [weights_file(request, item) for item in files]
    if name.startswith("hf-hub:"):
        try:
            hub = json.loads(paths[0].read_text(encoding="utf-8"))
            architecture = hub["architecture"]
        except (ValueError, KeyError) as error:
            raise ModelSourceError(f"{where}: {files[0].url} is not a timm config.json ({error})") from None
        cfg = {**hub.get("pretrained_cfg", {}), "architecture": architecture}
        num_classes = int(hub.get("num_classes", cfg.get("num_classes", 1000)))
        cfg["num_classes"] = num_classes
        if hub.get("label_names"):
            cfg["label_names"] = hub["label_names"]
    else:
        cfg = pretrained_cfg(name, where)
        architecture, num_classes = cfg["architecture"], int(cfg.get("num_classes") or 1000)
    if architecture not in timm.list_models():
        raise ModelSourceError(f"{where}: timm {timm.__version__} has no architecture {architecture!r}")
    module = built_with("timm", architecture, paths[-1], where, num_classes=num_classes)
    config = data_config(cfg)
    return Network(
        module=module,
        transform=transform_of(config),
        preprocessing={"timm_data_config": config},
        num_outputs=num_classes,
        label_names=label_names(cfg, num_classes),
        provenance={"name": name, "architecture": architecture, "weights": describe_weights(files[-1], paths[-1])},
    )
