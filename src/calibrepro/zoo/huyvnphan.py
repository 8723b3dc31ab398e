"""Source ``huyvnphan``: the CIFAR-10 models of huyvnphan/PyTorch_CIFAR10 v3.0.1 (thesis ref. [11]).

Pins (all data, below):

* **code**: the model definitions ``cifar10_models/<family>.py`` of the repository at tag v3.0.1
  (commit :data:`COMMIT`, 2021-01-10; the release archived on Zenodo, DOI 10.5281/zenodo.4431043,
  which the thesis cites), fetched byte-exact from raw.githubusercontent.com, each pinned by its full
  sha256 (computed from the repository's git objects at that commit), and imported from the
  downloads folder with importlib; nothing of it is copied into this project. Later commits change
  only the README. The Zenodo record archives the same source tree but not the weights.
* **weights**: ``state_dicts.zip`` (933 MB, one ``state_dicts/<model>.pt`` per model), released with
  v3.0 in January 2021. Its original host (``https://rutgers.box.com/shared/static/gkw08ecs797j2et1ksmbg1w5t3idf5r5.zip``,
  in ``data.py``) is dead; the README's backup is Google Drive file ``17fmN8eQdLpq2jIMQ_X0IXDPXfI9oVWgq``,
  downloaded with gdown. **No checksum of this archive is published anywhere** (the repository, its
  README, Zenodo and the issues were searched): the pin is ``unpinned:`` and the content is verified
  instead: the expected member must exist and load with ``strict=True`` into the v3.0.1 architecture.
  The sha256 of the archive and of the member are written into the logits archive's metadata, so
  that a run with internet can turn the pin into a full ``sha256:`` (one line below).
* **preprocessing**: ToTensor + Normalize with mean (0.4914, 0.4822, 0.4465) and std
  (0.2471, 0.2435, 0.2616), the values of ``data.py`` at v3.0.1 (the v3.0.1 README printed the
  older std (0.2023, 0.1994, 0.2010), corrected in the README on 2021-02-12 to match ``data.py``).

Licence of the code and weights: MIT (the repository's LICENSE).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from typing import Mapping

from calibrepro.download import Download
from calibrepro.checkpoints import load_weights
from calibrepro.zoo import ModelSourceError, local_file
from calibrepro.zoo._pretrained import Pin, PretrainedSource, code_root, github_raw

REPO = "huyvnphan/PyTorch_CIFAR10"
COMMIT = "80c232514370d6e9b862eda5f4498588c51fae32"  # tag v3.0.1
ZENODO_DOI = "10.5281/zenodo.4431043"
CODE_PREFIX = f"code/huyvnphan/PyTorch_CIFAR10-{COMMIT[:12]}"
MEAN = [0.4914, 0.4822, 0.4465]
STD = [0.2471, 0.2435, 0.2616]

#: repository path -> sha256 of the file at COMMIT (git show COMMIT:path | sha256sum)
CODE_FILES = {
    "cifar10_models/densenet.py": "41e1b27eb3cf14ce27df2c31743a5a16290fc9ca00f4cc3a0bf2d89753802599",
    "cifar10_models/googlenet.py": "330294d67056d5b3730e6d5e53e2627c15e82161996bc57f2a405cd3e0fd58b4",
    "cifar10_models/inception.py": "b8755fe6d260fc612c702b26da07fd6653c1ba2edd52c3b2d377227f91f20de1",
    "cifar10_models/mobilenetv2.py": "81ce94d857c3bc11b22eae69553b530a8746676e391ca1cb7c45073695097873",
    "cifar10_models/resnet.py": "0eb3706c924c670bfd61879053f1b32eb2039fccb239e38d44533af3550fdc03",
    "cifar10_models/vgg.py": "3634f6df9e039aac29378858d3a925ef0ec9308b6de9eddf054c419af49c53df",
}
CODE = {path: github_raw(REPO, COMMIT, path, sha256, CODE_PREFIX) for path, sha256 in CODE_FILES.items()}

WEIGHTS = Download(
    url="https://drive.google.com/uc?id=17fmN8eQdLpq2jIMQ_X0IXDPXfI9oVWgq&export=download",
    checksum=(
        "unpinned:no checksum of state_dicts.zip is published; each member is verified by a strict "
        "load into its v3.0.1 architecture"
    ),
    path="weights/huyvnphan/state_dicts.zip",
)

#: code file -> rate of the nn.Dropout layers it defines (inception.py's and densenet.py's dropout is functional
#: and off at test time, so MC-Dropout cannot switch it on)
DROPOUT = {"vgg": 0.5, "mobilenetv2": 0.2, "googlenet": 0.2}

#: model -> (code file defining it (the builder has the model's name), "Val. Acc." (%) in the README
#: at COMMIT, measured on the CIFAR-10 test set)
MODELS = {
    "vgg11_bn": ("vgg", 92.39),
    "vgg13_bn": ("vgg", 94.22),
    "vgg16_bn": ("vgg", 94.00),
    "vgg19_bn": ("vgg", 93.95),
    "resnet18": ("resnet", 93.07),
    "resnet34": ("resnet", 93.34),
    "resnet50": ("resnet", 93.65),
    "densenet121": ("densenet", 94.06),
    "densenet161": ("densenet", 94.07),
    "densenet169": ("densenet", 94.05),
    "mobilenet_v2": ("mobilenetv2", 93.91),
    "googlenet": ("googlenet", 92.85),
    "inception_v3": ("inception", 93.74),
}


def _pin(name: str, family: str, top1: float) -> Pin:
    code_file = f"cifar10_models/{family}.py"
    return Pin(
        dataset="cifar10",
        name=name,
        architecture=f"{code_file}:{name}",
        weights=WEIGHTS,
        num_classes=10,
        preprocessing={"transform": "ToTensor, Normalize", "mean": MEAN, "std": STD},
        licence="MIT",  # the repository's LICENSE
        published_top1=top1,
        published_in=f"README.md of {REPO} at v3.0.1",
        code=(CODE[code_file],),
        member=f"state_dicts/{name}.pt",
        reference=f"https://github.com/{REPO}/tree/{COMMIT} (v3.0.1, doi:{ZENODO_DOI})",
        dropout=DROPOUT.get(family, 0.0),
    )


PINS = {("cifar10", name): _pin(name, *entry) for name, entry in MODELS.items()}


def import_code_file(path: Path, tag: str):
    """Import one original model file under a private module name."""
    module_name = f"_calibrepro_original_{tag}_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has a loader
        raise ModelSourceError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def read_member(archive: Path, member: str) -> bytes:
    """The bytes of ``member`` of the weights archive (ignoring macOS ``__MACOSX`` copies)."""
    try:
        with zipfile.ZipFile(archive) as handle:
            names = [n for n in handle.namelist() if not n.startswith("__MACOSX/")]
            matches = [n for n in names if n == member or n.endswith("/" + member)]
            if not matches:
                raise ModelSourceError(
                    f"{archive}: no member {member!r}; this is not huyvnphan's v3 state_dicts.zip "
                    f"(members: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''})"
                )
            return handle.read(sorted(matches, key=len)[0])
    except zipfile.BadZipFile as error:
        raise ModelSourceError(f"{archive}: not a zip archive ({error}); expected state_dicts.zip") from error


class HuyvnphanSource(PretrainedSource):
    """huyvnphan/PyTorch_CIFAR10 v3.0.1: 13 torchvision architectures adapted to and trained on CIFAR-10."""

    name = "huyvnphan"
    PINS = PINS
    #: one logits job on the 10,000 CIFAR-10 test images (worst case: densenet161 / vgg19_bn; the
    #: 933 MB archive is read member by member)
    RESOURCES = {
        "cifar10": {"gpu": {"mem_mb": 8000, "runtime": 15}, "cpu": {"mem_mb": 8000, "runtime": 60}},
    }

    def build(self, pin: Pin, files: Mapping[str, str | Path], pretrained: bool = True):
        code_file, builder = pin.architecture.split(":")
        root = code_root(files, pin.code, CODE_PREFIX)
        module = import_code_file(root / code_file, f"huyvnphan_{COMMIT[:12]}")
        model = getattr(module, builder)(pretrained=False)
        if pretrained:
            archive = local_file(files, pin.weights)
            state_dict = load_weights(read_member(archive, pin.member), name=f"{archive}:{pin.member}")
            try:
                model.load_state_dict(state_dict, strict=True)
            except (RuntimeError, TypeError, AttributeError) as error:
                raise ModelSourceError(
                    f"{pin.weights.path}:{pin.member} does not load into {pin.architecture} at {COMMIT[:12]} "
                    f"({error}); the archive is not the v3 state_dicts.zip"
                ) from error
        return model.eval()

    def weights_metadata(self, pin: Pin, weights: Path) -> dict:
        meta = super().weights_metadata(pin, weights)
        meta["member"] = pin.member
        meta["member_sha256"] = hashlib.sha256(read_member(weights, pin.member)).hexdigest()
        return meta
