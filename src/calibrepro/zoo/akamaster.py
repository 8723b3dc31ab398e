"""Source ``akamaster``: the CIFAR-10 ResNets of akamaster/pytorch_resnet_cifar10 (Idelbayev 2018).

Not a model family of the thesis: a small, widely used one whose weights are plain files in a
public repository, so that the whole chain (pinned download, model, logits) can be checked against
published accuracies: ResNet-20/32/44/56/110/1202 reach 91.73 / 92.63 / 93.10 / 93.39 / 93.68 /
93.82 % on the CIFAR-10 test set (that repository's README).

The architecture is written here from He et al. 2016 ("Deep Residual Learning for Image
Recognition", sec. 4.2): a 3x3 convolution with 16 filters, then three stages of ``n`` basic blocks
(two 3x3 convolutions each) with 16, 32 and 64 filters on 32x32, 16x16 and 8x8 feature maps, global
average pooling and a 10-way fully connected layer; depth = 6n + 2. Shortcuts are option A
(parameter-free): the identity, and where a stage starts, the input subsampled with stride 2 and
zero-padded with the extra channels. The weights fix two details the paper leaves open: the
subsampling keeps the even rows and columns, and the zero channels are split evenly before and after
the input's channels. Module names follow the checkpoints (``conv1``, ``bn1``, ``layer1.0.conv1``,
..., ``linear``), so their ``state_dict`` (keys prefixed ``module.`` by DataParallel) loads with
``strict=True`` once the prefix is removed.

Preprocessing of that repository (``trainer.py``): ToTensor, then Normalize with the ImageNet
mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch.nn.functional as F
from torch import nn

from calibrepro.download import Download
from calibrepro.checkpoints import load_weights, strip_prefix
from calibrepro.zoo import ModelSourceError, local_file
from calibrepro.zoo._pretrained import Pin, PretrainedSource

REPO = "akamaster/pytorch_resnet_cifar10"
#: master as of 2021-07-20; the weight files have not changed since d1ea108 (2019-10-04)
COMMIT = "d5489e8995e81e91ce6b1d69dcc98ad579b0b153"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

#: name -> (blocks per stage n, weight file, checksum, published top-1 %). Full sha256 computed from
#: the repository's git objects at COMMIT (and equal to ../shared/realdata/SHA256SUMS); 110/1202 are
#: not in the snapshot, so only the sha256 prefix in their file names pins them. Top-1 = 100 - the
#: "Test err (this impl.)" of the README at COMMIT.
MODELS: dict[str, tuple[int, str, str, float]] = {
    "resnet20": (3, "resnet20-12fca82f.th", "sha256:12fca82f0bebc4135bf1f32f6e3710e61d5108578464b84fd6d7f5c1b04036c8", 91.73),
    "resnet32": (5, "resnet32-d509ac18.th", "sha256:d509ac1820d7f25398913559d7e81a13229b1e7adc5648e3bfa5e22dc137f850", 92.63),
    "resnet44": (7, "resnet44-014dd654.th", "sha256:014dd6541728a1c700b1642ab640e211dc6eb8ed507d70697458dc8f8a0ae2e4", 93.10),
    "resnet56": (9, "resnet56-4bfd9763.th", "sha256:4bfd97631478d6b638d2764fd2baff3edb1d7d82252d54439343b6596b9b5367", 93.39),
    "resnet110": (18, "resnet110-1d1ed7c2.th", "sha256-prefix:1d1ed7c2", 93.68),
    "resnet1202": (200, "resnet1202-f3b1deed.th", "sha256-prefix:f3b1deed", 93.82),
}

#: models whose logits job differs from the source's RESOURCES: ResNet-1202 has 22x the blocks of
#: ResNet-56 (≈2.5 min for the 10,000 images on 2 CPU cores), so ≈1 h on CPUs; 3x margin
OWN_RESOURCES = {"resnet1202": {"gpu": {"mem_mb": 4000, "runtime": 10}, "cpu": {"mem_mb": 4000, "runtime": 180}}}


def _pin(name: str, blocks: int, filename: str, checksum: str, top1: float, resources: dict | None) -> Pin:
    return Pin(
        dataset="cifar10",
        name=name,
        architecture=f"resnet{6 * blocks + 2}",
        weights=Download(
            url=f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/pretrained_models/{filename}",
            checksum=checksum,
            path=f"weights/akamaster/{filename}",
        ),
        num_classes=10,
        preprocessing={"transform": "ToTensor, Normalize", "mean": list(MEAN), "std": list(STD)},
        licence="BSD-2-Clause",  # the repository's LICENSE
        published_top1=top1,
        published_in=f"README.md of {REPO} at {COMMIT[:7]} (100 - test error)",
        reference=f"https://github.com/{REPO}/tree/{COMMIT}",
        resources=resources,
    )


PINS = {
    ("cifar10", name): _pin(name, *entry, resources=OWN_RESOURCES.get(name)) for name, entry in MODELS.items()
}


class _ShortcutA(nn.Module):
    """Option A shortcut: subsample by 2 (even positions), zero-pad the new channels on both sides."""

    def __init__(self, extra_channels: int):
        super().__init__()
        self.before = extra_channels // 2
        self.after = extra_channels - self.before

    def forward(self, x):
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.before, self.after))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch normalisation, added to the shortcut, then ReLU."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        if stride != 1 or in_channels != channels:
            self.shortcut = _ShortcutA(channels - in_channels)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 32x32 inputs, He et al. 2016 sec. 4.2, option A shortcuts."""

    def __init__(self, blocks: int, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._stage(16, 16, blocks, stride=1)
        self.layer2 = self._stage(16, 32, blocks, stride=2)
        self.layer3 = self._stage(32, 64, blocks, stride=2)
        self.linear = nn.Linear(64, num_classes)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight)

    @staticmethod
    def _stage(in_channels: int, channels: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(in_channels, channels, stride)]
        layers += [BasicBlock(channels, channels) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def resnet_cifar(depth: int, num_classes: int = 10) -> CifarResNet:
    """ResNet of the given depth (20, 32, 44, 56, 110, 1202, ...: 6n + 2)."""
    if (depth - 2) % 6 or depth < 8:
        raise ValueError(f"CIFAR ResNets have depth 6n + 2, got {depth}")
    return CifarResNet((depth - 2) // 6, num_classes)


class AkamasterSource(PretrainedSource):
    """CIFAR-10 ResNets of akamaster/pytorch_resnet_cifar10; architecture written from the paper."""

    name = "akamaster"
    PINS = PINS
    #: one logits job on the 10,000 CIFAR-10 test images (ResNet-20..110; ResNet-1202 has its own)
    RESOURCES = {
        "cifar10": {"gpu": {"mem_mb": 4000, "runtime": 10}, "cpu": {"mem_mb": 4000, "runtime": 30}},
    }

    def build(self, pin: Pin, files: Mapping[str, str | Path] | None = None, pretrained: bool = True):
        model = resnet_cifar(int(pin.architecture.removeprefix("resnet")), pin.num_classes)
        if pretrained:
            checkpoint = load_weights(local_file(files or {}, pin.weights))
            state_dict = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
            if not isinstance(state_dict, dict):
                raise ModelSourceError(f"{pin.weights.path}: not a checkpoint with a state_dict")
            model.load_state_dict(strip_prefix(state_dict), strict=True)
        return model.eval()

