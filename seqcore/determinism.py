"""Devices and deterministic kernels: one place that decides where tensors live and how.

``resolve_device`` turns a ``train.device``/``decode.device`` spec (auto, cpu, cuda, cuda:N)
into a ``torch.device``; only its *kind* (cpu/cuda) enters the training contract, because the
kind changes the float results while the GPU index does not. ``set_determinism`` seeds every
global RNG and switches on deterministic kernels, on CUDA too: cuBLAS needs a fixed workspace
(``CUBLAS_WORKSPACE_CONFIG``, set before the first cuBLAS call, see
https://docs.nvidia.com/cuda/cublas/#results-reproducibility) and cuDNN must neither
benchmark nor pick non-deterministic algorithms.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

#: The cuBLAS workspace setting that makes its GEMMs deterministic (":16:8" also works).
CUBLAS_WORKSPACE = ":4096:8"


class DeviceUnavailable(RuntimeError):
    """The configured device does not exist on this machine."""


def device_kind(spec: str) -> str:
    """The kind (``cpu`` or ``cuda``) a spec resolves to; ``auto`` asks this machine."""
    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return spec.split(":", 1)[0]


def backend_for(kind: str, nproc: int) -> str:
    """The collective backend of a run: none (1 process), nccl (CUDA) or gloo (CPU)."""
    if nproc == 1:
        return "none"
    return "nccl" if kind == "cuda" else "gloo"


def resolve_device(spec: str, local_rank: int = 0) -> torch.device:
    """The device of a spec; under multi-process CUDA each rank takes ``cuda:local_rank``.

    Raises DeviceUnavailable (one line) when CUDA or the requested index is missing.
    """
    kind = device_kind(spec)
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceUnavailable(f"device {spec!r}: CUDA is not available on this machine "
                                "(torch.cuda.is_available() is False); use cpu or auto")
    index = int(spec.split(":", 1)[1]) if ":" in spec else local_rank
    if index >= torch.cuda.device_count():
        raise DeviceUnavailable(f"device {spec!r} (index {index}): this machine has "
                                f"{torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def deterministic_kernels() -> None:
    """Switch on torch's deterministic kernels (``torch.use_deterministic_algorithms(True)``).

    torch's public call also sets the Inductor's flag, and importing the Inductor for it
    costs 1.1 s (sympy, dynamo) in a process that builds no optimizer (decode, evaluate, the
    served model; a torch optimizer imports it anyway); seqcore compiles nothing, so the flag
    is set on the Inductor only where something has already imported it.
    """
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=False)


def set_determinism(seed: int, threads: int, device: torch.device | None = None) -> None:
    """Seed python, numpy and torch (CPU and CUDA) and force deterministic kernels."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # harmless on CPU
    if device is not None and device.type == "cuda":
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cuda.matmul.allow_tf32 = False  # TF32 changes results by GPU generation
        torch.backends.cudnn.allow_tf32 = False
        torch.cuda.set_device(device)
    deterministic_kernels()
    torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too
