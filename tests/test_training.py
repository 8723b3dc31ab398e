"""Networks the pipeline trains (source ``train``): data, determinism, stochastic predictions, the cache."""

from __future__ import annotations

import gzip
import hashlib
import zipfile

import numpy as np
import pytest
import torch

from calibrepro.averaging import log_mean_softmax
from calibrepro.datasets import DatasetError, read_cifar_train
from calibrepro.download import ChecksumError, fetch
from calibrepro.io import load_logits
from calibrepro.training import bayes, data, trainer
from calibrepro.training.networks import build, has_dropout
from calibrepro.zoo import LogitsRequest, ModelSourceError, get_source
from calibrepro.zoo.train import check_entry
from servers import REALDATA, cifar_tarball_bytes, md5_hex, random_cifar

CPU = torch.device("cpu")


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file (uint8) as LeCun et al. define it, gzip-compressed."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes(), mtime=0)


def fake_mnist(folder, train: int = 96, test: int = 40, seed: int = 0) -> dict[str, str]:
    """Write the four MNIST files with generated images (class = a bright row band); return the request's files."""
    rng = np.random.default_rng(seed)
    files = {}
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        for i, label in enumerate(labels):
            images[i, 2 * label + 4 : 2 * label + 7] = 250
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            path = folder / f"{prefix}-{kind}-ubyte.gz"
            path.write_bytes(idx_bytes(array))
            files[f"datasets/mnist/{path.name}"] = str(path)
    return files


def tiny_parts(shape=(1, 28, 28), n=64, seed=0) -> data.Parts:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, 10, n)
    return data.Parts(x[: n // 2], y[: n // 2], x[n // 2 :], y[n // 2 :], 10, {"generated": seed})


# --------------------------------------------------------------------------------------------- data


@pytest.mark.skipif(not (REALDATA / "mnist").is_dir(), reason="needs ../shared/realdata/mnist")
def test_idx_parser_reads_the_real_mnist_test_set():
    images_file, labels_file = REALDATA / "mnist/t10k-images-idx3-ubyte.gz", REALDATA / "mnist/t10k-labels-idx1-ubyte.gz"
    for path in (images_file, labels_file):  # the files are the published ones
        assert hashlib.md5(path.read_bytes()).hexdigest() == data.MNIST_FILES[path.name]
    images, labels = data.read_mnist(images_file, labels_file)
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8 and images.max() == 255
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]  # the first test digits
    assert np.bincount(labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_idx_parser_rejects_truncated_and_foreign_files(tmp_path):
    good = idx_bytes(np.zeros((3, 28, 28)))
    (tmp_path / "short.gz").write_bytes(gzip.compress(gzip.decompress(good)[:-5]))
    with pytest.raises(DatasetError, match="short.gz: 2363 bytes, expected 2368"):
        data.read_idx(tmp_path / "short.gz")
    (tmp_path / "text.gz").write_bytes(gzip.compress(b"<html>moved</html>"))
    with pytest.raises(DatasetError, match="text.gz: not an IDX file"):
        data.read_idx(tmp_path / "text.gz")


def test_mnist_download_from_a_local_server_checks_the_published_md5(file_server, tmp_path):
    """The real test files pass their published checksum; a substituted training file is refused and deleted."""
    downloads = {d.path.rsplit("/", 1)[1]: d for d in data.downloads("mnist")}
    mirrors = {data.MNIST_URL: file_server.url("/mnist/")}
    substitute = idx_bytes(np.zeros((2, 28, 28)))
    file_server.add_file("/mnist/train-images-idx3-ubyte.gz", substitute)
    with pytest.raises(ChecksumError, match="train-images-idx3-ubyte.gz.*expected md5:f68b3c2dcbeaaa9fbdd348bbdeb94873"):
        fetch(downloads["train-images-idx3-ubyte.gz"], tmp_path / "train.gz", mirrors=mirrors, retries=0, progress=False)
    assert not (tmp_path / "train.gz").exists()
    if not (REALDATA / "mnist").is_dir():
        pytest.skip("needs ../shared/realdata/mnist for the files with the published checksums")
    file_server.mount("/mnist/", REALDATA / "mnist")
    name = "t10k-labels-idx1-ubyte.gz"
    fetch(downloads[name], tmp_path / name, mirrors=mirrors, retries=0, progress=False)
    assert md5_hex((tmp_path / name).read_bytes()) == data.MNIST_FILES[name]


def test_cifar_training_batches_are_read_in_order(tmp_path):
    test_images, test_labels = random_cifar(7, 10, seed=1)
    train_images, train_labels = random_cifar(23, 10, seed=2)
    tarball = tmp_path / "cifar-10-python.tar.gz"
    tarball.write_bytes(cifar_tarball_bytes("cifar10", test_images, test_labels, train=(train_images, train_labels)))
    images, labels = read_cifar_train(tarball, "cifar10")
    assert np.array_equal(images, train_images) and np.array_equal(labels, train_labels)
    parts = data.load("cifar10", {"datasets/cifar-10-python.tar.gz": str(tarball)}, {})
    assert parts.x_train.shape == (23, 3, 32, 32) and parts.x_eval.shape == (7, 3, 32, 32)
    # standardised by the training images' channel statistics
    assert np.allclose(parts.x_train.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    assert np.allclose(parts.x_train.std(axis=(0, 2, 3)), 1, atol=1e-4)


def test_cifar100_trains_on_its_official_training_part(tmp_path):
    test_images, test_labels = random_cifar(5, 100, seed=3)
    train_images, train_labels = random_cifar(11, 100, seed=4)
    tarball = tmp_path / "cifar-100-python.tar.gz"
    tarball.write_bytes(cifar_tarball_bytes("cifar100", test_images, test_labels, train=(train_images, train_labels)))
    [download] = data.downloads("cifar100")
    parts = data.load("cifar100", {download.path: str(tarball)}, {})
    assert parts.num_classes == 100 and np.array_equal(parts.y_train, train_labels)
    assert np.array_equal(parts.y_eval, test_labels) and parts.x_eval.shape == (5, 3, 32, 32)


# ----------------------------------------------------------------------------------------- training


def test_one_epoch_on_generated_data_is_deterministic():
    parts = tiny_parts()
    options = {**trainer.DEFAULTS, "network": "lenet5", "epochs": 1, "batch_size": 8, "dropout": 0.3,
               "optimiser": "sgd", "learning_rate": 0.01, "augmentation": "crop_flip"}  # fmt: skip
    first, history = trainer.train(parts, options, CPU)
    second, _ = trainer.train(parts, options, CPU)
    assert len(history) == 1 and history[0]["loss"] > 0
    assert trainer.forward(first, parts.x_eval, CPU).tobytes() == trainer.forward(second, parts.x_eval, CPU).tobytes()
    other, _ = trainer.train(parts, {**options, "seed": 1}, CPU)
    assert trainer.forward(other, parts.x_eval, CPU).tobytes() != trainer.forward(first, parts.x_eval, CPU).tobytes()


def test_mc_dropout_average():
    parts = tiny_parts(shape=(64,))
    network, _ = trainer.train(parts, {**trainer.DEFAULTS, "hidden": [32], "dropout": 0.5, "epochs": 1}, CPU)
    assert has_dropout(network)
    plain = trainer.forward(network, parts.x_eval, CPU)
    # T = 1 with dropout off is the plain network (as log-probabilities)
    off = trainer.stochastic_logits(network, parts.x_eval, 1, seed=0, device=CPU, dropout=False)
    expected = torch.log_softmax(torch.from_numpy(plain).double(), dim=1).numpy()
    assert np.allclose(off, expected, atol=1e-6)
    # with dropout on, passes differ; T passes average their softmax; the same seed gives the same bytes
    one = trainer.stochastic_logits(network, parts.x_eval, 1, seed=0, device=CPU)
    other = trainer.stochastic_logits(network, parts.x_eval, 1, seed=1, device=CPU)
    assert not np.allclose(one, other)
    five = trainer.stochastic_logits(network, parts.x_eval, 5, seed=0, device=CPU)
    assert five.tobytes() == trainer.stochastic_logits(network, parts.x_eval, 5, seed=0, device=CPU).tobytes()
    assert np.allclose(np.exp(five).sum(axis=1), 1, atol=1e-5)
    assert not network.training and not any(m.training for m in network.modules())  # dropout switched off again


def test_bayesian_kl_matches_its_closed_form():
    mu, sigma = torch.randn(50, dtype=torch.float64), torch.rand(50, dtype=torch.float64) + 0.1
    reference = torch.distributions.kl_divergence(
        torch.distributions.Normal(mu, sigma), torch.distributions.Normal(torch.zeros(50), torch.full((50,), 0.5))
    ).sum()
    assert float(bayes.gaussian_kl(mu, sigma, 0.5)) == pytest.approx(float(reference), rel=1e-12)
    layer = bayes.BayesLinear(4, 3, prior_sigma=0.5)
    sp = torch.nn.functional.softplus
    expected = sum(
        float(torch.distributions.kl_divergence(torch.distributions.Normal(m, sp(r)), torch.distributions.Normal(0.0, 0.5)).sum().detach())
        for m, r in ((layer.weight_mu, layer.weight_rho), (layer.bias_mu, layer.bias_rho))
    )
    assert float(bayes.kl_divergence(torch.nn.Sequential(layer, torch.nn.ReLU())).detach()) == pytest.approx(expected, rel=1e-6)
    # the sampled weights follow the posterior: mean mu, sd softplus(rho)
    torch.manual_seed(0)
    draws = torch.stack([layer.draw()[0] for _ in range(4000)])
    assert torch.allclose(draws.mean(0), layer.weight_mu, atol=5 * 0.0067 / 60)
    assert torch.allclose(draws.std(0), sp(layer.weight_rho), rtol=0.1)


def test_bayesian_lenet_trains_on_the_elbo_and_its_draws_differ():
    parts = tiny_parts()
    options = {**trainer.DEFAULTS, "network": "bayes_lenet5", "epochs": 1, "batch_size": 16}
    network, history = trainer.train(parts, options, CPU)
    assert history[0]["loss"] > float(bayes.kl_divergence(network)) / len(parts.y_train) > 0
    one = trainer.stochastic_logits(network, parts.x_eval, 1, seed=0, device=CPU, dropout=False)
    two = trainer.stochastic_logits(network, parts.x_eval, 1, seed=1, device=CPU, dropout=False)
    assert not np.array_equal(one, two)


# ------------------------------------------------------------------------------------------ source


def mnist_request(tmp_path, spec, files):
    settings = {"datasets": {}, "downloads": {"dir": str(tmp_path / "downloads")}, "inference": {"device": "cpu"}}
    return LogitsRequest("mnist", "m", {"source": "train", **spec}, settings, files)


def test_source_trains_caches_and_combines(tmp_path, capfd):
    files = fake_mnist(tmp_path)
    source = get_source("train")
    assert [d.path for d in source.downloads("mnist", "m", {}, {})] == list(files)
    spec = {"network": "lenet5", "epochs": 2, "batch_size": 16, "dropout": 0.2}
    source.cache_logits(mnist_request(tmp_path, spec, files), tmp_path / "a.npz")
    assert "mnist/m: epoch 2/2: loss" in capfd.readouterr().err  # progress per epoch in the log
    first = load_logits(tmp_path / "a.npz")
    assert first.logits.shape == (40, 10)
    record = first.metadata["training"][0]
    assert [e["epoch"] for e in record["history"]] == [1, 2] and "from_cache" not in record  # same bytes either way
    assert first.metadata["top1_accuracy"] == pytest.approx(np.mean(first.logits.argmax(1) == first.labels))
    weights = torch.load(record["weights"], weights_only=True)
    assert weights["architecture"] == "lenet5"
    # a rerun takes the cached weights: the same logits, no training
    source.cache_logits(mnist_request(tmp_path, spec, files), tmp_path / "b.npz")
    again = load_logits(tmp_path / "b.npz")
    assert again.logits.tobytes() == first.logits.tobytes() and again.metadata["training"] == first.metadata["training"]
    err = capfd.readouterr().err
    assert "epoch 1/2" not in err and "weights from the cache" in err
    # the MC-Dropout variant reuses the same weights
    source.cache_logits(mnist_request(tmp_path, {**spec, "mc_dropout": 4}, files), tmp_path / "mc.npz")
    mc = load_logits(tmp_path / "mc.npz")
    assert mc.metadata["training"][0]["weights"] == record["weights"] and mc.metadata["variant"] == {"mc_dropout": 4}
    assert not np.allclose(mc.logits, first.logits)
    # an ensemble of 2 = the log-mean-softmax of the networks of seeds 0 and 1
    source.cache_logits(mnist_request(tmp_path, {**spec, "seed": 1}, files), tmp_path / "s1.npz")
    capfd.readouterr()
    source.cache_logits(mnist_request(tmp_path, {**spec, "ensemble": 2}, files), tmp_path / "ens.npz")
    ensemble = load_logits(tmp_path / "ens.npz")
    expected = log_mean_softmax([first.logits, load_logits(tmp_path / "s1.npz").logits]).astype(np.float32)
    assert ensemble.logits.tobytes() == expected.tobytes()
    assert "epoch 1/2" not in capfd.readouterr().err  # both members from the cache


def test_a_cached_file_of_another_architecture_is_named(tmp_path):
    files = fake_mnist(tmp_path)
    spec = {"network": "lenet5", "epochs": 1, "batch_size": 32}
    request = mnist_request(tmp_path, spec, files)
    source = get_source("train")
    source.cache_logits(request, tmp_path / "a.npz")
    path = load_logits(tmp_path / "a.npz").metadata["training"][0]["weights"]
    mlp = build("mlp", (1, 28, 28), 10, {"hidden": [8]})
    trainer.save_weights(type(tmp_path)(path), mlp, {**trainer.DEFAULTS, "hidden": [8]}, [])
    with pytest.raises(trainer.TrainingError, match=f"{path}: cached weights of network 'mlp', not 'lenet5'; delete it"):
        source.cache_logits(request, tmp_path / "b.npz")


def test_the_same_training_caches_the_same_bytes(tmp_path):
    """The weights cache holds no trace of the temporary file it was written through (issue 40)."""
    files = fake_mnist(tmp_path)
    spec = {"network": "lenet5", "epochs": 1, "batch_size": 32}
    caches = []
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        get_source("train").cache_logits(mnist_request(tmp_path / run, spec, files), tmp_path / run / "a.npz")
        (cache,) = (tmp_path / run / "downloads" / "trained").rglob("*.pt")
        caches.append(cache)
    assert caches[0].name == caches[1].name and caches[0].read_bytes() == caches[1].read_bytes()
    with zipfile.ZipFile(caches[0]) as archive:
        assert {name.split("/")[0] for name in archive.namelist()} == {"archive"}
    # the writer itself: one network saved under two names
    mlp = build("mlp", (1, 28, 28), 10, {"hidden": [8]})
    options = {**trainer.DEFAULTS, "hidden": [8]}
    trainer.save_weights(tmp_path / "a.pt", mlp, options, [{"epoch": 1}])
    trainer.save_weights(tmp_path / "sub" / "other-name.pt", mlp, options, [{"epoch": 1}])
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "sub" / "other-name.pt").read_bytes()


@pytest.mark.parametrize(
    "dataset, spec, message",
    [
        ("imagenet", {}, "models.imagenet.m: source 'train' trains on the data sets digits, mnist, cifar10, cifar100 or on a folder of images"),
        ("mnist", {"network": "resnet"}, "models.mnist.m.network: unknown network 'resnet'"),
        ("digits", {"network": "lenet5"}, "models.digits.m.network: lenet5 needs images"),
        ("mnist", {"network": "lenet5", "mc_dropout": 10}, "models.mnist.m.mc_dropout: network lenet5 of this entry has no dropout"),
        ("mnist", {"network": "lenet5", "samples": 10}, "models.mnist.m.samples: weight samples need a Bayesian network"),
        ("mnist", {"network": "lenet5", "ensemble": 0}, "models.mnist.m.ensemble: must be an integer >= 1, not 0"),
        ("mnist", {"network": "bayes_lenet5", "dropout": 0.5}, "models.mnist.m.dropout: the Bayesian network"),
    ],
)
def test_bad_entries_name_their_key(dataset, spec, message):
    with pytest.raises(ModelSourceError, match=message):
        check_entry(dataset, "m", {"source": "train", **spec}, {})


# ------------------------------------------------------------------------------ pretrained networks


class _TinyPretrained:
    """A pretrained source of one CIFAR-10 network built here (with or without a dropout layer)."""

    @staticmethod
    def make(dropout: float):
        from calibrepro.download import Download
        from calibrepro.zoo._pretrained import Pin, PretrainedSource

        class Tiny(PretrainedSource):
            name = "tiny"
            PINS = {("cifar10", "net"): Pin("cifar10", "net", "net", Download("http://x/w.pt", "sha256:" + "0" * 64, "w.pt"),
                                            10, {"mean": [0.5] * 3, "std": [0.25] * 3}, "MIT")}  # fmt: skip

            def build(self, pin, files, pretrained=True):
                torch.manual_seed(0)
                layers = [torch.nn.Flatten(), torch.nn.Linear(3072, 32), torch.nn.ReLU()]
                return torch.nn.Sequential(*layers, *([torch.nn.Dropout(dropout)] if dropout else []), torch.nn.Linear(32, 10)).eval()

        return Tiny()


def test_pretrained_networks_with_dropout_take_mc_dropout(tmp_path):
    images, labels = random_cifar(30, 10, seed=3)
    tarball = tmp_path / "cifar.tar.gz"
    tarball.write_bytes(cifar_tarball_bytes("cifar10", images, labels))
    (tmp_path / "w.pt").write_bytes(b"")
    files = {"w.pt": str(tmp_path / "w.pt"), "datasets/cifar-10-python.tar.gz": str(tarball)}
    settings = {"inference": {"device": "cpu", "workers": 0, "batch_size": 8}}

    def run(source, spec, name, preprocessing="batched"):
        config = {"inference": {**settings["inference"], "preprocessing": preprocessing}}
        source.cache_logits(LogitsRequest("cifar10", "net", {"source": "tiny", **spec}, config, files), tmp_path / name)
        return load_logits(tmp_path / name)

    with_dropout = _TinyPretrained.make(0.5)
    plain, mc = run(with_dropout, {}, "plain.npz"), run(with_dropout, {"mc_dropout": 8}, "mc.npz")
    assert mc.metadata["variant"] == {"mc_dropout": 8, "mc_seed": 0, "batch_size": 8}
    assert not np.allclose(mc.logits, plain.logits)
    assert np.allclose(np.exp(mc.logits.astype(np.float64)).sum(axis=1), 1, atol=1e-5)
    assert run(with_dropout, {"mc_dropout": 8}, "again.npz").logits.tobytes() == mc.logits.tobytes()
    other = run(with_dropout, {"mc_dropout": 8, "mc_seed": 1}, "other.npz")
    assert other.metadata["variant"]["mc_seed"] == 1 and not np.allclose(other.logits, mc.logits)
    # the reference path (torchvision transforms in a DataLoader) draws the same masks for the same inputs
    reference = run(with_dropout, {"mc_dropout": 8}, "reference.npz", preprocessing="reference")
    assert np.allclose(reference.logits, mc.logits, rtol=0, atol=1e-6)
    with pytest.raises(ModelSourceError, match="models.cifar10.net.mc_dropout: tiny's net has no dropout layers"):
        run(_TinyPretrained.make(0.0), {"mc_dropout": 8}, "none.npz")
    # before any job starts: the pins say which networks have dropout layers
    spec = {"source": "chenyaofo", "name": "resnet20", "mc_dropout": 10}
    with pytest.raises(ModelSourceError, match="models.cifar10.r20.mc_dropout: chenyaofo's resnet20 has no dropout layers"):
        get_source("chenyaofo").check("cifar10", "r20", spec, {})
    get_source("chenyaofo").check("cifar10", "v", {**spec, "name": "vgg16_bn"}, {})
    with pytest.raises(ModelSourceError, match="models.cifar10.v.mc_seed: seeds MC-Dropout's masks; set mc_dropout"):
        get_source("chenyaofo").check("cifar10", "v", {"source": "chenyaofo", "name": "vgg16_bn", "mc_seed": 3}, {})


def test_pinned_dropout_rates_match_the_original_code():
    """What ``calibrepro models`` says about dropout layers, checked against chenyaofo's code (one model per family)."""
    from servers import original_code_dir

    from calibrepro.zoo.chenyaofo import PINS, load_hub_model

    root = original_code_dir()
    if root is None or not (root / "chenyaofo/pytorch-cifar-models/hubconf.py").is_file():
        pytest.skip("needs the original code (CALIBREPRO_ORIGINAL_CODE_DIR)")
    for name in ("resnet20", "vgg11_bn", "mobilenetv2_x0_5", "shufflenetv2_x0_5", "repvgg_a0"):
        pin = PINS[("cifar10", name)]
        network = load_hub_model(root / "chenyaofo/pytorch-cifar-models", pin.architecture)
        rates = {m.p for m in network.modules() if isinstance(m, torch.nn.Dropout)}
        assert has_dropout(network) == (pin.dropout > 0) and rates <= {pin.dropout}, name


def test_blog_config_is_valid_and_every_trained_model_can_be_trained():
    import yaml

    from calibrepro.config import load_schema, validate_config
    from calibrepro.report.published import load_published
    from servers import REPO_ROOT

    config = validate_config(
        yaml.safe_load((REPO_ROOT / "config/blog.yaml").read_text()), load_schema(REPO_ROOT / "workflow/schemas/config.schema.yaml")
    )
    for dataset, entries in config["models"].items():
        for model, spec in entries.items():
            check_entry(dataset, model, spec, config)
    published = load_published(REPO_ROOT / config["report"]["published"])
    assert set(zip(published["dataset"], published["model"])) <= {(d, m) for d, e in config["models"].items() for m in e}
    assert [d.path for d in get_source("train").downloads("mnist", "lenet5", {}, {})] == [
        f"datasets/mnist/{name}" for name in data.MNIST_FILES
    ]
