"""seqcore.determinism: deterministic kernels switched on, and what switching them on costs."""

from __future__ import annotations

import sys

import torch

from seqcore.determinism import deterministic_kernels
from tests.factories import REPO
from tests.pipeline_helpers import run_python

PROBE = ("import sys, torch; from seqcore.determinism import set_determinism; "
         "set_determinism(0, 1); print(torch.are_deterministic_algorithms_enabled(), "
         "torch.is_deterministic_algorithms_warn_only_enabled(), 'torch._inductor' in sys.modules)")


def test_set_determinism_makes_kernels_deterministic_without_importing_the_inductor() -> None:
    # a fresh interpreter, as a stage starts: the Inductor's import was 1.1 s of each start
    res = run_python(REPO, "-c", PROBE, python=sys.executable)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "False", "False"]


def test_an_imported_inductor_gets_the_deterministic_flag_too() -> None:
    import torch._inductor.config as inductor  # noqa: PLC0415 (the branch under test)

    torch.use_deterministic_algorithms(False)
    assert not inductor.deterministic
    try:
        deterministic_kernels()
        assert inductor.deterministic and torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(True)
