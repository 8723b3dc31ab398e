"""Source ``chenyaofo``: the CIFAR-10/100 models of chenyaofo/pytorch-cifar-models (thesis ref. [12]).

Pins (all data, below):

* **code**: the repository's ``hubconf.py`` and ``pytorch_cifar_models/*.py`` at commit
  :data:`COMMIT` (the last commit touching code; later commits change only the README and the Colab
  notebook), fetched byte-exact from raw.githubusercontent.com, each pinned by its full sha256
  (computed from the repository's git objects at that commit). They are imported from the downloads
  folder with ``torch.hub.load(<folder>, "<dataset>_<model>", source="local", pretrained=False)``,
  the repository's own hub entry point; nothing of it is copied into this project.
* **weights**: the release assets the code itself points to
  (``https://github.com/chenyaofo/pytorch-cifar-models/releases/download/<family>/<dataset>_<model>-<hash>.pt``,
  release tags resnet, vgg, mobilenetv2, shufflenetv2, repvgg). No full checksum of these files is
  published; their names carry the first 8 hex digits of their sha256 (torch.hub's ``check_hash``
  convention), pinned as ``sha256-prefix``. The full sha256 of each file used is written into the
  logits archive's metadata.
* **preprocessing**: ToTensor + Normalize with the per-dataset mean/std of the training runs, read
  from the repository's training logs (branch ``logs``, ``logs/<dataset>/<model>/default.log``, key
  ``data.mean/std``): CIFAR-10 mean (0.4914, 0.4822, 0.4465), std (0.2023, 0.1994, 0.201); CIFAR-100
  mean (0.507, 0.4865, 0.4409), std (0.2673, 0.2564, 0.2761). Test images are not resized or cropped
  (``get_val_transforms`` of chenyaofo/image-classification-codebase).

Licence of the code and weights: BSD-3-Clause (the repository's LICENSE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from calibrepro.inference import load_weights
from calibrepro.zoo import Download
from calibrepro.zoo._pretrained import ModelSourceError, Pin, PretrainedSource, code_root, github_raw, local_file

REPO = "chenyaofo/pytorch-cifar-models"
#: 2021-09-08 "fix mobilenetv2 0.75 width pretrained model url" (code unchanged up to master 786c162, 2025)
COMMIT = "ea3629793ea2a86cf56c6a85d6b42dae8a96b3bd"
LICENSE = "BSD-3-Clause"
RELEASES = f"https://github.com/{REPO}/releases/download"
CODE_PREFIX = f"code/chenyaofo/pytorch-cifar-models-{COMMIT[:12]}"

#: repository path -> sha256 of the file at COMMIT (git show COMMIT:path | sha256sum)
CODE_FILES = {
    "hubconf.py": "658d4a11bf5c8d8bbdadaaeb0a8155382f770904ae72d10f60ce34e8eb786d8b",
    "pytorch_cifar_models/__init__.py": "94cc5a382fe67629b9d1e2ab4eb263bfb1770d5a1e5c5b912ddcf6a6c5febc58",
    "pytorch_cifar_models/mobilenetv2.py": "8d78f491e55286754c0faad9f70fac8e329f7073c930d7aa68962cb2aae69938",
    "pytorch_cifar_models/repvgg.py": "677b35230b9ddecc3e387c7d93764a21d9e5ea445e5d7e162dcb196a13e1473b",
    "pytorch_cifar_models/resnet.py": "885b8fd2ccfb8ee27c02d3a382e2951622fdcbc2af2bbca375aaf71d40f5f246",
    "pytorch_cifar_models/shufflenetv2.py": "7a23e8bc69fd4a318acee149ee0e0e8e5fdf36c0aa8f0ab1a3d8bb31e0a32f30",
    "pytorch_cifar_models/vgg.py": "5562540e312da9184ff2e4ebc290dc68a9aec1e2a3f5b1e395b9cab4d7e8c3e5",
    "pytorch_cifar_models/vit.py": "3720f1b1a207db2b3c2dafc663edb7ec7d33a7149a4c688edafd51315fbc6bd7",
}
CODE = tuple(github_raw(REPO, COMMIT, path, sha256, CODE_PREFIX) for path, sha256 in CODE_FILES.items())

#: mean/std of the training runs (logs branch, commit 8ec775d2b526fbb3009202a24988e6f1074185a4)
NORMALIZATION = {
    "cifar10": {"mean": [0.4914, 0.4822, 0.4465], "std": [0.2023, 0.1994, 0.201]},
    "cifar100": {"mean": [0.507, 0.4865, 0.4409], "std": [0.2673, 0.2564, 0.2761]},
}
NUM_CLASSES = {"cifar10": 10, "cifar100": 100}

#: (dataset, model) -> release asset "<tag>/<file>", as written in the code at COMMIT
WEIGHTS = {
    ("cifar10", "resnet20"): "resnet/cifar10_resnet20-4118986f.pt",
    ("cifar10", "resnet32"): "resnet/cifar10_resnet32-ef93fc4d.pt",
    ("cifar10", "resnet44"): "resnet/cifar10_resnet44-2a3cabcb.pt",
    ("cifar10", "resnet56"): "resnet/cifar10_resnet56-187c023a.pt",
    ("cifar10", "vgg11_bn"): "vgg/cifar10_vgg11_bn-eaeebf42.pt",
    ("cifar10", "vgg13_bn"): "vgg/cifar10_vgg13_bn-c01e4a43.pt",
    ("cifar10", "vgg16_bn"): "vgg/cifar10_vgg16_bn-6ee7ea24.pt",
    ("cifar10", "vgg19_bn"): "vgg/cifar10_vgg19_bn-57191229.pt",
    ("cifar10", "mobilenetv2_x0_5"): "mobilenetv2/cifar10_mobilenetv2_x0_5-ca14ced9.pt",
    ("cifar10", "mobilenetv2_x0_75"): "mobilenetv2/cifar10_mobilenetv2_x0_75-a53c314e.pt",
    ("cifar10", "mobilenetv2_x1_0"): "mobilenetv2/cifar10_mobilenetv2_x1_0-fe6a5b48.pt",
    ("cifar10", "mobilenetv2_x1_4"): "mobilenetv2/cifar10_mobilenetv2_x1_4-3bbbd6e2.pt",
    ("cifar10", "shufflenetv2_x0_5"): "shufflenetv2/cifar10_shufflenetv2_x0_5-1308b4e9.pt",
    ("cifar10", "shufflenetv2_x1_0"): "shufflenetv2/cifar10_shufflenetv2_x1_0-98807be3.pt",
    ("cifar10", "shufflenetv2_x1_5"): "shufflenetv2/cifar10_shufflenetv2_x1_5-296694dd.pt",
    ("cifar10", "shufflenetv2_x2_0"): "shufflenetv2/cifar10_shufflenetv2_x2_0-ec31611c.pt",
    ("cifar10", "repvgg_a0"): "repvgg/cifar10_repvgg_a0-ef08a50e.pt",
    ("cifar10", "repvgg_a1"): "repvgg/cifar10_repvgg_a1-38d2431b.pt",
    ("cifar10", "repvgg_a2"): "repvgg/cifar10_repvgg_a2-09488915.pt",
    ("cifar100", "resnet20"): "resnet/cifar100_resnet20-23dac2f1.pt",
    ("cifar100", "resnet32"): "resnet/cifar100_resnet32-84213ce6.pt",
    ("cifar100", "resnet44"): "resnet/cifar100_resnet44-ffe32858.pt",
    ("cifar100", "resnet56"): "resnet/cifar100_resnet56-f2eff4c8.pt",
    ("cifar100", "vgg11_bn"): "vgg/cifar100_vgg11_bn-57d0759e.pt",
    ("cifar100", "vgg13_bn"): "vgg/cifar100_vgg13_bn-5ebe5778.pt",
    ("cifar100", "vgg16_bn"): "vgg/cifar100_vgg16_bn-7d8c4031.pt",
    ("cifar100", "vgg19_bn"): "vgg/cifar100_vgg19_bn-b98f7bd7.pt",
    ("cifar100", "mobilenetv2_x0_5"): "mobilenetv2/cifar100_mobilenetv2_x0_5-9f915757.pt",
    ("cifar100", "mobilenetv2_x0_75"): "mobilenetv2/cifar100_mobilenetv2_x0_75-d7891e60.pt",
    ("cifar100", "mobilenetv2_x1_0"): "mobilenetv2/cifar100_mobilenetv2_x1_0-1311f9ff.pt",
    ("cifar100", "mobilenetv2_x1_4"): "mobilenetv2/cifar100_mobilenetv2_x1_4-8a269f5e.pt",
    ("cifar100", "shufflenetv2_x0_5"): "shufflenetv2/cifar100_shufflenetv2_x0_5-1977720f.pt",
    ("cifar100", "shufflenetv2_x1_0"): "shufflenetv2/cifar100_shufflenetv2_x1_0-9ae22beb.pt",
    ("cifar100", "shufflenetv2_x1_5"): "shufflenetv2/cifar100_shufflenetv2_x1_5-e2c85ad8.pt",
    ("cifar100", "shufflenetv2_x2_0"): "shufflenetv2/cifar100_shufflenetv2_x2_0-e7e584cd.pt",
    ("cifar100", "repvgg_a0"): "repvgg/cifar100_repvgg_a0-2df1edd0.pt",
    ("cifar100", "repvgg_a1"): "repvgg/cifar100_repvgg_a1-c06b21a7.pt",
    ("cifar100", "repvgg_a2"): "repvgg/cifar100_repvgg_a2-8e71b1f8.pt",
}


def _pin(dataset: str, name: str, asset: str) -> Pin:
    filename = asset.split("/")[-1]
    prefix = filename.rsplit("-", 1)[1].split(".")[0]
    return Pin(
        dataset=dataset,
        name=name,
        architecture=f"{dataset}_{name}",  # the hub entry point
        weights=Download(
            url=f"{RELEASES}/{asset}", checksum=f"sha256-prefix:{prefix}", path=f"weights/chenyaofo/{filename}"
        ),
        num_classes=NUM_CLASSES[dataset],
        preprocessing={"transform": "ToTensor, Normalize", **NORMALIZATION[dataset]},
        code=CODE,
        reference=f"https://github.com/{REPO}/tree/{COMMIT}",
    )


PINS = {(dataset, name): _pin(dataset, name, asset) for (dataset, name), asset in WEIGHTS.items()}


def load_hub_model(folder: str | Path, entry: str):
    """Build ``entry`` (e.g. ``cifar100_resnet20``) without weights from a local copy of the repository."""
    import torch

    return torch.hub.load(str(folder), entry, source="local", pretrained=False)


class ChenyaofoSource(PretrainedSource):
    """chenyaofo/pytorch-cifar-models: ResNet, VGG-BN, MobileNetV2, ShuffleNetV2, RepVGG on CIFAR-10/100."""

    name = "chenyaofo"
    PINS = PINS
    #: one logits job on 10,000 CIFAR test images (worst case: vgg19_bn / repvgg_a2)
    RESOURCES = {
        "cifar10": {"gpu": {"mem_mb": 6000, "runtime": 10}, "cpu": {"mem_mb": 6000, "runtime": 30}},
        "cifar100": {"gpu": {"mem_mb": 6000, "runtime": 10}, "cpu": {"mem_mb": 6000, "runtime": 30}},
    }

    def build(self, pin: Pin, files: Mapping[str, str | Path], pretrained: bool = True):
        model = load_hub_model(code_root(files, pin.code, CODE_PREFIX), pin.architecture)
        if pretrained:
            state_dict = load_weights(local_file(files, pin.weights))
            if not isinstance(state_dict, dict):
                raise ModelSourceError(f"{pin.weights.path}: not a state_dict")
            model.load_state_dict(state_dict, strict=True)
        return model.eval()
