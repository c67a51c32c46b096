"""The CPU kernel profile: which of torch's CPU code paths a stage computes with (issue 49).

Two x86-64 CPUs of another vendor or vector width give the same float results only where
every kernel on the way takes the same code path. On torch's CPU wheel two libraries choose
one by the CPU they find:

- ATen's own kernels (softmax, LayerNorm, reductions, elementwise ops): one build per vector
  width, picked at the first dispatch. ``ATEN_CPU_CAPABILITY=avx2`` pins the AVX2 build,
  which has no vendor branch.
- MKL (``mm``, ``bmm``, ``addmm`` and the vectorised ``exp``/``log`` of VML): a kernel per
  vendor *and* width. Measured 2026-12-04 on an AMD EPYC (AVX-512) and, under qemu's CPU
  models, an Intel Haswell and an AMD EPYC (AVX2): under ``MKL_CBWR`` AUTO, AVX2 or
  AVX512 the Intel model's ``bmm`` and ``exp`` differ from the AMD ones; MKL's conditional
  numerical reproducibility branch ``COMPATIBLE`` gives one result on all three
  (docs/reproducibility.md). oneDNN runs no fp32 training op here (``ONEDNN_VERBOSE``
  prints nothing), and the thread count is already in the training contract.

``portable`` pins both; ``native`` leaves the choice to the CPU (faster where MKL's own
kernel is; a result then reproduces on the CPU kind that made it only). One op no pin
fixes, VML's ``sqrt`` (not correctly rounded, and by the CPU under every branch), is kept
out of the portable training step: Adam's square root is taken correctly rounded there
(``seqcore.training.optim.PortableAdam``; docs/reproducibility.md). Both variables are
read once, at the first kernel call, so a stage sets them by starting itself again before
torch computes anything (:func:`relaunch_env`), then proves they took effect
(:func:`check_portable`).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from seqcore.errors import OneLineError

#: The environment of the portable profile.
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
#: ``mkl_cbwr_get(MKL_CBWR_BRANCH)`` under ``MKL_CBWR=COMPATIBLE`` (mkl_service.h).
MKL_CBWR_BRANCH, MKL_CBWR_COMPATIBLE = 1, 3
#: What the portable profile is, as written into logs and the MLflow run.
PORTABLE_TEXT = "ATen AVX2 kernels, MKL COMPATIBLE branch"


class KernelProfileError(OneLineError):
    """The portable profile cannot be had on this machine (one line: what was found, and
    how to train with ``native`` instead)."""


def relaunch_env(profile: str, environ: dict[str, str]) -> dict[str, str] | None:
    """The environment to start this process again with, so that ``profile`` holds from
    torch's first kernel on; None when ``environ`` already gives it. ``native`` never
    relaunches: the audit's replay of a native result sets ``ATEN_CPU_CAPABILITY`` itself."""
    if profile != "portable" or all(environ.get(k) == v for k, v in PORTABLE_ENV.items()):
        return None
    return {**environ, **PORTABLE_ENV}


def profile_env(profile: str, environ: dict[str, str]) -> dict[str, str]:
    """``environ`` for a child process under ``profile``: the portable profile's variables
    set, or (native) removed, so that a native child never inherits a portable parent's."""
    rest = {k: v for k, v in environ.items() if k not in PORTABLE_ENV}
    return rest | PORTABLE_ENV if profile == "portable" else rest


def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (``vendor_id``, ``cpu family``,
    ``model``, ``model name``, ``flags``, ...); empty where there is none."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return fields
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty elsewhere)."""
    return frozenset(cpuinfo().get("flags", "").split())


#: The CPU flags each of ATen's x86 kernel levels needs (its own dispatch check).
LEVEL_FLAGS = {"AVX512": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
               "AVX2": frozenset({"avx2", "fma"})}


def host_capability() -> str:
    """The highest ATen kernel level this CPU runs (what torch picks without a pin), read
    from the CPU's flags: a process under the portable profile reports AVX2 whatever the
    CPU can do."""
    flags = cpu_flags()
    return next((level for level, need in LEVEL_FLAGS.items() if need <= flags), "DEFAULT")


def mkl_branch() -> int | None:
    """MKL's numerical-reproducibility branch in this process (``mkl_cbwr_get``), or None when
    torch carries no MKL whose branch can be read."""
    import torch  # noqa: PLC0415 (torch's import must follow the profile's environment)

    if not torch.backends.mkl.is_available():
        return None
    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        get = ctypes.CDLL(str(lib)).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    return int(get(MKL_CBWR_BRANCH))


def check_portable(key: str) -> str:
    """Prove the portable profile holds in this process; return the line saying so.

    Raises KernelProfileError naming what was found when ATen runs another kernel family
    (a CPU without AVX2, or a torch that ignored ``ATEN_CPU_CAPABILITY``) or MKL another
    branch. ``key`` is the parameter that chose the profile (``train.cpu_kernels``).
    """
    import torch  # noqa: PLC0415 (see mkl_branch)

    fix = (f"set {key}: native to run here (its result then reproduces on this CPU kind "
           "only; docs/reproducibility.md)")
    found = torch.backends.cpu.get_cpu_capability()
    if found != "AVX2":
        why = ("this CPU has no AVX2" if "avx2" not in cpu_flags()
               else f"torch {torch.__version__} ignored ATEN_CPU_CAPABILITY=avx2")
        raise KernelProfileError(f"{key}: portable needs torch's AVX2 CPU kernels, but {why} "
                                 f"(it runs {found}): {fix}")
    branch = mkl_branch()
    if branch != MKL_CBWR_COMPATIBLE:
        what = ("torch here carries no MKL whose branch can be pinned" if branch is None
                else f"MKL ignored MKL_CBWR=COMPATIBLE (branch {branch})")
        raise KernelProfileError(f"{key}: portable needs MKL's COMPATIBLE branch, but {what}: "
                                 f"{fix}")
    return describe("portable")


def describe(profile: str) -> str:
    """One line for a stage's log: the profile and what it pins."""
    if profile == "portable":
        return f"portable ({PORTABLE_TEXT})"
    cap = os.environ.get("ATEN_CPU_CAPABILITY")
    return "native (this CPU's own kernels" + (f", ATEN_CPU_CAPABILITY={cap}" if cap else "") + ")"
