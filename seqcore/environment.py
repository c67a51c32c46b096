"""The producing environment of a result: interpreter, platform, torch build, the CPU's vector
instruction set as torch uses it, the CPU model, package set.

Recorded in the MLflow run (tags ``env.*``); the audit compares the record with the
environment it runs in, because a different torch build, package set or CPU capability can
change floating-point results without any code change: the default model trained on an AVX2
host and on an AVX-512 host parts at step 3, in the 7th digit of the loss (the CPU kernels
sum in another order), and ends as another model; so does one trained on an AMD and on an
Intel AVX-512 host (the BLAS and oneDNN kernels differ by CPU model; docs/reproducibility.md).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
from dataclasses import asdict, dataclass
from typing import Any

import torch

from seqcore.kernels import cpuinfo


@dataclass(frozen=True)
class Environment:
    """What produced a file; ``packages_sha256`` hashes the sorted ``name==version`` list."""

    python: str
    platform: str
    torch: str
    torch_build: str
    cpu_capability: str  # torch's CPU kernel level: AVX2, AVX512, DEFAULT, ...
    cpu: str  # the CPU model (/proc/cpuinfo's model name): AMD and Intel differ at one level
    packages_sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def installed_packages() -> list[str]:
    """Sorted, de-duplicated ``name==version`` of every installed distribution (each
    METADATA file parsed once: ``Distribution.version`` would parse it again)."""
    found = {f"{(meta['Name'] or '').lower().replace('_', '-')}=={meta['Version']}"
             for meta in (d.metadata for d in importlib.metadata.distributions())}
    return sorted(found)


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo; elsewhere what ``platform`` says)."""
    return cpuinfo().get("model name") or platform.processor() or "unknown"


@functools.cache
def producing_environment() -> Environment:
    """The environment of the running process (computed once: reading every installed
    distribution's metadata takes 0.6 s, and the package set does not change while it runs)."""
    build = f"cuda-{torch.version.cuda}" if torch.version.cuda else "cpu"
    listing = "\n".join(installed_packages()).encode("utf-8")
    return Environment(python=platform.python_version(), platform=platform.platform(),
                       torch=str(torch.__version__), torch_build=build,
                       cpu_capability=torch.backends.cpu.get_cpu_capability(),
                       cpu=cpu_model(),
                       packages_sha256=hashlib.sha256(listing).hexdigest())


def environment_diffs(place: str, recorded: dict[str, Any] | None,
                      current: Environment) -> list[str]:
    """Fields where ``recorded`` (an ``Environment.as_dict()`` kept in ``place``) differs
    from ``current``; a place with no record is one difference."""
    if not recorded:
        return [f"{place} records no producing environment"]
    return [f"{key}: {place} has {recorded.get(key)!r}, this audit runs {value!r}"
            for key, value in current.as_dict().items() if recorded.get(key) != value]
