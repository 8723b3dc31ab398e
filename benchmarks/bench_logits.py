"""The logits cache against a bare forward pass of the same network, on the same device.

For each CIFAR-10 ResNet of akamaster/pytorch_resnet_cifar10 (real weights, given with
``--weights``), three timings on ``--n`` test images (the real first 1,017 CIFAR-10 test images
tiled to N when ``--images`` is given, else random pixels):

* **bare forward**: the network on the already preprocessed, already on-device input tensor, in
  batches of ``--batch-size``, synchronised (the floor: what the GPU itself needs);
* **cache (in process)**: :meth:`PretrainedSource.cache_logits`, i.e. what the pipeline's logits
  job does after start-up: read the CIFAR tarball, build the network from the pinned weights,
  preprocess on the device a batch at a time (``inference.preprocessing: batched``), predict,
  write the ``.npz`` with metadata;
* **reference path**: the same with ``inference.preprocessing: reference`` (image by image through
  the torchvision transforms in DataLoader workers);
* **cache (CLI)**: the whole ``python -m calibrepro.cli logits`` process, interpreter and torch
  start-up and CUDA initialisation included.

Every cache must give the bare pass's logits exactly (checked). ``--no-cli`` skips the CLI timings. Run, for instance::

    python benchmarks/bench_logits.py --weights ../shared/realdata/akamaster \\
        --images ../shared/realdata/cifar10_test/images_first1017.npy --labels ../shared/realdata/cifar10_test/labels.npy
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from servers import cifar_tarball_bytes  # noqa: E402  (the tests' CIFAR tarball writer)

from calibrepro.datasets import cifar_download  # noqa: E402
from calibrepro.inference import _full_precision as full_precision  # noqa: E402
from calibrepro.inference import select_device  # noqa: E402
from calibrepro.io import load_logits  # noqa: E402
from calibrepro.zoo import LogitsRequest  # noqa: E402
from calibrepro.zoo._pretrained import cifar_transform  # noqa: E402
from calibrepro.zoo.akamaster import AkamasterSource  # noqa: E402


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_forward(model, inputs: torch.Tensor, batch_size: int, device: torch.device) -> tuple[float, np.ndarray]:
    """Seconds for one pass over ``inputs`` (already on ``device``), and the logits."""
    outputs = []
    synchronize(device)
    start = time.perf_counter()
    with full_precision(device, amp=False), torch.inference_mode():  # TF32 off, as the cache runs
        for batch in inputs.split(batch_size):
            outputs.append(model(batch))
    synchronize(device)
    elapsed = time.perf_counter() - start
    return elapsed, torch.cat(outputs).float().cpu().numpy()


def startup_costs(device: torch.device) -> dict[str, float]:
    """Seconds a fresh interpreter needs to import the logits job's modules, and to initialise the device."""
    imports = "import calibrepro.cli, calibrepro.zoo.akamaster, timm, torchvision"
    init = f"import torch; torch.zeros(1, device={str(device)!r}); torch.cuda.synchronize() if torch.cuda.is_available() else None"
    costs = {}
    for label, code in (("python + imports", imports), ("python + torch + device init", init)):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        costs[label] = time.perf_counter() - start
    return costs


def imagenet_like(args, device: torch.device) -> None:
    """The ImageNet path (JPEG files, timm preprocessing, DataLoader workers) against a bare pass.

    ``--imagenet-like N`` synthetic 500x375 JPEGs and ``mobilenetv2_120d`` with random weights:
    the pipeline's ``predict`` over :class:`calibrepro.datasets.ImageFiles` (what the timm
    source's logits job runs after the data set check) against the network on the preprocessed,
    on-device tensor.
    """
    from PIL import Image

    from calibrepro.datasets import ImageFiles
    from calibrepro.inference import predict
    from calibrepro.zoo.timm_models import TimmSource

    folder = Path(tempfile.mkdtemp(prefix="calibrepro-bench-jpeg-"))
    rng = np.random.default_rng(0)
    smooth = rng.integers(0, 256, size=(47, 63, 3), dtype=np.uint8)  # upsampled noise: JPEG-like content
    paths = []
    for i in range(args.imagenet_like):
        image = Image.fromarray(np.roll(smooth, i, axis=1)).resize((500, 375), Image.BILINEAR)
        paths.append(str(folder / f"val_{i:05d}.JPEG"))
        image.save(paths[-1], quality=90)
    labels = np.arange(len(paths)) % 1000
    source = TimmSource()
    pin = source.pin("imagenet", "mobilenetv2_120d", {})
    model = source.build(pin, pretrained=False).to(device).eval()
    data = ImageFiles(paths, labels, source.imagenet_transform(pin))
    inputs = torch.stack([data[i][0] for i in range(len(data))]).to(device)
    bare_forward(model, inputs, args.batch_size, device)
    bare, reference = best_of(args.repeat, lambda: bare_forward(model, inputs, args.batch_size, device))

    def pipeline_predict():
        start = time.perf_counter()
        logits = predict(model, data, device=device, batch_size=args.batch_size, workers=args.workers, progress=False)
        return time.perf_counter() - start, logits

    cached, logits = best_of(args.repeat, pipeline_predict)
    print(f"ImageNet-like: {len(paths)} JPEGs 500x375 -> {pin.preprocessing['input_size']}, {pin.architecture} "
          f"(random weights): bare forward {bare:.3f} s, predict over the files {cached:.3f} s, "
          f"ratio {cached / bare:.1f}x; same logits: {np.array_equal(logits, reference)}")


def folder_step(args, device: torch.device) -> None:
    """The logits step of a network on an image folder (``source: imagefolder``) against a bare pass.

    ``--folder N`` synthetic 500x375 JPEGs in 10 class folders and a checkpoint of ``mobilenetv2_120d``
    (random weights, 10 outputs; its timm data config: bicubic resize to 256, centre crop 224): the
    whole :meth:`CheckpointSource.cache_logits` (scan the folder, build and load the network, decode
    and preprocess in DataLoader workers, predict, write the archive) against the network on the
    preprocessed, on-device tensor. Both must give the same logits.
    """
    import timm
    from PIL import Image

    from calibrepro import evaluation_sets
    from calibrepro.datasets import ImageFiles
    from calibrepro.zoo.checkpoint import CheckpointSource
    from calibrepro.zoo.timm_hub import data_config, transform_of

    work = Path(tempfile.mkdtemp(prefix="calibrepro-bench-folder-"))
    rng = np.random.default_rng(0)
    smooth = rng.integers(0, 256, size=(47, 63, 3), dtype=np.uint8)  # upsampled noise: JPEG-like content
    for i in range(args.folder):
        (work / "images" / f"c{i % 10}").mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(np.roll(smooth, i, axis=1)).resize((500, 375), Image.BILINEAR)
        image.save(work / "images" / f"c{i % 10}" / f"{i:05d}.jpg", quality=90)
    torch.manual_seed(0)
    model = timm.create_model("mobilenetv2_120d", num_classes=10).eval()
    torch.save(model.state_dict(), work / "weights.pth")
    config = {"datasets": {"folder": {"source": "imagefolder", "root": str(work / "images")}},
              "downloads": {"dir": str(work / "downloads")},
              "inference": {"device": str(device), "batch_size": args.batch_size, "workers": args.workers}}
    spec = {"source": "checkpoint", "architecture": "mobilenetv2_120d", "path": str(work / "weights.pth")}
    request = LogitsRequest("folder", "m", spec, config, {})
    data = evaluation_sets.load("folder", config, {})
    transform = transform_of(data_config(timm.data.resolve_data_config({}, model=model)))
    files = ImageFiles(data.paths, data.labels, transform)
    inputs = torch.stack([files[i][0] for i in range(len(files))]).to(device)
    model = model.to(device)
    bare_forward(model, inputs, args.batch_size, device)
    bare, reference = best_of(args.repeat, lambda: bare_forward(model, inputs, args.batch_size, device))

    def step():
        start = time.perf_counter()
        CheckpointSource().cache_logits(request, work / "m.npz")
        return time.perf_counter() - start, load_logits(work / "m.npz").logits

    cached, logits = best_of(args.repeat, step)
    print(f"image folder: {args.folder} JPEGs 500x375 in 10 classes -> 224, mobilenetv2_120d checkpoint (random "
          f"weights): bare forward {bare:.3f} s, the logits step {cached:.3f} s, ratio {cached / bare:.2f}x; "
          f"same logits: {np.array_equal(logits, reference)}")


def best_of(repeat: int, run) -> tuple[float, object]:
    results = [run() for _ in range(repeat)]
    best = min(range(repeat), key=lambda i: results[i][0])
    return results[best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, help="folder with akamaster's resnet*-<hash>.th files (for --models)")
    parser.add_argument("--images", type=Path, help="(M, 32, 32, 3) uint8 .npy; random pixels when omitted")
    parser.add_argument("--labels", type=Path, help="(>= M,) int .npy of the images' labels")
    parser.add_argument("--models", nargs="*", default=["resnet20", "resnet56"], help="none: skip the CIFAR timings")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-cli", action="store_true", help="skip the `calibrepro logits` process timings")
    parser.add_argument("--imagenet-like", type=int, default=0, metavar="N",
                        help="also time the ImageNet path on N synthetic JPEGs (see imagenet_like)")
    parser.add_argument("--folder", type=int, default=0, metavar="N",
                        help="also time the logits step on an image folder of N synthetic JPEGs (see folder_step)")
    args = parser.parse_args()
    if args.models and args.weights is None:
        parser.error("--weights is needed for the CIFAR timings of --models (or give --models with no names)")

    device = select_device(args.device)
    if args.images:
        base = np.load(args.images, allow_pickle=False)
        base_labels = np.load(args.labels, allow_pickle=False)[: len(base)] if args.labels else np.zeros(len(base))
    else:
        rng = np.random.default_rng(0)
        base = rng.integers(0, 256, size=(1000, 32, 32, 3), dtype=np.uint8)
        base_labels = rng.integers(0, 10, size=1000)
    index = np.arange(args.n) % len(base)
    images, labels = base[index], np.asarray(base_labels)[index].astype(np.int64)

    source = AkamasterSource()
    work = Path(tempfile.mkdtemp(prefix="calibrepro-bench-logits-"))
    tarball = work / "cifar-10-python.tar.gz"
    tarball.write_bytes(cifar_tarball_bytes("cifar10", images, labels))
    settings = {"inference": {"device": str(device), "batch_size": args.batch_size, "workers": args.workers, "amp": False}}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {device} ({name}); images: {args.n}; batch {args.batch_size}; workers {args.workers}; "
          f"torch {torch.__version__}")
    rows = []
    for model_name in args.models:
        pin = source.pin("cifar10", model_name, {})
        weights = next(args.weights.glob(f"{model_name}-*.th"))
        files = {pin.weights.path: str(weights), cifar_download("cifar10").path: str(tarball)}
        request = LogitsRequest("cifar10", model_name, {"source": "akamaster"}, settings, files)
        output = work / f"{model_name}.npz"

        model = source.build(pin, files).to(device).eval()
        transform = cifar_transform(pin.preprocessing["mean"], pin.preprocessing["std"])
        inputs = torch.stack([transform(image) for image in images]).to(device)
        bare_forward(model, inputs, args.batch_size, device)  # warm-up: kernels, cuDNN autotuning
        bare, reference = best_of(args.repeat, lambda: bare_forward(model, inputs, args.batch_size, device))

        def cache_in_process(preprocessing="batched"):
            inference = {**settings["inference"], "preprocessing": preprocessing}
            timed = LogitsRequest("cifar10", model_name, {"source": "akamaster"}, {"inference": inference}, files)
            start = time.perf_counter()
            source.cache_logits(timed, output)
            return time.perf_counter() - start, load_logits(output).logits

        cache, cached = best_of(args.repeat, cache_in_process)
        reference_cache, reference_cached = best_of(args.repeat, lambda: cache_in_process("reference"))
        command = [sys.executable, "-m", "calibrepro.cli", "logits", "--request", json.dumps(request.to_json()),
                   "--output", str(work / f"{model_name}-cli.npz")]

        def cache_cli():
            start = time.perf_counter()
            subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
            return time.perf_counter() - start, load_logits(work / f"{model_name}-cli.npz").logits

        if args.no_cli:
            cli, cli_logits = float("nan"), cached
        else:
            cli, cli_logits = best_of(args.repeat, cache_cli)
        same = all(np.array_equal(x, reference) for x in (cached, reference_cached, cli_logits))
        if not same:  # say which path differs from the bare pass, and by how much
            _, again = cache_in_process()
            for label, x in (("cache", cached), ("reference path", reference_cached), ("CLI", cli_logits),
                             ("cache, second run", again)):
                print(f"  {model_name}: {label} vs bare forward: max |diff| {np.abs(x - reference).max():.3g}, "
                      f"top-1 agreement {np.mean(x.argmax(1) == reference.argmax(1)):.6f}; "
                      f"identical to the first cache: {np.array_equal(x, cached)}")
        accuracy = float((reference.argmax(axis=1) == labels).mean())
        rows.append((model_name, bare, cache, reference_cache, cli, same, accuracy))
    print(f"{'model':<10} {'bare forward':>13} {'cache (in process)':>19} {'reference path':>15} {'cache (CLI)':>12} "
          f"{'ratio in process':>17} {'ratio reference':>16} {'ratio CLI':>10}  same logits  top-1")
    for model_name, bare, cache, reference_cache, cli, same, accuracy in rows:
        print(f"{model_name:<10} {bare:>12.3f}s {cache:>18.3f}s {reference_cache:>14.3f}s {cli:>11.3f}s "
              f"{cache / bare:>16.2f}x {reference_cache / bare:>15.2f}x {cli / bare:>9.1f}x  {str(same):<11}  "
              f"{100 * accuracy:.2f} %")
    if not args.no_cli:
        for label, seconds in startup_costs(device).items():
            print(f"start-up of a fresh process, {label}: {seconds:.2f} s")
    if args.imagenet_like:
        imagenet_like(args, device)
    if args.folder:
        folder_step(args, device)


if __name__ == "__main__":
    main()
