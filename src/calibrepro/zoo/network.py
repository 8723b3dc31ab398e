"""Networks by name on any evaluation set: the sources ``timm`` (by name), ``torchvision`` and ``checkpoint``.

A :class:`NetworkSource` yields a :class:`Network` (module, preprocessing, label set, weights'
provenance) and knows nothing of the data; :mod:`calibrepro.evaluation_sets` yields the samples and
knows nothing of the network; :func:`write_logits` is the one logits step joining them (for these
sources and for a pinned network on a shifted set): it maps the set's classes to the network's
outputs (:func:`evaluation_sets.output_columns`), runs the network and keeps one column per class.
Every source here builds its network without weights and loads the file strictly
(:func:`built_with`: safetensors, or ``torch.load(weights_only=True)``).

Weights that no pin covers (a timm tag's hub file, a checkpoint URL without ``sha256``) are
downloaded as ``unpinned`` and their sha256 recorded on first use and checked on every later use
(:mod:`calibrepro.zoo.recorded`). The preprocessing comes from the network's own data config and is
written, with the weights' sha256, into the logits archive's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from calibrepro import evaluation_sets
from calibrepro.checkpoints import load_weights, strip_prefix
from calibrepro.download import Download, sha256_of
from calibrepro.inference import environment, inference_settings, job_threads, predict, predict_array, select_device
from calibrepro.io import save_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, Source, local_file


@dataclass
class Network:
    """A network ready to run: module in eval mode, image -> tensor transform, label set, provenance."""

    module: object  # torch.nn.Module
    transform: Callable  # PIL image -> (C, H, W) float tensor
    preprocessing: dict  # the data config the transform was made from (recorded in the metadata)
    num_outputs: int
    label_names: list[str] | None  # names of the outputs where the weights declare them
    provenance: dict = field(default_factory=dict)  # architecture, weights URL/path and sha256
    #: (mean, std) when the transform is exactly ToTensor + Normalize at the native size (no resize)
    normalization: tuple[list[float], list[float]] | None = None


class _ToPIL:
    """An in-memory uint8 HWC image -> PIL image, then ``transform`` (picklable for DataLoader workers)."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, image):
        from PIL import Image

        return self.transform(Image.fromarray(image))


def weights_file(request: LogitsRequest, download: Download) -> Path:
    """The local weights file of ``download``, checked against its first-use record when unpinned."""
    from calibrepro.zoo import recorded

    path = local_file(request.files, download)
    recorded.check(download, path, request.config)
    return path


class NetworkSource(Source):
    """A source of networks built from a name (and weights); runs on any evaluation set."""

    needs_gpu = True

    # -------------------------------------------------------------------- what subclasses implement
    def weights(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        """The network's files to download (weights; a hub model's config)."""
        return []

    def check_network(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        """Fail early on an unknown name or a missing file."""

    def network(self, request: LogitsRequest, data: evaluation_sets.EvaluationSet) -> Network:
        """The network of the request's model entry (``data``: the set it will run on)."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------- the interface
    def downloads(self, dataset: str, model: str, spec: dict, config: dict) -> list[Download]:
        return [*self.weights(dataset, model, spec, config), *evaluation_sets.downloads(dataset, config)]

    def check(self, dataset: str, model: str, spec: dict, config: dict) -> None:
        self.check_network(dataset, model, spec, config)
        evaluation_sets.check(dataset, config)

    def resources(self, dataset: str, model: str, spec: dict, config: dict) -> dict:
        settings = inference_settings(config)
        on_gpu = settings["device"] != "cpu"
        return {
            "threads": job_threads(settings),
            "gpu": 1 if on_gpu else 0,
            "mem_mb": 8000 if on_gpu else 16000,
            "runtime": 60 if on_gpu else 720,
        }

    def cache_logits(self, request: LogitsRequest, output: Path) -> None:
        data = evaluation_sets.load(request.dataset, request.config, request.files)
        write_logits(request, data, self.network(request, data), self.name, output)


def write_logits(request: LogitsRequest, data: evaluation_sets.EvaluationSet, network: Network, source: str,
                 output: Path) -> None:
    """The one logits step: ``network`` on every sample of ``data``, one column per class, archived;
    with the entry's ``mc_dropout`` (and ``mc_seed``) as MC-Dropout (:func:`mc_dropout_variant`)."""
    columns = evaluation_sets.output_columns(
        request.dataset, request.config, data.class_names, network.num_outputs, network.label_names
    )
    settings, run, variant = logits_run(request, network.module)
    device = run["device"]
    if data.images is not None and network.normalization and settings["preprocessing"] == "batched":
        logits = predict_array(network.module, data.images, *network.normalization, **run)
    else:
        from calibrepro.datasets import ArrayImages, ImageFiles

        if data.images is not None:
            samples = ArrayImages(data.images, data.labels, _ToPIL(network.transform))
        else:
            samples = ImageFiles(data.paths, data.labels, network.transform)
        logits = predict(network.module, samples, workers=settings["workers"], **run)
    if logits.shape[1] != network.num_outputs:
        raise ModelSourceError(
            f"{request.dataset}/{request.model}: {logits.shape[1]} logits per image, expected {network.num_outputs}"
        )
    logits = np.ascontiguousarray(logits[:, columns])
    metadata = {
        "source": source,
        "dataset": request.dataset,
        "model": request.model,
        **network.provenance,
        "preprocessing": network.preprocessing,
        "evaluation_set": data.description,
        "classes": data.class_names,
        "output_columns": columns,
        "num_samples": int(len(data)),
        "top1_accuracy": float(np.mean(logits.argmax(axis=1) == data.labels)),
        "inference": {**settings, "amp": bool(settings["amp"]) and device.type == "cuda"},
        "variant": variant,
        "environment": environment(device),
    }
    save_logits(output, logits, data.labels, metadata)


def logits_run(request: LogitsRequest, module, network: str = "this network") -> tuple[dict, dict, dict]:
    """How a logits job runs ``module``: the inference settings (the entry's ``batch_size`` over the
    config's), the options of :func:`~calibrepro.inference.predict` and ``predict_array`` (device, batch size,
    AMP, MC-Dropout passes and seed, threads), and the MC-Dropout variant's metadata (:func:`mc_dropout_variant`)."""
    settings = inference_settings(request.config)
    if request.spec.get("batch_size"):
        settings["batch_size"] = int(request.spec["batch_size"])
    device = select_device(settings["device"])
    variant = mc_dropout_variant(request, module, settings["batch_size"], network)
    run = {"device": device, "batch_size": settings["batch_size"], "amp": settings["amp"],
           "desc": f"{request.dataset}/{request.model}", "mc_dropout": variant.get("mc_dropout"),
           "seed": variant.get("mc_seed", 0), "threads": settings["threads"]}
    return settings, run, variant


def mc_dropout_variant(request: LogitsRequest, module, batch_size: int, network: str = "this network") -> dict:
    """The entry's MC-Dropout settings as recorded in the metadata (``{}`` without ``mc_dropout``);
    stops, naming the key and the ``network``, when it has no dropout layer of a positive rate."""
    where = f"models.{request.dataset}.{request.model}"
    passes = request.spec.get("mc_dropout")
    if not passes:
        if "mc_seed" in request.spec:
            raise ModelSourceError(f"{where}.mc_seed: seeds MC-Dropout's masks; set mc_dropout or remove it")
        return {}
    from calibrepro.training.networks import has_dropout

    if not has_dropout(module):
        raise ModelSourceError(
            f"{where}.mc_dropout: {network} has no dropout layers with a positive rate; remove mc_dropout"
        )
    return {"mc_dropout": int(passes), "mc_seed": int(request.spec.get("mc_seed", 0)), "batch_size": int(batch_size)}


def read_state_dict(path: Path) -> dict:
    """A state dict from ``.safetensors`` (no code can run) or a PyTorch file (``weights_only=True``)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as error:  # noqa: BLE001 - any parse failure of a foreign file: say which file
            raise ModelSourceError(f"{path}: not a readable safetensors file ({error})") from None
    state = load_weights(path)
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    return strip_prefix(state)


def load_strict(module, state: dict, where: str, architecture: str):
    """Load ``state`` into ``module``; a checkpoint of another architecture fails naming the keys."""
    own = module.state_dict()
    missing = [key for key in own if key not in state]
    unexpected = [key for key in state if key not in own]
    shapes = [key for key in own if key in state and tuple(state[key].shape) != tuple(own[key].shape)]
    if missing or unexpected or shapes:
        raise ModelSourceError(
            f"{where}: the weights do not fit {architecture}: {len(missing)} missing keys "
            f"({', '.join(missing[:4])}), {len(unexpected)} unexpected keys ({', '.join(unexpected[:4])}), "
            f"{len(shapes)} of another shape ({', '.join(shapes[:4])}); is it a checkpoint of another architecture "
            "or class count?"
        )
    module.load_state_dict(state, strict=True)
    return module.eval()


def built_with(library: str, architecture: str, path: Path, where: str, **kwargs):
    """``architecture`` of ``library`` (``timm`` or ``torchvision``) built without weights (``kwargs`` to its
    builder), with the state dict of the file ``path`` loaded strictly; in eval mode."""
    if library == "timm":
        import timm

        module = timm.create_model(architecture, pretrained=False, **kwargs)
    else:
        import torchvision

        module = torchvision.models.get_model(architecture, weights=None, **kwargs)
    return load_strict(module, read_state_dict(path), where, architecture)


def describe_weights(download: Download, path: Path) -> dict:
    """Provenance of a weights file for the metadata: URL, pin and the sha256 of the file used."""
    return {"url": download.url, "pin": download.checksum, "sha256": sha256_of(path)}


