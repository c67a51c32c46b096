"""The golden tiny training on other CPUs than this one, under qemu's CPU models (issue 49).

    apt-get install qemu-user          # Debian's qemu 7.2: its TCG runs AVX2 (not AVX-512)
    python tools/cpu_models.py --models Haswell EPYC --profiles portable native

Each run is ``python -m tests.programs.golden_training`` under ``qemu-x86_64 -cpu MODEL``,
which shows the program that model's CPUID (vendor, family, flags): MKL picks its kernels
from the vendor, ATen from the flags, exactly as on such a host, while the arithmetic is
qemu's IEEE emulation. ``native`` (this host, no emulation) is the first row. The table says
per profile whether every run gave the pinned bytes of ``tests/golden_training.json``.
Slow (minutes per model: instructions are emulated); not part of the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seqcore.kernels import profile_env  # noqa: E402


def run_golden(model: str | None, profile: str) -> tuple[str, float]:
    """(sha256 of all weights, seconds) of the golden training under qemu's ``model`` (None:
    this host, natively) and CPU kernel ``profile``."""
    env = profile_env(profile, dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *sys.path[1:]])
    python = os.path.realpath(sys.executable)  # qemu runs the interpreter, not the venv link
    cmd = [python, "-m", "tests.programs.golden_training"]
    if model is not None:
        cmd = [shutil.which("qemu-x86_64") or "qemu-x86_64", "-cpu", model, *cmd]
    started = time.monotonic()
    res = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"{model or 'this host'} / {profile} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout)["all"], time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["Haswell", "EPYC"],
                        help="qemu -cpu models (qemu-x86_64 -cpu help lists them)")
    parser.add_argument("--profiles", nargs="+", default=["portable", "native"],
                        choices=["portable", "native"])
    args = parser.parse_args()
    pinned = json.loads((REPO / "tests" / "golden_training.json").read_text())["digests"]["all"]
    print("| CPU | profile | sha256 of the weights | = pin | seconds |\n|---|---|---|---|---:|")
    for profile in args.profiles:
        for model in [None, *args.models]:
            digest, seconds = run_golden(model, profile)
            print(f"| {model or 'this host'} | {profile} | `{digest[:16]}` | "
                  f"{'yes' if digest == pinned else 'no'} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
