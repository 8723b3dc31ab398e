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

* **published top-1**: the README's "Top-1 Acc.(%)" column at :data:`COMMIT` (unchanged up to master).

Licence of the code and weights: BSD-3-Clause (the repository's LICENSE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from calibrepro.download import Download
from calibrepro.checkpoints import load_weights
from calibrepro.zoo import ModelSourceError, local_file
from calibrepro.zoo._pretrained import Pin, PretrainedSource, code_root, github_raw

REPO = "chenyaofo/pytorch-cifar-models"
#: 2021-09-08 "fix mobilenetv2 0.75 width pretrained model url" (code unchanged up to master 786c162, 2025)
COMMIT = "ea3629793ea2a86cf56c6a85d6b42dae8a96b3bd"
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

#: (dataset, model) -> (release asset "<tag>/<file>" as written in the code at COMMIT, top-1 % on the
#: CIFAR test set published in the README at COMMIT, whose links name the same assets)
WEIGHTS = {
    ("cifar10", "resnet20"): ("resnet/cifar10_resnet20-4118986f.pt", 92.60),
    ("cifar10", "resnet32"): ("resnet/cifar10_resnet32-ef93fc4d.pt", 93.53),
    ("cifar10", "resnet44"): ("resnet/cifar10_resnet44-2a3cabcb.pt", 94.01),
    ("cifar10", "resnet56"): ("resnet/cifar10_resnet56-187c023a.pt", 94.37),
    ("cifar10", "vgg11_bn"): ("vgg/cifar10_vgg11_bn-eaeebf42.pt", 92.79),
    ("cifar10", "vgg13_bn"): ("vgg/cifar10_vgg13_bn-c01e4a43.pt", 94.00),
    ("cifar10", "vgg16_bn"): ("vgg/cifar10_vgg16_bn-6ee7ea24.pt", 94.16),
    ("cifar10", "vgg19_bn"): ("vgg/cifar10_vgg19_bn-57191229.pt", 93.91),
    ("cifar10", "mobilenetv2_x0_5"): ("mobilenetv2/cifar10_mobilenetv2_x0_5-ca14ced9.pt", 92.88),
    ("cifar10", "mobilenetv2_x0_75"): ("mobilenetv2/cifar10_mobilenetv2_x0_75-a53c314e.pt", 93.72),
    ("cifar10", "mobilenetv2_x1_0"): ("mobilenetv2/cifar10_mobilenetv2_x1_0-fe6a5b48.pt", 93.79),
    ("cifar10", "mobilenetv2_x1_4"): ("mobilenetv2/cifar10_mobilenetv2_x1_4-3bbbd6e2.pt", 94.22),
    ("cifar10", "shufflenetv2_x0_5"): ("shufflenetv2/cifar10_shufflenetv2_x0_5-1308b4e9.pt", 90.13),
    ("cifar10", "shufflenetv2_x1_0"): ("shufflenetv2/cifar10_shufflenetv2_x1_0-98807be3.pt", 92.98),
    ("cifar10", "shufflenetv2_x1_5"): ("shufflenetv2/cifar10_shufflenetv2_x1_5-296694dd.pt", 93.55),
    ("cifar10", "shufflenetv2_x2_0"): ("shufflenetv2/cifar10_shufflenetv2_x2_0-ec31611c.pt", 93.81),
    ("cifar10", "repvgg_a0"): ("repvgg/cifar10_repvgg_a0-ef08a50e.pt", 94.39),
    ("cifar10", "repvgg_a1"): ("repvgg/cifar10_repvgg_a1-38d2431b.pt", 94.89),
    ("cifar10", "repvgg_a2"): ("repvgg/cifar10_repvgg_a2-09488915.pt", 94.98),
    ("cifar100", "resnet20"): ("resnet/cifar100_resnet20-23dac2f1.pt", 68.83),
    ("cifar100", "resnet32"): ("resnet/cifar100_resnet32-84213ce6.pt", 70.16),
    ("cifar100", "resnet44"): ("resnet/cifar100_resnet44-ffe32858.pt", 71.63),
    ("cifar100", "resnet56"): ("resnet/cifar100_resnet56-f2eff4c8.pt", 72.63),
    ("cifar100", "vgg11_bn"): ("vgg/cifar100_vgg11_bn-57d0759e.pt", 70.78),
    ("cifar100", "vgg13_bn"): ("vgg/cifar100_vgg13_bn-5ebe5778.pt", 74.63),
    ("cifar100", "vgg16_bn"): ("vgg/cifar100_vgg16_bn-7d8c4031.pt", 74.00),
    ("cifar100", "vgg19_bn"): ("vgg/cifar100_vgg19_bn-b98f7bd7.pt", 73.87),
    ("cifar100", "mobilenetv2_x0_5"): ("mobilenetv2/cifar100_mobilenetv2_x0_5-9f915757.pt", 70.88),
    ("cifar100", "mobilenetv2_x0_75"): ("mobilenetv2/cifar100_mobilenetv2_x0_75-d7891e60.pt", 73.61),
    ("cifar100", "mobilenetv2_x1_0"): ("mobilenetv2/cifar100_mobilenetv2_x1_0-1311f9ff.pt", 74.20),
    ("cifar100", "mobilenetv2_x1_4"): ("mobilenetv2/cifar100_mobilenetv2_x1_4-8a269f5e.pt", 75.98),
    ("cifar100", "shufflenetv2_x0_5"): ("shufflenetv2/cifar100_shufflenetv2_x0_5-1977720f.pt", 67.82),
    ("cifar100", "shufflenetv2_x1_0"): ("shufflenetv2/cifar100_shufflenetv2_x1_0-9ae22beb.pt", 72.39),
    ("cifar100", "shufflenetv2_x1_5"): ("shufflenetv2/cifar100_shufflenetv2_x1_5-e2c85ad8.pt", 73.91),
    ("cifar100", "shufflenetv2_x2_0"): ("shufflenetv2/cifar100_shufflenetv2_x2_0-e7e584cd.pt", 75.35),
    ("cifar100", "repvgg_a0"): ("repvgg/cifar100_repvgg_a0-2df1edd0.pt", 75.22),
    ("cifar100", "repvgg_a1"): ("repvgg/cifar100_repvgg_a1-c06b21a7.pt", 76.12),
    ("cifar100", "repvgg_a2"): ("repvgg/cifar100_repvgg_a2-8e71b1f8.pt", 77.18),
}


#: family -> rate of its nn.Dropout layers in the pinned code (vgg.py: classifier, mobilenetv2.py: before the head)
DROPOUT = {"vgg11": 0.5, "vgg13": 0.5, "vgg16": 0.5, "vgg19": 0.5, "mobilenetv2": 0.2}


def _pin(dataset: str, name: str, asset: str, top1: float) -> Pin:
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
        licence="BSD-3-Clause",  # the repository's LICENSE
        published_top1=top1,
        published_in=f"README.md of {REPO} at {COMMIT[:7]}",
        code=CODE,
        reference=f"https://github.com/{REPO}/tree/{COMMIT}",
        dropout=DROPOUT.get(name.split("_")[0], 0.0),
    )


PINS = {(dataset, name): _pin(dataset, name, *entry) for (dataset, name), entry in WEIGHTS.items()}


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
