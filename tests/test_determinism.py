"""calibrepro.determinism: the demo's training gives the same weights whatever CPU kernels the machine offers.

The subprocess tests force torch's CPU capability (``ATEN_CPU_CAPABILITY``) to what every x86-64
machine has (``default``), to AVX2, and leave the machine's own; without the pinned kernels the
weights differ from the first step (torch's vectorised log-softmax; docs/reproducibility.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from calibrepro import determinism
from workflow_helpers import ROOT

X86_AVX2 = determinism.kernel_environment() != {}

#: trains every ``source: train`` network of the demo config for one epoch (the first step already
#: differs without the pin) and prints the weights' and logits' digests, and the kernels in force
TRAIN_DEMO = textwrap.dedent(
    """
    import hashlib, json, sys
    import numpy as np, yaml
    from calibrepro.training import data, trainer
    import torch

    config = yaml.safe_load(open(sys.argv[1]))
    parts = data.load("digits", {}, config["datasets"]["digits"])
    digests = {}
    for name, spec in config["models"]["digits"].items():
        if spec.get("source") != "train":
            continue
        options = {**trainer.training_options(spec), "epochs": 1}
        network, _ = trainer.train(parts, options, torch.device("cpu"), name)
        if "mc_dropout" in spec:
            logits = trainer.stochastic_logits(network, parts.x_eval, 2, options["seed"], torch.device("cpu"))
        else:
            logits = trainer.forward(network, parts.x_eval, torch.device("cpu"))
        digests[name] = [trainer.weights_digest(network), hashlib.sha256(logits.tobytes()).hexdigest()]
    print(json.dumps({"digests": digests, "capability": torch.backends.cpu.get_cpu_capability()}))
    """
)


def train_demo(**env) -> dict:
    environment = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
    result = subprocess.run(
        [sys.executable, "-c", TRAIN_DEMO, str(ROOT / "config" / "config.yaml")],
        env={**environment, **env}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.skipif(not X86_AVX2, reason="the kernels are pinned on x86-64 processors with AVX2 and FMA")
def test_the_demos_training_gives_the_same_weights_under_every_cpu_capability():
    own = train_demo()
    assert own["capability"] == determinism.TORCH_CAPABILITY
    assert len(own["digests"]) == 5  # four networks, one of them again as MC-Dropout
    for capability in ("default", "avx2"):
        forced = train_demo(ATEN_CPU_CAPABILITY=capability)
        assert forced == own, f"ATEN_CPU_CAPABILITY={capability} trained other weights than the machine's own"


@pytest.mark.skipif(not X86_AVX2, reason="the kernels are pinned on x86-64 processors with AVX2 and FMA")
def test_without_the_pin_the_capabilities_train_other_weights():
    """The pin is what makes the test above pass: each library's own kernels differ (here: default vs AVX2)."""
    default = train_demo(CALIBREPRO_NATIVE_KERNELS="1", ATEN_CPU_CAPABILITY="default")
    avx2 = train_demo(CALIBREPRO_NATIVE_KERNELS="1", ATEN_CPU_CAPABILITY="avx2")
    assert default["capability"] == "DEFAULT" and avx2["capability"] == "AVX2"
    assert default["digests"] != avx2["digests"]


def test_kernel_environment_pins_avx2_only_where_the_processor_has_it():
    pinned = determinism.kernel_environment("x86_64", {"avx2", "fma", "avx512f"})
    assert pinned["ATEN_CPU_CAPABILITY"] == "avx2" and pinned["MKL_CBWR"] == "COMPATIBLE"
    assert pinned["ONEDNN_MAX_CPU_ISA"] == "AVX2" and pinned["OPENBLAS_CORETYPE"] == "Haswell"
    assert "AVX512_SPR" in pinned["NPY_DISABLE_CPU_FEATURES"]
    assert determinism.kernel_environment("x86_64", {"sse4_2", "avx"}) == {}  # forcing AVX2 there would crash
    assert determinism.kernel_environment("aarch64", {"avx2", "fma"}) == {}


PROBE = textwrap.dedent(
    """
    import json, sys
    {first}
    from calibrepro import determinism
    import numpy
    from threadpoolctl import threadpool_info
    from numpy._core._multiarray_umath import __cpu_features__
    blas = [lib.get("architecture") for lib in threadpool_info() if lib["user_api"] == "blas"]
    print(json.dumps({{"pinned": determinism.kernels_pinned(), "avx512": __cpu_features__.get("X86_V4"),
                      "blas": blas}}))
    """
)


@pytest.mark.skipif(not X86_AVX2, reason="the kernels are pinned on x86-64 processors with AVX2 and FMA")
@pytest.mark.parametrize("first, pinned", [("", True), ("import numpy", False)])
def test_numpy_runs_the_pinned_kernels_only_when_imported_after_calibrepro(first, pinned):
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("NPY_DISABLE_CPU_FEATURES", "CALIBREPRO_NATIVE_KERNELS")}
    result = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], env=environment,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found["pinned"] is pinned
    if pinned:
        assert not found["avx512"]
        assert found["blas"] == [os.environ.get("OPENBLAS_CORETYPE", "Haswell")]  # a machine's own setting is kept


#: a float32 matrix product through torch (MKL's sgemm), printed as a digest, and MKL's branch in force
MATMUL = textwrap.dedent(
    """
    import hashlib, os
    import calibrepro
    import torch
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(300, 700, generator=g), torch.randn(700, 200, generator=g)
    print(hashlib.sha256((a @ b).numpy().tobytes()).hexdigest(), os.environ.get("MKL_CBWR"))
    """
)


def matmul_digest(**env) -> list[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MKL_")}
    result = subprocess.run([sys.executable, "-c", MATMUL], env={**environment, **env},
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


@pytest.mark.skipif(not X86_AVX2, reason="the kernels are pinned on x86-64 processors with AVX2 and FMA")
def test_mkl_runs_its_vendor_independent_branch_under_the_pin():
    """The pin reaches MKL before its first product, with the branch Intel documents for every vendor's
    processors (``COMPATIBLE``; the ``AVX2`` branch is Intel's only: on an AMD EPYC it equals ``AUTO``)."""
    pinned, branch = matmul_digest()
    assert branch == "COMPATIBLE"
    assert matmul_digest(CALIBREPRO_NATIVE_KERNELS="1", MKL_CBWR="COMPATIBLE")[0] == pinned
    assert matmul_digest(CALIBREPRO_NATIVE_KERNELS="1", MKL_CBWR="AVX2", ATEN_CPU_CAPABILITY="avx2")[0] != pinned


#: libraries that answer MKL's own vendor tests (torch's wheel links MKL statically and exports them) as the
#: other vendor's processor would, so that MKL takes that vendor's code paths here: a measuring aid
VENDOR_SHIMS = {
    "intel": "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_cpuiszen(void) { return 0; }\n",
    "zen": "int mkl_serv_intel_cpu_true(void) { return 0; }\nint mkl_serv_cpuiszen(void) { return 1; }\n",
}


@pytest.mark.skipif(not X86_AVX2 or shutil.which("cc") is None,
                    reason="x86-64 with AVX2 and FMA, and a C compiler for the shims")
def test_mkls_vendor_code_paths_do_not_reach_the_demos_networks(tmp_path):
    """As MKL computes on Intel and on AMD Zen processors, the demo's networks train the same weights and logits:
    their products do not go to MKL (calibrepro.portable). The control: MKL's own product changes under a shim."""
    shims = {}
    for vendor, source in VENDOR_SHIMS.items():
        (tmp_path / f"as-{vendor}.c").write_text(source)
        shims[vendor] = str(tmp_path / f"libas-{vendor}.so")
        subprocess.run(["cc", "-shared", "-fPIC", "-o", shims[vendor], str(tmp_path / f"as-{vendor}.c")], check=True)
    native = matmul_digest()[0]
    assert any(matmul_digest(LD_PRELOAD=library)[0] != native for library in shims.values())
    own = train_demo()
    for vendor, library in shims.items():
        assert train_demo(LD_PRELOAD=library) == own, f"MKL as on {vendor} processors trained other weights"


EXP64 = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    from calibrepro.calibrators.base import exp64, log64
    x = np.random.default_rng(0).normal(size=100_003) * 20
    e = exp64(x)
    print(hashlib.sha256(e.tobytes() + log64(e).tobytes()).hexdigest())
    """
)


@pytest.mark.skipif(not X86_AVX2, reason="the kernels are pinned on x86-64 processors with AVX2 and FMA")
def test_the_float64_exp_and_log_of_the_fits_do_not_depend_on_the_kernels():
    """exp64/log64 (the scaling and Dirichlet fits' exp and log) give the same bits pinned and on every
    ATen capability unpinned: their speed needs no pin, and their bits no kernel choice."""
    environment = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}

    def digest(**env):
        result = subprocess.run([sys.executable, "-c", EXP64], env={**environment, **env},
                                capture_output=True, text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout.strip()

    pinned = digest()
    for capability in ("default", "avx2", "avx512"):
        assert digest(CALIBREPRO_NATIVE_KERNELS="1", ATEN_CPU_CAPABILITY=capability) == pinned, capability


def test_exp64_and_log64_are_numpys_functions_to_the_last_bit_or_one_ulp():
    from calibrepro.calibrators.base import exp64, log64

    x = np.random.default_rng(1).normal(size=(3, 70_001)) * 30  # more than two of torch's grains a row
    e = exp64(x)
    assert np.all(np.abs(e - np.exp(x)) <= np.spacing(np.exp(x)))
    assert np.all(np.abs(log64(e) - np.log(e)) <= np.spacing(np.abs(np.log(e))))
    out = np.empty_like(x)
    assert exp64(x, out=out) is out and np.array_equal(out, e)
    with pytest.raises(ValueError, match="C-contiguous float64"):
        exp64(x, out=np.empty((70_001, 3)).T)
