"""The same bytes on every machine: one kernel path for the numerical libraries, seeds, thread counts.

Why: torch, MKL, oneDNN, NumPy and OpenBLAS each pick their kernels by the processor they run on.
The AVX-512 and AVX2 kernels sum in another order (16 lanes instead of 8) and compute ``exp`` and
``log`` differently, so the demo's networks trained on an AVX-512 machine ended with other weights
than on an AVX2 one, and NumPy's float64 ``exp``/``log`` differ in the last bit between the two
(measured on the developers' machine: docs/reproducibility.md). :func:`pin_kernels` points every
library at its AVX2 path (x86-64-v3: Intel Core and Xeon since 2013, AMD since Zen), which an
AVX-512 machine runs as well, and MKL at the one branch it keeps the same on every vendor's processor,
through the environment variables each library reads:

* ``ATEN_CPU_CAPABILITY=avx2``: torch's own CPU kernels (read at its first operation);
* ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility, the matrix products of torch's
  linear layers (read at MKL's first call). Intel's oneMKL developer guide ("Getting Started with
  Conditional Numerical Reproducibility") promises the ``AVX2`` branch's results on Intel processors
  only: on others MKL "uses the AUTO branch instead", its own kernels for that vendor (measured on an
  AMD EPYC: ``AVX2``, ``AVX512``, ``AUTO`` and ``SSE4_2`` give one result there, and the demo's networks
  trained other weights than on an Intel Xeon). ``COMPATIBLE`` (SSE2 without the approximate
  ``rcpps``/``rsqrtps``) is the branch the guide names for "Intel and Intel compatible" processors alike,
  for a fixed thread count; it costs the small matrix products of the networks trained here about a
  factor two (docs/reproducibility.md);
* ``ONEDNN_MAX_CPU_ISA=AVX2``: torch's convolutions (read at oneDNN's first call);
* ``NPY_DISABLE_CPU_FEATURES`` (NumPy's AVX-512 groups) and ``OPENBLAS_CORETYPE=Haswell``: NumPy's
  and SciPy's ufuncs and matrix products (read when NumPy is imported).

torch reads its variables lazily, so they take effect wherever no torch operation ran yet; NumPy's
only in a process where NumPy is imported after :func:`pin_kernels`: the package calls it when it is
imported, the command line and the workflow's worker processes import it first, and
:func:`kernels_pinned` says whether this process made it in time (the Snakemake process itself
imports NumPy before the workflow is read: its steps go to worker processes, calibrepro.workers).

On a processor without AVX2 (or not x86-64) nothing is set: results are then those of its own
kernels. ``CALIBREPRO_NATIVE_KERNELS=1`` keeps every library's own choice (faster on AVX-512, other
last bits). A variable the user set to another value is replaced (the point is the same path
everywhere), except ``OPENBLAS_CORETYPE``, which some machines set to avoid a broken OpenBLAS kernel.

What the pin cannot reach: MKL's GEMM kernels and its vector-math square root still differ between
Intel's and AMD's processors under ``MKL_CBWR=COMPATIBLE`` (measured with the kernel fingerprints of
docs/fingerprints/): :mod:`calibrepro.portable` keeps both off every output's path.

Threads: torch's parallel reductions and MKL's matrix products split the work by the thread count
and add the parts in another order, so every computation whose result reaches a table runs in one
torch thread (:func:`single_threaded`, :func:`torch_threads`). Seeds: :func:`seeded`.
"""

from __future__ import annotations

import os
import platform
import sys
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

#: set to 1 to keep each library's own kernels (the machine's fastest; last bits differ between machines)
NATIVE = "CALIBREPRO_NATIVE_KERNELS"
#: torch's name of the pinned capability (torch.backends.cpu.get_cpu_capability())
TORCH_CAPABILITY = "AVX2"
#: NumPy's feature groups above AVX2, by NumPy release: 2.4 names the x86-64 levels, earlier ones the extensions
_NUMPY_AVX512 = {
    "levels": "X86_V4 AVX512_ICL AVX512_SPR",
    "extensions": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
}
#: variables the user may have set for a reason of their own: kept when set
_KEPT_IF_SET = ("OPENBLAS_CORETYPE",)

_state: dict = {"environment": {}, "numpy_in_time": None}


def cpu_flags() -> set[str]:
    """The processor's feature flags as Linux lists them (``/proc/cpuinfo``); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _numpy_names() -> str:
    """NumPy's names of its AVX-512 groups for the installed release (read without importing NumPy)."""
    try:
        major, minor = (int(part) for part in version("numpy").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return _NUMPY_AVX512["levels"]
    return _NUMPY_AVX512["levels" if (major, minor) >= (2, 4) else "extensions"]


def kernel_environment(machine: str | None = None, flags: set[str] | None = None) -> dict[str, str]:
    """The variables that pin the AVX2 kernels, or none where this processor has no AVX2 and FMA."""
    machine = (machine or platform.machine()).lower()
    flags = cpu_flags() if flags is None else flags
    if machine not in ("x86_64", "amd64") or not {"avx2", "fma"} <= flags:
        return {}
    return {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "COMPATIBLE",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "NPY_DISABLE_CPU_FEATURES": _numpy_names(),
        "OPENBLAS_CORETYPE": "Haswell",
    }


def pin_kernels() -> dict[str, str]:
    """Set the variables of :func:`kernel_environment` in this process (and so in every process it starts).

    Called when :mod:`calibrepro` is imported; a second call changes nothing. Returns what is in force.
    """
    if _state["numpy_in_time"] is not None:
        return _state["environment"]
    wanted = {} if os.environ.get(NATIVE, "") not in ("", "0") else kernel_environment()
    features = wanted.get("NPY_DISABLE_CPU_FEATURES")
    already = os.environ.get("NPY_DISABLE_CPU_FEATURES")
    numpy_late = "numpy" in sys.modules and features is not None and already != features
    in_force = {}
    for name, value in wanted.items():
        if not (name in _KEPT_IF_SET and os.environ.get(name)):
            os.environ[name] = value
        in_force[name] = os.environ[name]
    _state["environment"] = in_force
    _state["numpy_in_time"] = not numpy_late
    return in_force


def kernels_pinned() -> bool:
    """Whether this process computes on the pinned kernels: NumPy imported after :func:`pin_kernels`
    (or with the variables already set), and torch, if imported, on the pinned capability."""
    pin_kernels()
    if not _state["environment"]:
        return True  # nothing to pin on this processor (or the user asked for the native kernels)
    if not _state["numpy_in_time"]:
        return False
    torch = sys.modules.get("torch")
    return torch is None or torch.backends.cpu.get_cpu_capability() == TORCH_CAPABILITY


def describe() -> dict:
    """What the kernels of this process are, for the metadata of a file it writes."""
    pin_kernels()
    info = {"pinned": dict(sorted(_state["environment"].items())), "machine": platform.machine()}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


def single_threaded() -> None:
    """One thread for torch and every BLAS and OpenMP pool loaded: for a process that only computes steps."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@contextmanager
def torch_threads(threads: int):
    """Run torch on ``threads`` CPU threads; restore the previous count afterwards."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def seeded(seed: int, device=None):
    """Seed torch's global generators for the block, restoring the caller's state afterwards.

    On a GPU (``device`` of type cuda) deterministic algorithms are switched on for the block too.
    """
    import torch

    cuda = device is not None and torch.device(device).type == "cuda"
    devices = [torch.device(device).index or 0] if cuda else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        if not cuda:
            yield
            return
        previous = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(previous)
