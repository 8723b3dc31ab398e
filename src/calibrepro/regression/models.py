"""Regressors with predictive uncertainty (torch): MC-Dropout, its heteroscedastic variant, deep ensembles, evidential.

Each kind is trained on standardised inputs and targets (statistics of the training part only, as
in the UCI protocol of Hernández-Lobato & Adams 2015) and returns, for every test input and every
output (one for a table, ten forecast hours for a time series), the parameters of its predictive
distribution in the target's units (:class:`Predictive`):

- ``mc_dropout`` (Gal & Ghahramani 2016, sec. 4 and eq. 8): one hidden layer of ReLU units with
  dropout before the hidden and the output layer, trained by the squared error with weight decay;
  at test time T stochastic passes f_1(x) ... f_T(x).  ``noise`` says what the predictive adds to them:

  * ``fitted`` (default): the uniform mixture of the T Gaussians N(f_t(x), 1/tau) (a Gaussian
    mixture: its moments are Gal's predictive mean and variance, eq. 8), where tau is the model
    precision: ``tau`` from the config, or the maximum-likelihood estimate from the training
    residuals of the MC mean (Gal & Ghahramani grid-searched tau on a validation part; this keeps
    every training sample for training);
  * ``none``: the seed's model, which "does not measure the aleatoric uncertainty": the Gaussian
    with the passes' mean and variance, ``(1/T) sum_t f_t`` and ``(1/T) sum_t f_t^2 - mean^2`` (eq. 8
    without the 1/tau term; the seed assumes a normal predictive given its mean and variance).  Its
    spread is the epistemic one alone, so it is overconfident (the seed's tables); where all T passes
    agree (no dropout) it is a point mass.
- ``aleatoric``: the same network with a second output per target, the log-variance through a
  softplus, trained by the Gaussian NLL (Nix & Weigend 1994; Kendall & Gal 2017, eq. 5); the
  predictive is the uniform mixture of the T Gaussians N(mu_t(x), sigma_t(x)^2).
- ``ensemble`` (Lakshminarayanan et al. 2017, sec. 2.3-2.4): M heteroscedastic networks (no
  dropout) from different seeds, each trained by the Gaussian NLL (their eq. 1); the predictive is
  the uniform mixture of the M Gaussians (their eq. after Algorithm 1). The optional adversarial
  training of the paper is not used.
- ``evidential`` (Amini et al. 2020): outputs (gamma, nu, alpha, beta) of a Normal-Inverse-Gamma,
  trained by its NLL (their eq. 8) plus lambda times |y - gamma| (2 nu + alpha) (eq. 9-10); the
  predictive is the NIG's marginal, a Student-t with 2 alpha degrees of freedom, location gamma
  and scale^2 = beta (1 + nu) / (nu alpha) (their eq. 7): heavier tails than a Gaussian, exact.

Training is seeded (initialisation, batch order, dropout masks all from the member's seed) and
runs on one CPU thread, so equal seeds give byte-identical predictions on the CPU; with
``device: auto`` a GPU is used when present (then reruns agree to rounding only).
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from calibrepro import portable
from calibrepro.determinism import seeded, torch_threads

#: regressor kind -> its default options (the config schema documents each key)
COMMON = {
    "hidden": 50,  # one hidden layer of 50 units (Gal & Ghahramani 2016; Lakshminarayanan et al. 2017)
    "epochs": 40,  # 40 epochs on UCI (Hernández-Lobato & Adams 2015; Gal & Ghahramani 2016)
    "batch_size": 100,  # Lakshminarayanan et al. 2017, UCI experiments
    "learning_rate": 0.01,
    "weight_decay": 0.0,
    "device": "cpu",  # or "auto": the GPU when torch sees one
}
DEFAULTS = {
    "mc_dropout": {**COMMON, "dropout": 0.05, "passes": 100, "noise": "fitted", "tau": None, "weight_decay": 1e-4},
    "aleatoric": {**COMMON, "dropout": 0.05, "passes": 100, "weight_decay": 1e-4},
    "ensemble": {**COMMON, "members": 5},
    "evidential": {**COMMON, "regulariser": 0.01},
}
KINDS = tuple(DEFAULTS)

#: smallest predicted standard deviation, in standardised units (keeps the Gaussian NLL finite)
_MIN_STD = 1e-6


class RegressorError(ValueError):
    """A regressor's options or training data are unusable; the message says which and what to do."""


@dataclass
class Predictive:
    """The predictive distributions of n inputs x d outputs, in the target's units.

    ``family``: ``"gaussian_mixture"`` (``means``, ``stds``: (n, d, k), uniform weights) or
    ``"student_t"`` (``loc``, ``scale``, ``df``: (n, d)). ``info``: what training recorded (JSON-able).
    """

    family: str
    params: dict[str, np.ndarray]
    info: dict = field(default_factory=dict)


@contextmanager
def _seeded_torch(seed: int):
    """One CPU thread and the global torch RNG (layer initialisation, dropout) set to ``seed``, restored after."""
    with torch_threads(1), seeded(seed):
        yield


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RegressorError(f"device {name!r}: torch sees no GPU here; use device: cpu or auto")
    return torch.device(name)


class _Standardiser:
    """z-scores with the training part's mean and standard deviation (1 where a column is constant)."""

    def __init__(self, values: np.ndarray):
        self.mean = values.mean(axis=0)
        std = values.std(axis=0)
        self.std = np.where(std > 0, std, 1.0)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.std


def _network(inputs: int, hidden: int, outputs: int, dropout: float) -> nn.Sequential:
    """Dropout before the hidden and the output layer (Gal & Ghahramani 2016's UCI network)."""
    layers: list[nn.Module] = []
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    layers += [portable.Linear(inputs, hidden), nn.ReLU()]
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    layers.append(portable.Linear(hidden, outputs))
    return nn.Sequential(*layers)


def _gaussian_nll(mean, std, y):
    """Mean Gaussian negative log-likelihood without the constant (Nix & Weigend 1994)."""
    return (torch.log(std) + 0.5 * ((y - mean) / std) ** 2).mean()


def _heteroscedastic(output, targets: int):
    """Split a network's output into the mean and the standard deviation (softplus of the second half)."""
    mean, raw = output[:, :targets], output[:, targets:]
    return mean, functional.softplus(raw) + _MIN_STD


def _nig(output, targets: int):
    """(gamma, nu, alpha, beta) of the Normal-Inverse-Gamma: nu, beta > 0, alpha > 1 (Amini et al. 2020, sec. 3)."""
    gamma, nu, alpha, beta = output.split(targets, dim=1)
    return (
        gamma,
        functional.softplus(nu) + _MIN_STD,
        functional.softplus(alpha) + 1.0,
        functional.softplus(beta) + _MIN_STD,
    )


def nig_loss(gamma, nu, alpha, beta, y, regulariser: float):
    """Amini et al. 2020, eq. 8 (NIG NLL) + lambda * eq. 9 (|y - gamma| (2 nu + alpha)), averaged."""
    omega = 2.0 * beta * (1.0 + nu)
    nll = (
        0.5 * torch.log(math.pi / nu)
        - alpha * torch.log(omega)
        + (alpha + 0.5) * torch.log(nu * (y - gamma) ** 2 + omega)
        + torch.lgamma(alpha)
        - torch.lgamma(alpha + 0.5)
    )
    return (nll + regulariser * (y - gamma).abs() * (2.0 * nu + alpha)).mean()


def _train(network, loss_of, x, y, opts: dict, seed: int, logger: logging.Logger, what: str) -> None:
    """Adam on minibatches in a seeded order; logs the loss every tenth of the epochs."""
    generator = torch.Generator().manual_seed(seed)
    optimiser = portable.adam(network.parameters(), lr=opts["learning_rate"], weight_decay=opts["weight_decay"])
    network.train()
    start, every = time.perf_counter(), max(1, opts["epochs"] // 10)
    for epoch in range(1, opts["epochs"] + 1):
        order = torch.randperm(len(y), generator=generator).to(x.device)
        total = 0.0
        for batch in order.split(opts["batch_size"]):
            optimiser.zero_grad()
            loss = loss_of(network(x[batch]), y[batch])
            loss.backward()
            optimiser.step()
            total += loss.item() * len(batch)
        if epoch % every == 0 or epoch == opts["epochs"]:
            logger.info(
                "%s: epoch %d/%d, loss %.4f (%.1f s)",
                what,
                epoch,
                opts["epochs"],
                total / len(y),
                time.perf_counter() - start,
            )


def _mc_passes(network, x, passes: int) -> torch.Tensor:
    """T stochastic forward passes with dropout on: (T, n, outputs)."""
    network.train()  # dropout stays on at test time (Gal & Ghahramani 2016, sec. 3)
    with torch.no_grad():
        return torch.stack([network(x) for _ in range(passes)])


#: what ``mc_dropout``'s ``noise`` may be (module docstring)
NOISE = ("fitted", "none")


def kind_of(name: str, options: dict | None) -> str:
    """A configured regressor's kind: its ``kind`` option, else its name (``models: {mc_dropout: {}}``)."""
    return (options or {}).get("kind", name)


def options_for(kind: str, options: dict | None) -> dict:
    """The kind's defaults updated by ``options`` (less ``kind``); unknown kinds, keys or values stop with a message."""
    if kind not in DEFAULTS:
        raise RegressorError(f"unknown regressor {kind!r}; choose one of {', '.join(KINDS)}")
    options = {key: value for key, value in (options or {}).items() if key != "kind"}
    unknown = sorted(set(options) - set(DEFAULTS[kind]))
    if unknown:
        raise RegressorError(f"{kind}: unknown option(s) {unknown}; allowed: {sorted(DEFAULTS[kind])}")
    opts = {**DEFAULTS[kind], **options}
    if kind == "mc_dropout":
        if opts["noise"] not in NOISE:
            raise RegressorError(f"mc_dropout: noise must be one of {', '.join(NOISE)}, got {opts['noise']!r}")
        if opts["noise"] == "none" and opts["tau"] is not None:
            raise RegressorError("mc_dropout: tau is the noise term's precision; with noise: none leave tau out")
    return opts


def fit_predict(
    name: str,
    x_train,
    y_train,
    x_test,
    options: dict | None = None,
    *,
    seed: int = 0,
    logger: logging.Logger | None = None,
) -> Predictive:
    """Train the regressor ``name`` (its kind: :func:`kind_of`) on ``(x_train, y_train)``; its predictive
    distributions for ``x_test``.

    ``x_*``: (n, p) features; ``y_train``: (n,) or (n, d) targets. The returned parameters have shape
    (n_test, d[, k]) in the target's units.
    """
    kind = kind_of(name, options)
    opts = options_for(kind, options)
    logger = logger or logging.getLogger(__name__)
    x_train, x_test = np.asarray(x_train, np.float64), np.asarray(x_test, np.float64)
    y_train = np.asarray(y_train, np.float64)
    y_train = y_train[:, None] if y_train.ndim == 1 else y_train
    if len(x_train) < 2 or len(x_train) != len(y_train):
        raise RegressorError(
            f"{kind}: needs at least 2 training samples with one target row each "
            f"(got {len(x_train)} inputs, {len(y_train)} targets)"
        )
    scale_x, scale_y = _Standardiser(x_train), _Standardiser(y_train)
    device = _device(opts["device"])
    tensor = lambda a: torch.as_tensor(a, dtype=torch.float32, device=device)  # noqa: E731
    x, y, x_new = tensor(scale_x(x_train)), tensor(scale_y(y_train)), tensor(scale_x(x_test))
    targets = y.shape[1]
    start = time.perf_counter()
    predictive = _FIT[kind](x, y, x_new, targets, opts, seed, logger)
    # back to the target's units: locations shift and scale, spreads scale
    params = {}
    for key, value in predictive.params.items():
        value = value.astype(np.float64)
        column = (slice(None),) + (None,) * (value.ndim - 2)  # (d,) -> broadcast over mixture components
        if key in ("means", "loc", "mean"):
            value = value * scale_y.std[column] + scale_y.mean[column]
        elif key in ("stds", "scale", "std"):
            value = value * scale_y.std[column]
        params[key] = value
    logger.info("%s: trained on %d samples on %s in %.1f s", kind, len(x_train), device, time.perf_counter() - start)
    info = {
        **predictive.info,
        "kind": kind,
        "options": opts,
        "seed": seed,
        "device": str(device),
        "train_samples": len(x_train),
        "torch": torch.__version__,
    }
    return Predictive(predictive.family, params, info)


def _fit_mc_dropout(x, y, x_new, targets, opts, seed, logger) -> Predictive:
    with _seeded_torch(seed):
        network = _network(x.shape[1], opts["hidden"], targets, opts["dropout"]).to(x.device)
        _train(network, lambda out, t: ((out - t) ** 2).mean(), x, y, opts, seed, logger, "mc_dropout")
        # the training passes draw their masks first whatever the noise: both noises see the same test passes
        train_mean = _mc_passes(network, x, opts["passes"]).mean(0)
        if opts["noise"] == "none":  # the seed's: the passes' mean and variance (float64), no noise term
            passes = _mc_passes(network, x_new, opts["passes"]).double()  # (T, n, d)
            mean = passes.mean(0)
            std = portable.sqrt(((passes - mean) ** 2).mean(0))
            return Predictive("gaussian", {"mean": mean.cpu().numpy(), "std": std.cpu().numpy()}, {"noise": "none"})
        # tau: given (in standardised target units: 1/tau is the noise variance), or the ML estimate
        if opts["tau"]:
            noise_var = torch.full((targets,), 1.0 / opts["tau"], dtype=torch.float64)
        else:
            noise_var = ((train_mean - y) ** 2).mean(0).double().cpu()
        passes = _mc_passes(network, x_new, opts["passes"])  # (T, n, d)
    means = passes.permute(1, 2, 0).cpu().numpy()
    noise_std = np.sqrt(noise_var.numpy())
    stds = np.ascontiguousarray(np.broadcast_to(noise_std[None, :, None], means.shape))
    return Predictive(
        "gaussian_mixture", {"means": means, "stds": stds}, {"noise_std_standardised": noise_std.tolist()}
    )


def _fit_aleatoric(x, y, x_new, targets, opts, seed, logger) -> Predictive:
    with _seeded_torch(seed):
        network = _network(x.shape[1], opts["hidden"], 2 * targets, opts["dropout"]).to(x.device)
        _train(
            network,
            lambda out, t: _gaussian_nll(*_heteroscedastic(out, targets), t),
            x,
            y,
            opts,
            seed,
            logger,
            "aleatoric",
        )
        passes = _mc_passes(network, x_new, opts["passes"])
    mean, std = _heteroscedastic(passes.reshape(-1, passes.shape[-1]), targets)
    shape = (passes.shape[0], passes.shape[1], targets)
    return Predictive(
        "gaussian_mixture",
        {
            "means": mean.reshape(shape).permute(1, 2, 0).cpu().numpy(),
            "stds": std.reshape(shape).permute(1, 2, 0).cpu().numpy(),
        },
    )


def _fit_ensemble(x, y, x_new, targets, opts, seed, logger) -> Predictive:
    means, stds = [], []
    for member in range(opts["members"]):
        member_seed = seed * 1000 + member  # different seeds per member (Lakshminarayanan et al. 2017, sec. 2.4)
        with _seeded_torch(member_seed):
            network = _network(x.shape[1], opts["hidden"], 2 * targets, 0.0).to(x.device)
            _train(
                network,
                lambda out, t: _gaussian_nll(*_heteroscedastic(out, targets), t),
                x,
                y,
                opts,
                member_seed,
                logger,
                f"ensemble member {member + 1}/{opts['members']}",
            )
            network.eval()
            with torch.no_grad():
                mean, std = _heteroscedastic(network(x_new), targets)
        means.append(mean.cpu().numpy())
        stds.append(std.cpu().numpy())
    return Predictive("gaussian_mixture", {"means": np.stack(means, axis=-1), "stds": np.stack(stds, axis=-1)})


def _fit_evidential(x, y, x_new, targets, opts, seed, logger) -> Predictive:
    with _seeded_torch(seed):
        network = _network(x.shape[1], opts["hidden"], 4 * targets, 0.0).to(x.device)
        _train(
            network,
            lambda out, t: nig_loss(*_nig(out, targets), t, opts["regulariser"]),
            x,
            y,
            opts,
            seed,
            logger,
            "evidential",
        )
        network.eval()
        with torch.no_grad():
            gamma, nu, alpha, beta = (v.double().cpu().numpy() for v in _nig(network(x_new), targets))
    scale = np.sqrt(beta * (1.0 + nu) / (nu * alpha))  # Amini et al. 2020, eq. 7
    return Predictive("student_t", {"loc": gamma, "scale": scale, "df": 2.0 * alpha})


_FIT = {
    "mc_dropout": _fit_mc_dropout,
    "aleatoric": _fit_aleatoric,
    "ensemble": _fit_ensemble,
    "evidential": _fit_evidential,
}
