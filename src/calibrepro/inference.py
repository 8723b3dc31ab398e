"""The shared inference engine of the pretrained model sources: a network and a dataset in, logits out.

Settings come from the config section ``inference``: ``device`` (auto: the first GPU when CUDA is
available, else the CPU; or cpu, cuda, cuda:N), ``batch_size``, ``workers`` (DataLoader worker
processes), ``amp`` (float16 autocast on CUDA only, off by default) and ``threads`` (torch's threads
on the CPU, 2 by default: oneDNN splits a convolution by the thread count, so a ResNet-18's float32
logits differed between 1, 2, 3 and 4 threads; a fixed count gives the same bytes on any number of
cores, docs/reproducibility.md). With ``amp`` off the GPU runs
in full float32 (TF32 disabled for matmuls and convolutions), so that logits computed on a GPU and
on a CPU agree to float32 rounding. Logits are returned as float32 in dataset order.

``preprocessing`` picks how an in-memory image array (CIFAR) is prepared: ``batched`` (default,
:func:`predict_array`: the whole uint8 array goes to the device once and each batch is scaled and
normalised there, the same float32 operations as torchvision's ``ToTensor`` + ``Normalize``) or
``reference`` (image by image in DataLoader workers, through the torchvision transforms).
Per-image preprocessing made the CIFAR logits step 7-17x slower than the bare forward pass on an
H100 (benchmarks/README.md).
"""

from __future__ import annotations

import platform
import sys
from contextlib import contextmanager, nullcontext

import numpy as np
import torch

from calibrepro import determinism
from calibrepro.determinism import seeded, torch_threads
from calibrepro.training.networks import set_dropout

#: defaults of the config section ``inference`` (the schema documents each key)
DEFAULTS = {"device": "auto", "batch_size": 256, "workers": 2, "amp": False, "preprocessing": "batched", "threads": 2}


def inference_settings(config: dict) -> dict:
    """The ``inference`` settings of a source config, with defaults filled in."""
    return {**DEFAULTS, **(config.get("inference") or {})}


def job_threads(settings: dict) -> int:
    """Threads a logits job asks for: on a GPU its DataLoader workers and the main process (at least 2), on
    the CPU ``inference.threads`` (``settings``: :func:`inference_settings`)."""
    return max(2, settings["workers"] + 1) if settings["device"] != "cpu" else settings["threads"]


def select_device(spec: str = "auto") -> torch.device:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cpu``, ``cuda`` and ``cuda:N`` as given.

    Raises :class:`RuntimeError` when a GPU is asked for but CUDA is not available.
    """
    spec = (spec or "auto").strip()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"inference.device is {spec!r} but CUDA is not available here; use 'auto' or 'cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"inference.device is {spec!r} but only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
    elif device.type != "cpu":
        raise RuntimeError(f"inference.device {spec!r}: use auto, cpu, cuda or cuda:N")
    return device


def device_name(device: torch.device) -> str:
    """Human-readable name of the device (GPU model, or the CPU's)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


@contextmanager
def _full_precision(device: torch.device, amp: bool):
    """Disable TF32 on CUDA while running without AMP; restore the previous flags afterwards."""
    if device.type != "cuda" or amp:
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _mc_seed(mc_dropout: int | None, seed: int, device: torch.device):
    """The seeded block of MC-Dropout's masks (nothing to seed without it)."""
    return seeded(seed, device) if mc_dropout else nullcontext()


@contextmanager
def _running(model: torch.nn.Module, device: torch.device, amp: bool, mc_dropout: int | None, seed: int, threads: int):
    """``model`` on ``device`` in eval mode (its dropout layers on for MC-Dropout, with seeded masks), without
    autograd, in full float32 unless ``amp``, on ``threads`` CPU threads; yields the autocast context of each
    forward pass."""
    model.to(device).eval()
    if mc_dropout:
        set_dropout(model, True)
    use_amp = bool(amp) and device.type == "cuda"
    autocast = torch.autocast(device_type="cuda", dtype=torch.float16) if use_amp else nullcontext()
    try:
        with (
            _full_precision(device, use_amp),
            torch_threads(threads),
            torch.inference_mode(),
            _mc_seed(mc_dropout, seed, device),
        ):
            yield autocast
    finally:
        if mc_dropout:
            set_dropout(model, False)


def _forward(model: torch.nn.Module, inputs: torch.Tensor, autocast, mc_dropout: int | None) -> torch.Tensor:
    """float32 logits of one batch: the network's, or with ``mc_dropout = T`` the float64
    ``log(1/T sum_t softmax(z_t))`` over T passes (MC-Dropout, Gal & Ghahramani 2016), cast to float32."""
    draws = []
    for _ in range(mc_dropout or 1):
        with autocast:
            logits = model(inputs)
        if isinstance(logits, (tuple, list)):  # models returning (logits, aux) in eval mode
            logits = logits[0]
        draws.append(logits.float())
    if not mc_dropout:
        return draws[0]
    log_probs = torch.stack([torch.log_softmax(z.double(), dim=1) for z in draws])
    return (torch.logsumexp(log_probs, dim=0) - np.log(mc_dropout)).float()


def predict(
    model: torch.nn.Module,
    dataset,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    workers: int = 0,
    amp: bool = False,
    progress: bool = True,
    desc: str = "logits",
    mc_dropout: int | None = None,
    seed: int = 0,
    threads: int = DEFAULTS["threads"],
) -> np.ndarray:
    """Logits ``(N, K)`` float32 of ``model`` on every item ``(input, label)`` of ``dataset``, in order.

    With ``mc_dropout = T`` (MC-Dropout, Gal & Ghahramani 2016), every batch goes through the network
    T times with its dropout layers on (the rest, batch norm included, in eval mode) and the result
    is ``log(1/T sum_t softmax(z_t))``, computed in float64 like an ensemble's
    (:func:`calibrepro.averaging.log_mean_softmax`); the dropout masks are seeded with ``seed``.
    ``threads``: torch's CPU threads (module docstring).
    """
    from tqdm.auto import tqdm

    device = torch.device(device)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=False,
        generator=torch.Generator(),  # its iterator's seed draw would else shift MC-Dropout's masks off batched's
    )
    outputs = []
    try:
        with _running(model, device, amp, mc_dropout, seed, threads) as autocast:
            for inputs, _ in tqdm(loader, desc=desc, unit="batch", disable=not progress, file=sys.stderr):
                outputs.append(_forward(model, inputs.to(device, non_blocking=True), autocast, mc_dropout).cpu())
    except ValueError as error:
        # a DataLoader worker's error comes back as "Caught X in DataLoader worker ...", its traceback,
        # then "module.X: <message>": keep the message only
        lines = str(error).strip().splitlines()
        if len(lines) > 1 and lines[0].startswith("Caught "):
            raise type(error)(lines[-1].split(": ", 1)[-1]) from None
        raise
    if not outputs:
        raise ValueError("the dataset is empty: no logits to compute")
    return torch.cat(outputs).numpy().astype(np.float32, copy=False)


def predict_array(
    model: torch.nn.Module,
    images: np.ndarray,
    mean,
    std,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 256,
    amp: bool = False,
    progress: bool = True,
    desc: str = "logits",
    mc_dropout: int | None = None,
    seed: int = 0,
    threads: int = DEFAULTS["threads"],
) -> np.ndarray:
    """Logits ``(N, K)`` float32 of ``model`` on ``images`` ``(N, H, W, C)`` uint8, preprocessed on the device.

    Each batch is ``(x / 255 - mean) / std`` in float32, channel first: element for element the
    operations of ``transforms.ToTensor()`` then ``transforms.Normalize(mean, std)``, so the inputs
    equal the reference path's bit for bit on the same device (checked in tests/test_zoo_inference.py).
    ``mc_dropout``, ``seed`` and ``threads`` as in :func:`predict`.
    """
    from tqdm.auto import tqdm

    if images.ndim != 4 or images.dtype != np.uint8:
        raise ValueError(f"predict_array needs (N, H, W, C) uint8 images, got {images.shape} {images.dtype}")
    if not len(images):
        raise ValueError("the dataset is empty: no logits to compute")
    device = torch.device(device)
    pixels = torch.from_numpy(np.ascontiguousarray(images))
    if device.type == "cuda":  # one host-to-device copy of the uint8 array (a quarter of the float32 size)
        pixels = pixels.pin_memory().to(device, non_blocking=True)
    shape = (1, -1, 1, 1)
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=device).view(shape)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=device).view(shape)
    # 255 as a tensor on the device, not a Python number: CUDA divides by a host scalar as a
    # multiplication by its float32 reciprocal (up to 1 ulp off ToTensor's true division; measured on
    # an H100: logits up to 1.4e-5 apart), by a device tensor it divides
    full_scale = torch.full((), 255.0, dtype=torch.float32, device=device)
    outputs = []
    batches = range(0, len(pixels), batch_size)
    with _running(model, device, amp, mc_dropout, seed, threads) as autocast:
        for start in tqdm(batches, desc=desc, unit="batch", disable=not progress, file=sys.stderr):
            batch = pixels[start : start + batch_size].to(device).permute(0, 3, 1, 2).contiguous()
            inputs = batch.to(torch.float32).div(full_scale).sub(mean_t).div(std_t)
            outputs.append(_forward(model, inputs, autocast, mc_dropout))
    return torch.cat(outputs).cpu().numpy().astype(np.float32, copy=False)


def environment(device: torch.device) -> dict:
    """Versions of the libraries and the device that produced a logits archive.

    Package versions are read from the installed metadata, not by importing the packages: importing
    timm (and torchvision through it) only for its version took seconds of a CIFAR logits job
    (benchmarks/README.md, ``bench_logits.py``).
    """
    from importlib.metadata import PackageNotFoundError, version

    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "device": str(device),
        "device_name": device_name(device),
        "kernels": determinism.describe(),
    }
    for package in ("torchvision", "timm"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:  # pragma: no cover - both are dependencies
            pass
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    return info
