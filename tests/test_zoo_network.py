"""Networks by name (timm tags, torchvision weights, checkpoints) on image folders, offline.

A local server plays the Hugging Face hub (``HF_ENDPOINT``) and download.pytorch.org (through
``downloads.mirrors``) and serves weights of tiny networks the tests create.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from calibrepro import evaluation_sets
from calibrepro.datasets import DatasetError
from calibrepro.download import ChecksumError, fetch, rewrite_url
from calibrepro.io import load_logits
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from servers import sha256_hex


def write_folder(root: Path, counts: dict[str, int], seed: int = 0, size: int = 20) -> Path:
    """``root/<class>/<i>.png|jpg``: random images, PNG and JPEG alternating."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, count in counts.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = rng.integers(0, 256, size=(size, size + 3, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i:03d}.{'png' if i % 2 else 'jpg'}")
    return root


def settings(tmp_path: Path, datasets: dict, mirrors: dict | None = None) -> dict:
    return {
        "datasets": datasets,
        "downloads": {"dir": str(tmp_path / "downloads"), "mirrors": mirrors or {}, "timeout": 10, "retries": 0},
        "inference": {"device": "cpu", "batch_size": 4, "workers": 0, "amp": False, "preprocessing": "batched"},
    }


def run(source_name: str, dataset: str, model: str, spec: dict, config: dict, output: Path):
    """Fetch the model's downloads as the workflow does, then run its logits job."""
    source = get_source(source_name)
    source.check(dataset, model, spec, config)
    files = source.logits_inputs(dataset, model, spec, config)
    for item in source.downloads(dataset, model, spec, config):
        if not Path(files[item.path]).exists():
            fetch(item, files[item.path], mirrors=config["downloads"]["mirrors"], timeout=10, retries=0, progress=False)
    source.cache_logits(LogitsRequest(dataset, model, spec, config, files), output)
    return load_logits(output)


def safetensors_bytes(module) -> bytes:
    from safetensors.torch import save

    return save({key: value.contiguous() for key, value in module.state_dict().items()})


# ---------------------------------------------------------------------------------- image folders


def test_image_folder_order_labels_and_csv(tmp_path):
    root = write_folder(tmp_path / "shapes", {"b": 2, "a": 3})
    paths, labels, names = evaluation_sets.folder_samples("shapes", {"root": str(root)})
    assert names == ["a", "b"] and labels.tolist() == [0, 0, 0, 1, 1]
    assert [Path(p).relative_to(root).as_posix() for p in paths] == ["a/000.jpg", "a/001.png", "a/002.jpg", "b/000.jpg", "b/001.png"]
    # declared classes fix the label order; a CSV of path,label lists the samples instead of folders
    (root / "labels.csv").write_text("path,label\nb/001.png,b\na/000.jpg,a\n")
    paths, labels, names = evaluation_sets.folder_samples("shapes", {"root": str(root), "csv": "labels.csv", "classes": ["b", "a"]})
    assert names == ["b", "a"] and labels.tolist() == [0, 1] and paths[0].endswith("b/001.png")


def test_image_folder_bad_input_is_named(tmp_path):
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(DatasetError, match=r"datasets\.empty\.root: .* holds no images"):
        evaluation_sets.folder_samples("empty", {"root": str(tmp_path / "empty")})
    with pytest.raises(DatasetError, match=r"datasets\.x\.root: .* is not a folder"):
        evaluation_sets.folder_samples("x", {"root": str(tmp_path / "missing")})
    root = write_folder(tmp_path / "shapes", {"a": 1, "b": 1, "c": 1})
    with pytest.raises(DatasetError, match=r"classes not in datasets\.shapes\.classes: c"):
        evaluation_sets.folder_samples("shapes", {"root": str(root), "classes": ["a", "b"]})
    with pytest.raises(DatasetError, match="not built in .*source: imagefolder"):
        evaluation_sets.kind("shapes", {"datasets": {}})


def test_output_columns_map_classes_to_outputs():
    config = {"datasets": {"s": {"class_map": {"b": 7}}}}
    names = ["x", "a", "y", "b"]
    assert evaluation_sets.output_columns("s", {}, ["a", "b"], 2, None) == [0, 1]  # one output per class
    assert evaluation_sets.output_columns("s", {}, ["a", "b"], 4, names) == [1, 3]  # by the network's names
    assert evaluation_sets.output_columns("s", config, ["a", "b"], 10, names) == [1, 7]  # class_map wins
    with pytest.raises(DatasetError, match=r"classes c are not in the network's label set \(4 outputs.*class_map"):
        evaluation_sets.output_columns("s", {}, ["a", "c"], 4, names)
    with pytest.raises(DatasetError, match="outside the network's 0..9"):
        evaluation_sets.output_columns("s", {"datasets": {"s": {"class_map": {"a": 12}}}}, ["a", "b"], 10, names)


# ------------------------------------------------------------------------------ timm by name


def test_timm_tag_from_a_local_hub_recorded_on_first_use(tmp_path, file_server, monkeypatch):
    """A timm tag's weights come from $HF_ENDPOINT; the sha256 is recorded, and a changed file is refused."""
    import timm

    monkeypatch.setenv("HF_ENDPOINT", file_server.base)
    torch.manual_seed(0)
    net = timm.create_model("test_resnet", num_classes=1000).eval()
    file_server.add_file("/timm/test_resnet.r160_in1k/resolve/main/model.safetensors", safetensors_bytes(net))
    root = write_folder(tmp_path / "shapes", {"a": 3, "b": 2, "c": 2})
    config = settings(tmp_path, {"shapes": {"source": "imagefolder", "root": str(root),
                                            "class_map": {"a": 3, "b": 500, "c": "n01443537"}}})
    spec = {"source": "timm", "name": "test_resnet.r160_in1k"}
    archive = run("timm", "shapes", "tiny", spec, config, tmp_path / "tiny.npz")

    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    transform = create_transform(**resolve_data_config({}, model=net), is_training=False)
    paths, labels, _ = evaluation_sets.folder_samples("shapes", config["datasets"]["shapes"])
    with torch.inference_mode():
        full = net(torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])).numpy()
    np.testing.assert_allclose(archive.logits, full[:, [3, 500, 1]], rtol=1e-5, atol=1e-5)  # n01443537 = output 1
    assert archive.labels.tolist() == labels.tolist()
    weights = archive.metadata["weights"]
    recorded = tmp_path / "downloads" / "recorded.json"
    assert weights["sha256"] in recorded.read_text() and archive.metadata["preprocessing"]["timm_data_config"]["input_size"] == [3, 160, 160]

    # the file behind the URL changes: a fresh download is refused, nothing is written
    torch.manual_seed(1)
    other = timm.create_model("test_resnet", num_classes=1000)
    file_server.add_file("/timm/test_resnet.r160_in1k/resolve/main/model.safetensors", safetensors_bytes(other))
    (tmp_path / "downloads" / "weights" / "hf-hub" / "timm" / "test_resnet.r160_in1k" / "model.safetensors").unlink()
    with pytest.raises(ChecksumError, match="first use recorded"):
        run("timm", "shapes", "tiny", spec, config, tmp_path / "again.npz")
    assert not (tmp_path / "again.npz").exists()


def test_unknown_names_say_the_closest():
    timm_source, torchvision_source = get_source("timm"), get_source("torchvision")
    config = settings(Path("/nonexistent"), {})
    with pytest.raises(ModelSourceError, match=r"no pretrained model 'convnext_tiny.fb_in22k_ft_in1kk'; closest: convnext_tiny.fb_in22k_ft_in1k"):
        timm_source.downloads("imagenet", "m", {"name": "convnext_tiny.fb_in22k_ft_in1kk"}, config)
    with pytest.raises(ModelSourceError, match=r"no model 'resnet5O'; closest: .*resnet50"):
        torchvision_source.check("imagenet", "m", {"name": "resnet5O.IMAGENET1K_V2"}, config)
    with pytest.raises(ModelSourceError, match=r"resnet50 has no weights 'IMAGENET1K_V9'; known: IMAGENET1K_V1, IMAGENET1K_V2"):
        torchvision_source.check("imagenet", "m", {"name": "resnet50.IMAGENET1K_V9"}, config)
    # the thesis's pins keep their exact tags and checksums
    pinned = timm_source.downloads("imagenet", "tf_efficientnet_b8", {}, config)[0]
    assert pinned.checksum == "sha256-prefix:572d5dd9" and pinned.url.endswith("tf_efficientnet_b8_ra-572d5dd9.pth")


# ------------------------------------------------------------------------------ torchvision by name


def test_torchvision_weights_through_a_mirror(tmp_path, file_server):
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.get_model("squeezenet1_1", weights=None, num_classes=1000).eval()
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    data = buffer.getvalue()
    file_server.add_file("/models/squeezenet1_1-b8a52dc0.pth", data)
    mirrors = {"https://download.pytorch.org/models/": file_server.url("/models/")}
    root = write_folder(tmp_path / "fish", {"tench": 2, "goldfish": 2}, size=40)
    config = settings(tmp_path, {"fish": {"source": "imagefolder", "root": str(root)}}, mirrors)
    spec = {"source": "torchvision", "name": "squeezenet1_1.IMAGENET1K_V1"}
    # not the real file: its sha256 does not start with the file name's b8a52dc0
    with pytest.raises(ChecksumError):
        run("torchvision", "fish", "sq", spec, config, tmp_path / "sq.npz")
    spec["sha256"] = sha256_hex(data)  # a full pin of the user's own overrides the file name's prefix
    archive = run("torchvision", "fish", "sq", spec, config, tmp_path / "sq.npz")
    assert archive.logits.shape == (4, 2) and archive.metadata["output_columns"] == [1, 0]  # goldfish, tench
    assert archive.metadata["weights"]["sha256"] == sha256_hex(data)
    assert archive.metadata["preprocessing"]["torchvision_transforms"]["crop_size"] == [224]
    assert rewrite_url("https://download.pytorch.org/models/x.pth", mirrors).startswith(file_server.base)


# ------------------------------------------------------------------------------ checkpoints


def test_checkpoint_of_an_architecture_and_of_another_one(tmp_path):
    import timm

    torch.manual_seed(0)
    net = timm.create_model("test_efficientnet", num_classes=3).eval()
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, tmp_path / "mine.pth")
    root = write_folder(tmp_path / "shapes", {"a": 2, "b": 2, "c": 1})
    config = settings(tmp_path, {"shapes": {"source": "imagefolder", "root": str(root)}})
    spec = {"source": "checkpoint", "architecture": "test_efficientnet", "path": str(tmp_path / "mine.pth"),
            "preprocessing": {"input_size": [3, 32, 32], "crop_pct": 1.0}}
    archive = run("checkpoint", "shapes", "mine", spec, config, tmp_path / "mine.npz")
    assert archive.logits.shape == (5, 3) and archive.metadata["preprocessing"]["data_config"]["input_size"] == [3, 32, 32]
    assert archive.metadata["weights"]["sha256"] == sha256_hex((tmp_path / "mine.pth").read_bytes())

    wrong = {**spec, "architecture": "test_resnet"}
    with pytest.raises(ModelSourceError, match=r"do not fit test_resnet: \d+ missing keys \(.*\), \d+ unexpected keys"):
        run("checkpoint", "shapes", "wrong", wrong, config, tmp_path / "wrong.npz")
    assert not (tmp_path / "wrong.npz").exists()
    with pytest.raises(ModelSourceError, match="neither timm nor torchvision has an architecture 'test_efficientnett'"):
        get_source("checkpoint").check("shapes", "m", {**spec, "architecture": "test_efficientnett"}, config)


def test_config_declares_image_folders_and_named_models():
    from calibrepro.config import ConfigError, load_schema, validate_config
    from servers import REPO_ROOT

    schema = load_schema(REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml")
    config = {
        "datasets": {"shapes": {"source": "imagefolder", "root": "data/shapes", "class_map": {"a": 3}}},
        "models": {"shapes": {"r18": {"source": "checkpoint", "architecture": "resnet18", "path": "w.pth"},
                              "cx": {"source": "timm", "name": "convnext_tiny.fb_in22k_ft_in1k"},
                              "r50": {"source": "torchvision", "name": "resnet50.IMAGENET1K_V2"}}},
    }
    validated = validate_config(config, schema)
    assert validated["datasets"]["shapes"]["root"] == "data/shapes" and validated["inference"]["preprocessing"] == "batched"
    config["datasets"]["shapes"].pop("root")
    with pytest.raises(ConfigError, match="datasets.shapes: 'root' is a required property"):
        validate_config(config, schema)


def test_an_unreadable_image_is_named(tmp_path):
    import timm

    torch.manual_seed(0)
    torch.save(timm.create_model("test_resnet", num_classes=2).state_dict(), tmp_path / "w.pth")
    root = write_folder(tmp_path / "shapes", {"a": 2, "b": 2})
    (root / "b" / "broken.png").write_bytes(b"not a png")
    config = settings(tmp_path, {"shapes": {"source": "imagefolder", "root": str(root)}})
    config["inference"]["workers"] = 1  # the error comes back from a DataLoader worker
    spec = {"source": "checkpoint", "architecture": "test_resnet", "path": str(tmp_path / "w.pth"),
            "preprocessing": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}
    with pytest.raises(DatasetError, match=r"^\S*broken.png: not a readable image .*replace or remove the file$"):
        run("checkpoint", "shapes", "m", spec, config, tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()


def test_mc_dropout_of_a_network_by_name(tmp_path):
    """A checkpoint of a torchvision architecture with dropout takes mc_dropout (seeded by mc_seed); one without refuses."""
    import timm
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.squeezenet1_1(num_classes=3).eval()  # classifier dropout p = 0.5
    torch.save(net.state_dict(), tmp_path / "squeezenet.pth")
    root = write_folder(tmp_path / "shapes", {"a": 2, "b": 2, "c": 2}, size=32)
    config = settings(tmp_path, {"shapes": {"source": "imagefolder", "root": str(root)}})
    spec = {"source": "checkpoint", "architecture": "squeezenet1_1", "path": str(tmp_path / "squeezenet.pth"),
            "preprocessing": {"mean": [0.5] * 3, "std": [0.25] * 3}}
    plain = run("checkpoint", "shapes", "plain", spec, config, tmp_path / "plain.npz")
    mc = run("checkpoint", "shapes", "mc", {**spec, "mc_dropout": 6}, config, tmp_path / "mc.npz")
    again = run("checkpoint", "shapes", "mc", {**spec, "mc_dropout": 6}, config, tmp_path / "again.npz")
    other = run("checkpoint", "shapes", "mc", {**spec, "mc_dropout": 6, "mc_seed": 1}, config, tmp_path / "other.npz")
    assert plain.metadata["variant"] == {} and mc.metadata["variant"] == {"mc_dropout": 6, "mc_seed": 0, "batch_size": 4}
    assert mc.logits.tobytes() == again.logits.tobytes()
    assert not np.allclose(mc.logits, plain.logits) and not np.allclose(mc.logits, other.logits)
    assert np.allclose(np.exp(mc.logits.astype(np.float64)).sum(axis=1), 1, atol=1e-5)  # log of a mean softmax

    # timm builds its head with drop rate 0 by default: no dropout layer of a positive rate
    torch.save(timm.create_model("test_efficientnet", num_classes=3).state_dict(), tmp_path / "eff.pth")
    none = {"source": "checkpoint", "architecture": "test_efficientnet", "path": str(tmp_path / "eff.pth"),
            "preprocessing": {"input_size": [3, 32, 32], "crop_pct": 1.0}, "mc_dropout": 6}
    with pytest.raises(ModelSourceError, match="models.shapes.eff.mc_dropout: this network has no dropout layers"):
        run("checkpoint", "shapes", "eff", none, config, tmp_path / "eff.npz")
    assert not (tmp_path / "eff.npz").exists()
