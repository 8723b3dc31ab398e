"""The kernel fingerprint of this machine: the bytes of each primitive computation the project's outputs rest on.

:func:`measure` runs each primitive on fixed inputs, on one thread, under the kernel pin of
:mod:`calibrepro.determinism`, and records the sha256 (first 16 hex digits) of its result, tagged with
where it serves (:data:`PATHS`):

* ``analysis``: what the fits, metrics and bootstrap of fixed logits compute with (NumPy's and SciPy's
  float64 routines and OpenBLAS's dgemm, torch's float64 ``exp``/``log`` behind
  :func:`calibrepro.calibrators.base.exp64`, torch's softmax family, a temperature fit through
  :func:`calibrepro.calibrators.scaling.run_lbfgs`, the metrics and their bootstrap intervals);
* ``training``: what the trained networks compute with (:func:`calibrepro.portable.linear` and its
  gradients at the demo's and LeNet-5's shapes, the fused Adam and SGD steps, torch's random draws,
  element-wise kernels and losses, oneDNN's convolutions, and short trainings through the project's own
  trainers);
* ``off-path``: what no output uses, measured to show what the project avoids (MKL's sgemm/dgemm behind
  ``torch.matmul`` and ``nn.Linear``, ``torch.sqrt`` through MKL's vector math, Adam without ``fused``)
  or never calls.

A primitive serving both the analysis and the networks is tagged ``analysis``, the stronger promise.
The primitives named as in the shared measuring tool ``kernel_probe.py`` (issue 43) compute exactly
what it computes, on the same inputs, so its files compare with these (docs/fingerprints/README.md).
Two machines with the same digest for a primitive computed it bit for bit alike; :func:`compare` lists
those that differ, in the order they run (an early, simple one explains the later, composite ones).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import platform
from pathlib import Path

#: where a primitive serves, in the order a comparison reports them (module docstring)
PATHS = ("analysis", "training", "off-path")
#: version of the fingerprint files
FORMAT = 1
#: where the repository keeps the fingerprints of the processors it was measured on
FOLDER = "docs/fingerprints"
#: the key of :func:`compare`'s answer that lists the primitives the reference did not measure
MISSING = "not measured there"


def cpu() -> dict:
    """The processor as Linux describes it (``/proc/cpuinfo``'s first entry), its AVX2/FMA/AVX-512 flags and the
    C library."""
    from calibrepro import determinism

    info: dict = {"vendor_id": None, "family": None, "model": None, "model_name": None, "stepping": None}
    keys = {"vendor_id": "vendor_id", "cpu family": "family", "model": "model", "model name": "model_name",
            "stepping": "stepping"}
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in keys and info[keys[key]] is None:
                    info[keys[key]] = value.strip()
                if key == "flags":
                    break
    except OSError:
        pass
    flags = determinism.cpu_flags()
    info.update({flag: flag in flags for flag in ("avx2", "fma", "avx512f")})
    info["glibc"] = " ".join(platform.libc_ver()).strip()
    return info


def machine_name(cpu_info: dict | None = None) -> str:
    """``<vendor_id>-<family>-<model>`` of a processor (default: this one), as its fingerprint file is named."""
    cpu_info = cpu() if cpu_info is None else cpu_info
    return f"{cpu_info['vendor_id']}-{cpu_info['family']}-{cpu_info['model']}"


def file_name(cpu_info: dict) -> str:
    """``<vendor_id>-<family>-<model>.json``: the name of a processor's fingerprint file."""
    return f"{machine_name(cpu_info)}.json"


class _Record:
    """The digests in the order they are taken, each with its path."""

    def __init__(self):
        self.primitives: dict[str, dict[str, str]] = {}

    def __call__(self, name: str, path: str, *values) -> None:
        """sha256 of the values' bytes one after the other (tensors as their contiguous CPU arrays)."""
        import numpy as np
        import torch

        digest = hashlib.sha256()
        for value in values:
            if isinstance(value, torch.Tensor):
                value = value.detach().contiguous().numpy()
            digest.update(np.ascontiguousarray(value).tobytes())
        self.primitives[name] = {"digest": digest.hexdigest()[:16], "path": path}


def _normal(*shape, seed: int):
    """Fixed inputs: float64 standard normals of a torch generator seeded with ``seed``, rounded to float32."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).float()


#: (m, k, n) of the products: the demo's and LeNet-5's layers at batch 64 and at the 899 evaluation digits,
#: LeNet-5's first fully connected layer at 1000 images, a larger product and an odd-sized one
_PRODUCTS = [(64, 64, 10), (64, 64, 256), (64, 256, 256), (899, 64, 10), (1000, 400, 120), (64, 400, 120),
             (64, 120, 84), (64, 84, 10), (300, 700, 200), (7, 13, 5)]
#: the layers portable.Linear computes in the demo's networks (256- and 128-wide MLPs, logistic regression) and
#: LeNet-5's head, at batch 64
_LAYERS = [(64, 256), (256, 256), (256, 10), (64, 128), (128, 128), (128, 10), (64, 10),
           (400, 120), (120, 84), (84, 10)]


def _products(put) -> None:
    """Matrix products: MKL's (torch, off-path), OpenBLAS's dgemm (NumPy) and portable.linear with its gradients."""
    import torch

    from calibrepro import portable

    for m, k, n in _PRODUCTS:
        a, b = _normal(m, k, seed=1), _normal(k, n, seed=2)
        put(f"torch.sgemm NN {m}x{k}x{n}", "off-path", a @ b)
        put(f"torch.sgemm TN {m}x{k}x{n}", "off-path", a.t().contiguous().t() @ b)
        put(f"torch.sgemm NT {m}x{k}x{n}", "off-path", a @ b.t().contiguous().t())
        put(f"torch.dgemm NN {m}x{k}x{n}", "off-path", a.double() @ b.double())
        put(f"numpy.dgemm {m}x{k}x{n}", "analysis", a.double().numpy() @ b.double().numpy())
    layer = torch.nn.Linear(64, 10)
    with torch.no_grad():
        layer.weight.copy_(_normal(10, 64, seed=3))
        layer.bias.copy_(_normal(10, seed=4))
    x = _normal(64, 64, seed=5).requires_grad_(True)
    out = layer(x)
    out.sum().backward()
    put("torch.linear forward 64->10", "off-path", out)
    put("torch.linear grad weight", "off-path", layer.weight.grad)
    put("torch.linear grad input", "off-path", x.grad)
    put("torch.sgemm NN 64x256x10", "off-path", _normal(64, 256, seed=1) @ _normal(256, 10, seed=2))
    for fan_in, fan_out in _LAYERS:
        x = _normal(64, fan_in, seed=30).requires_grad_(True)
        weight = _normal(fan_out, fan_in, seed=31).mul_(0.1).requires_grad_(True)
        bias = _normal(fan_out, seed=32).requires_grad_(True)
        out = portable.linear(x, weight, bias)
        (out * _normal(64, fan_out, seed=33)).sum().backward()
        put(f"portable.linear forward 64x{fan_in}->{fan_out}", "training", out)
        put(f"portable.linear gradients 64x{fan_in}->{fan_out}", "training", x.grad, weight.grad, bias.grad)


def _element_wise(put) -> tuple:
    """torch's element-wise kernels (a length with a tail after the 8-lane blocks) and its reductions of
    (899, 10) logits; returns those logits and their labels, which later primitives reuse."""
    import torch
    import torch.nn.functional as F

    v = _normal(1003, seed=6)
    pos = v.abs() + 0.1
    # name, function, argument, path of the float32 kernel, path of the float64 one
    kernels = [
        ("exp", torch.exp, v, "off-path", "analysis"), ("log", torch.log, pos, "training", "analysis"),
        ("tanh", torch.tanh, v, "off-path", "off-path"), ("sigmoid", torch.sigmoid, v, "off-path", "off-path"),
        ("softplus", F.softplus, v, "training", "off-path"), ("log1p", torch.log1p, pos, "training", "off-path"),
        ("expm1", torch.expm1, v, "off-path", "off-path"), ("lgamma", torch.lgamma, pos, "training", "off-path"),
        ("digamma", torch.digamma, pos, "off-path", "off-path"), ("erf", torch.erf, v, "off-path", "off-path"),
        ("erfinv", torch.erfinv, v.tanh() * 0.99, "off-path", "off-path"),
        ("sqrt", torch.sqrt, pos, "off-path", "off-path"), ("rsqrt", torch.rsqrt, pos, "off-path", "off-path"),
        ("reciprocal", torch.reciprocal, pos, "off-path", "off-path"),
        ("pow 1.5", lambda t: t.pow(1.5), pos, "off-path", "off-path"), ("relu", torch.relu, v, "training", "off-path"),
        ("sin", torch.sin, v, "off-path", "off-path"), ("atan", torch.atan, v, "off-path", "off-path"),
    ]
    for name, function, argument, single, double in kernels:
        put(f"torch.{name} f32", single, function(argument))
        put(f"torch.{name} f64", double, function(argument.double()))
    z = _normal(899, 10, seed=7) * 5
    for tag, dtype, path in (("f32", torch.float32, "training"), ("f64", torch.float64, "analysis")):
        t = z.to(dtype)
        put(f"torch.log_softmax {tag}", path, F.log_softmax(t, 1))
        put(f"torch.softmax {tag}", "analysis", F.softmax(t, 1))  # float32: calibrepro.softmax's default
        put(f"torch.logsumexp {tag}", path, torch.logsumexp(t, 1))
        put(f"torch.sum {tag}", path, t.sum())
        put(f"torch.mean rows {tag}", "training" if tag == "f32" else "off-path", t.mean(1))
        put(f"torch.var {tag}", "off-path", t.var(0))
        put(f"torch.cumsum {tag}", "off-path", t.cumsum(1))
        put(f"torch.norm {tag}", "off-path", t.norm(dim=1))
    labels = torch.arange(899) % 10
    logits = z.clone().requires_grad_(True)
    loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
    loss.backward()
    put("torch.cross_entropy + grad (label smoothing 0.1)", "training", loss, logits.grad)
    return z, labels


def _random(put) -> None:
    """torch's seeded draws: the initialisations, dropout masks and minibatch orders of training."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    put("torch.randn", "training", torch.randn(1003))
    put("torch.rand", "training", torch.rand(1003))
    put("torch.randperm", "training", torch.randperm(1003))
    torch.manual_seed(0)
    put("torch.bernoulli_(0.5)", "training", torch.empty(1003).bernoulli_(0.5))
    put("torch.dropout(0.5)", "training", F.dropout(torch.ones(1003), 0.5))
    torch.manual_seed(0)
    put("torch.normal_", "training", torch.empty(1003).normal_(0, 0.1))
    put("torch.uniform_", "training", torch.empty(1003).uniform_(-0.3, 0.3))
    torch.manual_seed(0)
    put("torch.nn.Linear init", "training", torch.nn.Linear(64, 10).weight)
    put("torch.nn.Conv2d init", "training", torch.nn.Conv2d(3, 6, 5).weight)


def _optimisers(put) -> None:
    """Five steps on fixed gradients: torch's default Adam (off-path), fused Adam (portable.adam), SGD with momentum."""
    import torch

    from calibrepro import portable

    steppers = [
        ("torch.optim adam wd 5 steps", "off-path", lambda p: torch.optim.Adam(p, 1e-3, weight_decay=1e-3)),
        ("torch.optim sgd momentum wd 5 steps", "training",
         lambda p: torch.optim.SGD(p, 0.01, momentum=0.9, weight_decay=5e-4)),
        ("portable.adam (fused) wd 5 steps", "training", lambda p: portable.adam(p, lr=1e-3, weight_decay=1e-3)),
    ]
    for name, path, make in steppers:
        weight = torch.nn.Parameter(_normal(10, 64, seed=8).clone())
        optimiser = make([weight])
        for step in range(5):
            weight.grad = _normal(10, 64, seed=20 + step)
            optimiser.step()
        put(name, path, weight)


def _convolutions(put) -> None:
    """oneDNN: LeNet-5's two convolutions with ReLU and max pooling, forward and backward, batch 64 of 32x32x3."""
    import torch
    import torch.nn.functional as F

    first, second = torch.nn.Conv2d(3, 6, 5), torch.nn.Conv2d(6, 16, 5)
    with torch.no_grad():
        first.weight.copy_(_normal(6, 3, 5, 5, seed=9) * 0.1)
        first.bias.zero_()
        second.weight.copy_(_normal(16, 6, 5, 5, seed=10) * 0.1)
        second.bias.zero_()
    images = _normal(64, 3, 32, 32, seed=11).requires_grad_(True)
    stack = F.max_pool2d(F.relu(second(F.max_pool2d(F.relu(first(images)), 2))), 2)
    stack.square().sum().backward()
    put("torch.conv2d 3->6 5x5 forward", "training", first(images))
    put("torch.lenet conv stack forward", "training", stack)
    put("torch.conv2d grad weight", "training", first.weight.grad, second.weight.grad)
    put("torch.conv2d grad input", "training", images.grad)


def _numpy_scipy(put, z, labels) -> None:
    """NumPy's and SciPy's float64 routines of the calibrators' fits (scipy's L-BFGS-B: no output uses it)."""
    import numpy as np
    import scipy.linalg
    import scipy.optimize
    import scipy.special

    a = _normal(1003, seed=12).double().numpy()
    p = np.abs(a) + 0.1
    for name, value in [("numpy.exp", np.exp(a)), ("numpy.log", np.log(p)), ("numpy.log1p", np.log1p(p)),
                        ("numpy.tanh", np.tanh(a)), ("numpy.sum", np.sum(a)), ("numpy.cumsum", np.cumsum(a)),
                        ("numpy.sort", np.sort(a))]:
        put(name, "analysis", value)
    m = _normal(100, 100, seed=13).double().numpy()
    s = m @ m.T + 100 * np.eye(100)
    put("numpy.linalg.solve", "analysis", np.linalg.solve(s, a[:100]))
    put("numpy.linalg.cholesky", "analysis", np.linalg.cholesky(s))
    put("scipy.linalg.eigh", "analysis", scipy.linalg.eigh(s)[0])
    logits, y = z.double().numpy(), labels.numpy()
    put("scipy.special.softmax", "analysis", scipy.special.softmax(logits, 1))
    put("scipy.special.logsumexp", "analysis", scipy.special.logsumexp(logits, 1))

    def nll(t):
        scaled = logits / t[0]
        return float(np.mean(scipy.special.logsumexp(scaled, 1) - scaled[np.arange(len(y)), y]))

    fit = scipy.optimize.minimize(nll, [1.0], method="L-BFGS-B", bounds=[(0.05, 20)])
    put("scipy.optimize L-BFGS-B temperature", "off-path", fit.x)


def _digits():
    """The first 898 of scikit-learn's digits, scaled to [0, 1], as float32 inputs and int64 labels."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype(np.float32)[:898])
    return x, torch.from_numpy(digits.target[:898].astype(np.int64))


def _torch_trainings(put) -> None:
    """Small trainings with torch's own nn.Linear (MKL's sgemm) and unfused Adam: what the networks avoid."""
    import torch
    import torch.nn.functional as F

    x, y = _digits()
    for name, hidden, epochs in [("logistic regression", [], 1), ("logistic regression", [], 100),
                                 ("mlp 256-256", [256, 256], 5)]:
        torch.manual_seed(0)
        order = torch.Generator().manual_seed(0)
        layers, width = [], 64
        for size in hidden:
            layers += [torch.nn.Linear(width, size), torch.nn.ReLU()]
            width = size
        network = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
        optimiser = torch.optim.Adam(network.parameters(), 1e-3, weight_decay=1e-3)
        for _ in range(epochs):
            for batch in torch.randperm(898, generator=order).split(64):
                optimiser.zero_grad()
                F.cross_entropy(network(x[batch]), y[batch]).backward()
                optimiser.step()
        put(f"train {name} {epochs} epochs (adam, digits)", "off-path", *network.parameters())


def _analysis(put) -> None:
    """The analysis of fixed logits: exp64/log64, calibrepro's softmax, a temperature fit (run_lbfgs in
    ExactSqrt), the demo's metrics and their bootstrap intervals."""
    import numpy as np

    from calibrepro.bootstrap import metric_intervals
    from calibrepro.calibrators import TemperatureScaling, softmax
    from calibrepro.calibrators.base import exp64, log64
    from calibrepro.metrics import compute_metrics

    labels = np.arange(899) % 10
    logits = 2 * _normal(899, 10, seed=40).double().numpy() + 3 * np.eye(10)[labels]  # labels' logits ahead
    put("calibrepro exp64", "analysis", exp64(logits))
    put("calibrepro log64", "analysis", log64(np.abs(logits) + 0.1))
    put("calibrepro softmax f32", "analysis", softmax(logits))
    put("calibrepro softmax f64", "analysis", softmax(logits, "float64"))
    calibrator = TemperatureScaling().fit(logits, labels)
    probabilities = calibrator.predict_proba(logits)
    put("calibrepro temperature scaling fit (run_lbfgs, ExactSqrt)", "analysis", probabilities)
    names = ["accuracy", "brier", "ece", "mce", "nll", "classwise_ece", "ece_equal_mass", "mce_equal_mass",
             "ece_l2", "ece_l2_debiased", "smooth_ece"]
    metrics = compute_metrics(probabilities, labels, names)
    put("calibrepro metrics (the demo's 11)", "analysis", np.array([metrics[name] for name in names]))
    intervals = metric_intervals(probabilities, labels, ("accuracy", "brier", "ece", "nll"), resamples=50)
    put("calibrepro bootstrap intervals (50 resamples)", "analysis",
        np.array([[i.estimate, i.low, i.high] for i in intervals.values()], dtype=np.float64))


def _project_trainings(put) -> None:
    """The project's trainers, 2 epochs: the demo's label-smoothing MLP (calibrepro.training.trainer.train, digits)
    and an evidential regressor (calibrepro.regression.models.fit_predict, diabetes)."""
    import numpy as np
    import torch
    from sklearn.datasets import load_diabetes

    from calibrepro.regression.models import fit_predict
    from calibrepro.training import data, trainer

    parts = data.load("digits", {}, {"evaluation_fraction": 0.5, "seed": 0})
    options = {**trainer.DEFAULTS, "hidden": [256, 256], "label_smoothing": 0.1, "epochs": 2}
    with contextlib.redirect_stderr(io.StringIO()):  # its progress lines
        network, _ = trainer.train(parts, options, torch.device("cpu"))
    logits = trainer.forward(network, parts.x_eval, torch.device("cpu"))
    put("train demo mlp 256-256 label smoothing 2 epochs (trainer.train, digits)", "training",
        *[tensor for _, tensor in sorted(network.state_dict().items())], logits)
    x, y = load_diabetes(return_X_y=True)
    predictive = fit_predict("evidential", x[:300], y[:300], x[300:], {"epochs": 2}, seed=0)
    put("train evidential regressor 2 epochs (fit_predict, diabetes)", "training",
        *[np.asarray(predictive.params[key]) for key in sorted(predictive.params)])


def measure() -> dict:
    """This machine's fingerprint: processor, versions, kernels in force and every primitive's digest.

    Runs in this process on one thread, leaving its thread counts and torch's generator as they were; the process
    must compute on the pinned kernels (NumPy imported after calibrepro:
    :func:`calibrepro.determinism.kernels_pinned`), else the digests would not be the project's.
    """
    from calibrepro import determinism

    if not determinism.kernels_pinned():
        raise RuntimeError("the numerical kernels are not pinned in this process (NumPy was imported before "
                           "calibrepro): run `calibrepro fingerprint`, or import calibrepro first")
    import numpy as np
    import scipy
    import torch
    from threadpoolctl import threadpool_limits

    put = _Record()
    with threadpool_limits(1), determinism.torch_threads(1), torch.random.fork_rng():  # the caller's seed kept
        _products(put)
        z, labels = _element_wise(put)
        _random(put)
        _optimisers(put)
        _convolutions(put)
        _numpy_scipy(put, z, labels)
        _torch_trainings(put)
        _analysis(put)
        _project_trainings(put)
    return {
        "format": FORMAT,
        "cpu": cpu(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                     "scipy": scipy.__version__},
        "pinned": determinism.describe()["pinned"],
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "primitives": put.primitives,
    }


def load(path: str | Path) -> dict:
    """A fingerprint file; ValueError naming the file if it cannot be read or is no fingerprint."""
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except OSError as error:
        raise ValueError(f"{path}: cannot read the reference fingerprint ({error.strerror or error})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a kernel fingerprint (no JSON: {error})") from None
    primitives = found.get("primitives") if isinstance(found, dict) else None
    if (not isinstance(primitives, dict) or not isinstance(found.get("cpu"), dict)
            or not all(isinstance(entry, dict) and "digest" in entry for entry in primitives.values())):
        raise ValueError(f"{path}: not a kernel fingerprint (calibrepro fingerprint --output FILE writes one)")
    return found


def compare(ours: dict, reference: dict) -> dict[str, list[str]]:
    """Path -> names of the primitives measured in both whose digests differ, in the order they run; and under
    :data:`MISSING`, the names the reference did not measure."""
    theirs = reference["primitives"]
    found: dict[str, list[str]] = {path: [] for path in PATHS}
    found[MISSING] = []
    for name, entry in ours["primitives"].items():
        if name not in theirs:
            found[MISSING].append(name)
        elif theirs[name]["digest"] != entry["digest"]:
            found[entry["path"]].append(name)
    return found


def _machine(fingerprint: dict) -> str:
    info = fingerprint["cpu"]
    return f"{info.get('vendor_id')} family {info.get('family')} model {info.get('model')} ({info.get('model_name')})"


def summary(ours: dict, reference: dict, where: str) -> str:
    """What a person reads: the two machines, and per path the primitives that differ (:func:`compare`)."""
    differ = compare(ours, reference)
    shared = [name for name in ours["primitives"] if name in reference["primitives"]]
    lines = [f"this machine:      {_machine(ours)}",
             f"reference machine: {_machine(reference)}, {where}"]
    if reference.get("versions") != ours["versions"]:
        lines.append(f"versions: here {ours['versions']}, there {reference.get('versions')}")
    lines.append(f"{len(shared)} primitives measured on both")
    for path in PATHS:
        total = sum(ours["primitives"][name]["path"] == path for name in shared)
        label = "off-path (not used by any output)" if path == "off-path" else path
        names = differ[path]
        lines.append(f"{label}: {len(names)} of {total} differ:" if names
                     else f"{label}: none differ ({total} compared)")
        lines += [f"  {name}" for name in names]
    if differ[MISSING]:
        lines.append(f"not measured on the reference machine: {len(differ[MISSING])}")
        lines += [f"  {name}" for name in differ[MISSING]]
    return "\n".join(lines)
